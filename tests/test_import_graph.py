"""Dependencies point one way (docs/architecture.md): ``approvals`` reaches ``notifications``
through one function, the outbox's ``notifications_enqueue``, and no module of the project
takes part in an import cycle. Every import counts: at the top of a module, inside a
function, or for type checking only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("approvals", "notifications", "identity", "config", "capcore")
# The one way in: a message enqueued in the caller's transaction.
SEAM = "notifications.outbox.notifications_enqueue"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(source: str, *, module: str, package: bool) -> list[str]:
    """Every name ``source`` imports, in full: ``from a.b import c`` is ``a.b.c``."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if package else module.split(".")[:-1]
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _sources() -> dict[str, tuple[str, bool]]:
    """Each module of the project: its source, and whether it is a package."""
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imports(sources: dict[str, tuple[str, bool]]) -> dict[str, list[str]]:
    return {
        module: _imported(source, module=module, package=package)
        for module, (source, package) in sources.items()
    }


def _graph(imports: dict[str, list[str]]) -> dict[str, set[str]]:
    """Which modules of the project each one imports (a name imported from a module counts as
    that module)."""
    graph: dict[str, set[str]] = {}
    for module, names in imports.items():
        targets = set()
        for name in names:
            while name and name not in imports:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import one another, directly or around a loop: the strongly connected
    components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _past_the_seam(imports: dict[str, list[str]]) -> list[str]:
    """The imports of ``notifications`` by ``approvals`` other than the seam."""
    return [
        f"{module} imports {name}"
        for module, names in sorted(imports.items())
        if module == "approvals" or module.startswith("approvals.")
        for name in names
        if (name == "notifications" or name.startswith("notifications.")) and name != SEAM
    ]


def test_approvals_reaches_notifications_through_the_seam_only() -> None:
    imports = _imports(_sources())
    assert _past_the_seam(imports) == []
    assert any(SEAM in names for module, names in imports.items() if module.startswith("approvals"))


def test_no_module_of_the_project_takes_part_in_an_import_cycle() -> None:
    assert _cycles(_graph(_imports(_sources()))) == []


def test_the_checks_catch_a_cycle_and_an_import_past_the_seam() -> None:
    sources = {
        "approvals": ("", True),
        "approvals.a": ("from approvals import b\n", False),
        "approvals.b": ("def f():\n    from .c import g\n", False),
        "approvals.c": ("if TYPE_CHECKING:\n    import approvals.a\n", False),
        "approvals.d": ("from notifications.models import Notification\n", False),
        "approvals.e": ("from notifications.outbox import notifications_enqueue\n", False),
        "notifications": ("", True),
        "notifications.models": ("from approvals.a import x\n", False),
        "notifications.outbox": ("from . import models\n", False),
    }
    imports = _imports(sources)
    assert _cycles(_graph(imports)) == [["approvals.a", "approvals.b", "approvals.c"]]
    assert _graph(imports)["notifications.outbox"] == {"notifications.models"}
    assert _past_the_seam(imports) == [
        "approvals.d imports notifications.models.Notification",
    ]
