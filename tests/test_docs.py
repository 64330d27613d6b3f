"""The documentation: the site builds with no warning (`mkdocs build --strict`: every page in
the nav, every link between pages, every docstring docs/api.md renders), and every relative
link in README.md and docs/ points to a file (and heading) that exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)
    return [m[1] for m in LINK.finditer(text)]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it (and MkDocs, for these headings)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+?)\s*#*$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_no_code_span_is_written_twice_in_a_row():
    doubled = [f"{p.name}: {m[0]}" for p in PAGES
               for m in re.finditer(r"(`[^`\n]+`)\1", p.read_text(encoding="utf-8"))]
    assert not doubled


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the docs extra: pip install -e '.[docs]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    api = (tmp_path / "site" / "api.html").read_text(encoding="utf-8")
    for name in ("podium.Pipeline.ask", "podium.outcome.Outcome", "podium.workflow.execute.Caps",
                 "podium.serve.app.create_app", "podium.train.trainer.train"):
        assert f'id="{name}"' in api, name  # each documented from its docstring
    assert (tmp_path / "site" / "concepts.html").is_file()
