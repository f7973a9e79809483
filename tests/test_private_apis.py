"""Private Django and Channels APIs are used in config/runtime/ only (docs/architecture.md):
everywhere else, an upgrade of a dependency cannot break what it never reached into."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Documented although spelled with an underscore: the Model _meta API, Model._state and
# Model._default_manager; and the standard library's os._exit, which ends the process from any
# thread.
DOCUMENTED = frozenset({"_meta", "_state", "_default_manager", "_exit"})
SELVES = frozenset({"self", "cls"})


def _modules() -> list[Path]:
    paths = [
        p
        for folder in (
            "approvals",
            "notifications",
            "capcore",
            "clients/python/countersign",
            "config",
        )
        for p in (ROOT / folder).rglob("*.py")
    ]
    return [p for p in paths if "config/runtime" not in p.relative_to(ROOT).as_posix()]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _named_in_call(node: ast.AST, functions: set[str]) -> str | None:
    """The constant attribute name given to ``getattr(x, "name")`` and the like."""
    if not isinstance(node, ast.Call) or getattr(node.func, "id", "") not in functions:
        return None
    if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
        return None
    return str(node.args[1].value)


def _own_names(trees: list[ast.Module]) -> set[str]:
    """Private names this project defines itself: its functions, classes and attributes."""
    own = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif (name := _named_in_call(node, {"setattr"})) is not None:
                own.add(name)
    return own


def _reaches(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            value = node.value
            if isinstance(value, ast.Name) and value.id in SELVES:
                continue
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[-1], *(alias.name for alias in node.names)]
            found += [(node.lineno, name) for name in names if _private(name)]
        elif isinstance(node, ast.Call):
            named = _named_in_call(node, {"getattr", "hasattr"})
            found += [(node.lineno, name) for name in [named] if name and _private(name)]
    return sorted(found)


def _offenders(paths: list[Path], root: Path = ROOT) -> list[str]:
    trees = {path: ast.parse(path.read_text()) for path in paths}
    allowed = DOCUMENTED | _own_names(list(trees.values()))
    return [
        f"{path.relative_to(root)}:{line}: {name}"
        for path, tree in trees.items()
        for line, name in _reaches(tree)
        if name not in allowed
    ]


def test_nothing_outside_config_runtime_reaches_into_a_private_api() -> None:
    assert _offenders(_modules()) == []


def test_the_finder_finds_a_private_api(tmp_path: Path) -> None:
    """What config/runtime does would be found anywhere else."""
    code = tmp_path / "reach.py"
    code.write_text(
        "from channels.layers import InMemoryChannelLayer\n"
        "def clean(layer: InMemoryChannelLayer) -> None:\n"
        "    layer._clean_expired()\n"
        "    getattr(layer, '_groups')\n"
        "from django.db.backends.sqlite3._functions import register\n"
    )
    assert [entry.split(": ")[1] for entry in _offenders([code], tmp_path)] == [
        "_clean_expired",
        "_groups",
        "_functions",
    ]


OURS = ("approvals", "notifications", "capcore", "countersign", "config")


def _written_in(cls: type, value: object) -> bool:
    """Whether ``value`` is a function written in ``cls``'s body (not an attribute that a
    metaclass sets, such as ABC's ``_abc_impl``)."""
    function = getattr(value, "__func__", value)
    return inspect.isfunction(function) and function.__qualname__.startswith(f"{cls.__qualname__}.")


def _overrides(module_names: list[str]) -> list[str]:
    """Private methods and attributes of a dependency's class that a class of ours
    replaces: an override is a reliance as much as a call."""
    found = []
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module_name:
                continue
            theirs = [base for base in cls.__mro__[1:] if not base.__module__.startswith(OURS)]
            found += [
                f"{module_name}.{cls.__name__}.{name}"
                for name, value in vars(cls).items()
                if _private(name)
                and _written_in(cls, value)
                and any(name in vars(base) for base in theirs)
            ]
    return found


def _module_names() -> list[str]:
    return [
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in _modules()
    ]


def test_no_class_outside_config_runtime_overrides_a_private_api() -> None:
    assert _overrides(_module_names()) == []


def test_the_override_finder_finds_an_override() -> None:
    assert _overrides(["config.runtime.memory_layer"]) == [
        "config.runtime.memory_layer.ThrottledInMemoryChannelLayer._clean_expired"
    ]
