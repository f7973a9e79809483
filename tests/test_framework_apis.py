"""Application code uses the frameworks through their documented APIs only: an allow-list of
the modules it may import from, and a deny-list of undocumented attributes it must not reach
(docs/architecture.md). Only config/runtime/ may reach further, each reach listed in its
README and watched by its early-warning tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPLICATION = ("approvals", "notifications", "capcore", "config", "clients/python/countersign")

# Packages whose internals an upgrade may change under us.
FRAMEWORKS = frozenset(
    {
        "django",
        "channels",
        "channels_redis",
        "asgiref",
        "ninja",
        "django_htmx",
        "template_partials",
        "axes",
        "uvicorn",
        "daphne",
        "mcp",
    }
)

# The documented modules application code may import from. A module missing here is either
# documented (add it, with the page that documents it in mind) or an internal (keep it out).
ALLOWED_MODULES = frozenset(
    {
        "django",
        "django.apps",
        "django.conf",
        "django.contrib",
        "django.contrib.admin",
        "django.contrib.admin.actions",
        "django.contrib.admin.forms",
        "django.contrib.admin.utils",
        "django.contrib.auth",
        "django.contrib.auth.admin",
        "django.contrib.auth.backends",
        "django.contrib.auth.decorators",
        "django.contrib.auth.forms",
        "django.contrib.auth.hashers",
        "django.contrib.auth.models",
        "django.contrib.auth.signals",
        "django.contrib.auth.views",
        "django.contrib.contenttypes.fields",
        "django.contrib.contenttypes.models",
        "django.contrib.messages",
        "django.contrib.sessions.backends.base",
        "django.contrib.sessions.backends.db",
        "django.contrib.sessions.models",
        "django.core",
        "django.core.checks",
        "django.core.exceptions",
        "django.core.handlers.asgi",
        "django.core.mail",
        "django.core.mail.backends.base",
        "django.core.management",
        "django.core.management.base",
        # Subclassed to override runserver, as Django's "Overriding commands" describes.
        "django.core.management.commands.runserver",
        "django.core.paginator",
        "django.core.signing",
        "django.core.validators",
        "django.db",
        "django.db.models",
        "django.db.models.deletion",
        "django.db.models.functions",
        "django.db.models.signals",
        "django.db.transaction",
        "django.dispatch",
        "django.forms",
        "django.http",
        "django.http.request",
        "django.middleware.csrf",
        "django.shortcuts",
        "django.template",
        "django.template.defaultfilters",
        "django.template.loader",
        "django.template.response",
        "django.templatetags.static",
        "django.test",
        "django.urls",
        "django.utils",
        "django.utils.crypto",
        "django.utils.dateparse",
        "django.utils.decorators",
        "django.utils.functional",
        "django.utils.html",
        "django.utils.http",
        "django.utils.module_loading",
        "django.utils.safestring",
        "django.utils.timezone",
        "django.utils.translation",
        "django.views.decorators.cache",
        "django.views.decorators.csrf",
        "django.views.decorators.http",
        "django_htmx.http",
        "django_htmx.middleware",
        "channels.auth",
        "channels.consumer",
        "channels.db",
        "channels.exceptions",
        "channels.generic.http",
        "channels.generic.websocket",
        "channels.layers",
        "channels.routing",
        "channels.security.websocket",
        "channels_redis.core",
        "asgiref.sync",
        "asgiref.typing",
        "ninja",
        "ninja.errors",
        "ninja.security",
        "ninja.security.http",
        "axes.admin",
        "axes.backends",
        "axes.exceptions",
        "axes.handlers.proxy",
        "axes.models",
        "axes.signals",
        "uvicorn",
        "mcp",
        "mcp.client.stdio",
        "mcp.client.streamable_http",
        "mcp.server.context",
        "mcp.server.lowlevel",
        "mcp.server.stdio",
        "mcp.shared.exceptions",
        "mcp.types",
    }
)

# Documented APIs hand these to custom expressions (``as_sql(compiler, connection)``): they
# may be named in annotations, under ``TYPE_CHECKING``, and nowhere else.
TYPING_ONLY = frozenset({"django.db.models.sql.compiler", "django.db.backends.base.base"})

# Undocumented attributes of framework objects: the template engine's render context, the
# backend's raw cursor, and the ORM's query internals.
DENIED_ATTRIBUTES = frozenset(
    {"render_context", "create_cursor", "get_compiler", "compiler", "where", "alias_map"}
)


def _modules() -> list[Path]:
    return [
        path
        for folder in APPLICATION
        if (ROOT / folder).exists()
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "config/runtime" not in path.relative_to(ROOT).as_posix()
        and "/migrations/" not in path.relative_to(ROOT).as_posix()
    ]


def _typing_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:``."""
    return {
        statement
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for statement in node.body
        if isinstance(statement, ast.Import | ast.ImportFrom)
    }


def _imported(tree: ast.Module) -> list[tuple[int, str, bool]]:
    """Each imported module: its line, its name, and whether only annotations use it."""
    typing = _typing_only(tree)
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, node in typing))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, node in typing) for alias in node.names]
    return found


def offenders(paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        where = path.relative_to(root)
        for line, module, typing in _imported(tree):
            allowed = ALLOWED_MODULES | TYPING_ONLY if typing else ALLOWED_MODULES
            if module.split(".")[0] in FRAMEWORKS and module not in allowed:
                found.append(f"{where}:{line}: imports {module}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in DENIED_ATTRIBUTES:
                found.append(f"{where}:{node.lineno}: reaches .{node.attr}")
    return found


def test_application_code_uses_only_the_frameworks_documented_apis() -> None:
    assert offenders(_modules()) == []


def test_the_check_finds_an_internal_module_and_an_undocumented_attribute(tmp_path: Path) -> None:
    code = tmp_path / "reach.py"
    code.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from django.db.models.sql.compiler import SQLCompiler\n"
        "from django.db.models.sql.compiler import SQLCompiler\n"
        "import django.db.backends.sqlite3.base\n"
        "from django.db import connection\n"
        "cursor = connection.create_cursor()\n"
        "def tag(context):\n"
        "    return context.render_context\n"
    )
    assert offenders([code], tmp_path) == [
        "reach.py:4: imports django.db.models.sql.compiler",
        "reach.py:5: imports django.db.backends.sqlite3.base",
        "reach.py:7: reaches .create_cursor",
        "reach.py:9: reaches .render_context",
    ]
