"""The shape of `podium.serve` (docs/serving.md, "How the package is laid out"), read from the
source: its modules import each other without a cycle, each API's package (chat/,
responses/) imports no other API's, and the shared modules import no API's package, save the
app that routes to them."""

from __future__ import annotations

import ast
from pathlib import Path

SERVE = Path(__file__).resolve().parents[2] / "podium" / "serve"
APIS = ("chat", "responses")


def _module(path: Path) -> str:
    parts = path.relative_to(SERVE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Each serve module and the serve modules it imports (lazy imports too)."""
    modules = {_module(p): p for p in SERVE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def _api(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in APIS else None


def test_serve_modules_import_each_other_without_a_cycle():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if target == "podium.serve" or name.startswith(target + "."):
                continue  # a package's own __init__, imported on the way to its modules
            assert state.get(target) != 1, f"import cycle: {' -> '.join([*path, target])}"
            if target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_each_api_is_one_package_that_the_shared_modules_do_not_import():
    for name, targets in _graph().items():
        for target in targets:
            api = _api(target)
            if api is None or api == _api(name) or name == "podium.serve.app":
                continue
            raise AssertionError(f"{name} imports {target}: only the app and the "
                                 f"{api} package itself may")
