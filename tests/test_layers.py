"""podium's dependency rules (docs/DESIGN.md, "Which part may use which"), read from the source:
every `import podium...` in every module, lazy ones and type-checking ones included, points to
a part of the same layer or a lower one; eval, train and serve never import each other; torch,
transformers and trl are imported only under train/ and by the in-process checkpoint backend;
fastapi only under serve/."""

from __future__ import annotations

import ast
from pathlib import Path

PODIUM = Path(__file__).resolve().parents[1] / "podium"

LAYERS = [
    {"redact", "errors", "config", "settings", "files", "printable", "workflow.types"},
    {"llm", "scoring"},
    {"workflow", "conductor"},
    {"tasks"},
    {"outcome", "acting", "pipeline", "baselines", "checkpoint", "viewer"},
    {"eval", "train", "serve"},
    {"cli"},
]
APART = {"eval", "train", "serve"}  # the three jobs: never each other
TORCH = {"torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "vllm"}


def part(module: str) -> str:
    """The part of podium a dotted module name (without `podium.`) belongs to."""
    if module in ("workflow.types",):
        return module
    return module.split(".")[0]


def layer(name: str) -> int:
    return next(i for i, parts in enumerate(LAYERS) if name in parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """Every module `path` imports, with its line."""
    tree = ast.parse(path.read_text(), str(path))
    here = path.relative_to(PODIUM.parent).with_suffix("").parts
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = list(here[:-node.level])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
            out += [(f"{name}.{alias.name}", node.lineno) for alias in node.names
                    if name == "podium"]
    return out


def modules() -> list[tuple[Path, str]]:
    found = []
    for path in sorted(PODIUM.rglob("*.py")):
        rel = ".".join(path.relative_to(PODIUM).with_suffix("").parts)
        if rel.split(".")[0] in ("testing", "__init__", "__main__"):
            continue  # test support, and the package's own re-exports
        found.append((path, rel))
    return found


def test_every_podium_import_points_down_or_sideways():
    broken = []
    for path, rel in modules():
        mine = part(rel)
        for name, line in imports(path):
            if not name.startswith("podium."):
                continue
            target = part(name.removeprefix("podium."))
            if target in ("testing", "py"):
                continue
            if layer(target) > layer(mine):
                broken.append(f"{rel}:{line} imports {name} (a higher layer)")
            elif mine in APART and target in APART and target != mine:
                broken.append(f"{rel}:{line} imports {name} ({mine} never imports {target})")
    assert not broken, "\n".join(broken)


def test_torch_only_under_train_and_the_checkpoint_backend_and_fastapi_only_under_serve():
    broken = []
    for path, rel in modules():
        for name, line in imports(path):
            root = name.split(".")[0]
            if root in TORCH and part(rel) != "train" and rel != "llm.transformers_local":
                broken.append(f"{rel}:{line} imports {name}")
            if root in ("fastapi", "starlette") and part(rel) != "serve":
                broken.append(f"{rel}:{line} imports {name}")
    assert not broken, "\n".join(broken)
