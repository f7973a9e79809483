"""Admin writes nothing itself: every save and delete it makes goes through a service, which
audits it. No module of ``approvals/admin/``, nor ``notifications/admin.py``, imports the audit
log's writer, builds an ``AuditEntry`` or saves or deletes a row."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import approvals.admin
import notifications.admin

ADMIN = Path(approvals.admin.__file__).parent
NOTIFICATIONS_ADMIN = Path(notifications.admin.__file__)
AUDIT_WRITER = "approvals.services.audit"
WRITES = frozenset(
    {"save", "delete", "create", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
)


def _writes(source: str) -> list[str]:
    """What in ``source`` writes past the services: an import of the audit log's writer, an
    ``AuditEntry`` built, a row saved, created or deleted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            named = {module} | {f"{module}.{alias.name}" for alias in node.names}
            if AUDIT_WRITER in named:
                found.append(f"line {node.lineno}: imports {AUDIT_WRITER}")
        elif isinstance(node, ast.Import):
            if any(alias.name.startswith(AUDIT_WRITER) for alias in node.names):
                found.append(f"line {node.lineno}: imports {AUDIT_WRITER}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "AuditEntry":
                found.append(f"line {node.lineno}: builds an AuditEntry")
            elif isinstance(func, ast.Attribute) and func.attr in WRITES:
                found.append(f"line {node.lineno}: calls .{func.attr}()")
    return found


def _modules() -> list[Path]:
    return [*sorted(ADMIN.rglob("*.py")), NOTIFICATIONS_ADMIN]


def test_the_admin_package_has_one_module_per_area() -> None:
    names = {path.stem for path in ADMIN.rglob("*.py")}
    assert {"rules", "gates", "agents", "calls", "audit", "people"} <= names


@pytest.mark.parametrize("module", _modules(), ids=lambda path: path.stem)
def test_no_admin_module_writes_past_the_services(module: Path) -> None:
    assert _writes(module.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "from approvals.services.audit import audit_record",
        "from approvals.services import audit",
        "import approvals.services.audit",
        "AuditEntry(action='admin add')",
        "AuditEntry.objects.create(action='admin add')",
        "obj.save()",
        "obj.delete()",
        "Gate.objects.get_or_create(name='ops')",
    ],
)
def test_the_check_finds_each_kind_of_write(source: str) -> None:
    assert _writes(source) != []


def test_the_check_lets_reads_and_services_through() -> None:
    source = (
        "from approvals.models import AuditEntry\n"
        "from approvals.services.admin_changes import model_save\n"
        "AuditEntry.objects.filter(user=user).exists()\n"
        "model_save(instance=obj, actor=user)\n"
    )
    assert _writes(source) == []
