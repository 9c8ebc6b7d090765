"""The layout's rules: small modules, a pure core, no import cycles (see README, Layout)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

CHAT = Path(__file__).resolve().parent.parent / "chat"
MAX_LINES = 400


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(CHAT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(CHAT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports at its top level (imports inside functions
    are deferred, so they make no cycle at import time)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found & known


def test_no_module_is_over_400_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules()}
    assert {name: size for name, size in sizes.items() if size > MAX_LINES} == {}


def in_core(module: str) -> bool:
    """`chat.agent` and its modules; not `chat.agents`, which is Django's side."""
    return module == "chat.agent" or module.startswith("chat.agent.")


def test_the_agent_core_imports_nothing_from_django_or_the_rest_of_chat() -> None:
    for name, path in modules():
        if not in_core(name):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for imported in names:
                assert not imported.startswith(("django", "channels", "daphne")), (name, imported)
                if imported.startswith("chat"):
                    assert in_core(imported), (name, imported)


def test_the_import_graph_has_no_cycles() -> None:
    known = dict(modules())
    graph = {name: imports(name, path, set(known)) - {name} for name, path in known.items()}
    state: dict[str, str] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []
