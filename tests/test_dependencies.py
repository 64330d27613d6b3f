"""Every third-party module podium imports belongs to a distribution pyproject.toml declares:
in `dependencies` for the core, in an extra for what only some installs need. An import that
works only because another package pulled its distribution in breaks on the first install
where that package is absent or drops it."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from test_layers import PODIUM, imports

ROOT = PODIUM.parent
# modules podium imports that are not distributions of their own on PyPI
NOT_DISTRIBUTIONS = {"podium"}


def declared() -> set[str]:
    """Every distribution pyproject.toml names, core and extras, normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    names = {re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0] for spec in specs}
    return {normal(n) for n in names}


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_is_a_declared_distribution():
    owners = packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    wanted, missing = declared(), []
    for path in sorted(PODIUM.rglob("*.py")):
        for name, line in imports(path):
            top = name.split(".")[0]
            if not top or top in stdlib or top in NOT_DISTRIBUTIONS or top.startswith("_"):
                continue
            dists = {normal(d) for d in owners.get(top, [])}
            if not dists:
                continue  # not installed here (a GPU-only package): nothing to check it by
            if not dists & wanted:
                missing.append(f"{path.relative_to(ROOT)}:{line} imports {name}, from "
                               f"{' or '.join(sorted(dists))}, which pyproject.toml does not "
                               "declare")
    assert not missing, "\n".join(missing)
