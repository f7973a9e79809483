"""Django admin, one module per area; importing them registers their admins (Django imports
``approvals.admin`` at start-up).

Thin: every write goes through a service, which audits it; admin writes no audit entry
itself (``tests/approvals/test_admin_writes.py`` holds it to that). Calls, ledgers and the
audit log are read-only.
"""

from __future__ import annotations

from django.contrib import admin

from approvals.admin import agents, audit, calls, gates, people, rules

__all__ = ["agents", "audit", "calls", "gates", "people", "rules"]

# The header, the pages' titles and the index's heading say whose admin this is.
admin.site.site_header = "Countersign"
admin.site.site_title = "Countersign admin"
admin.site.index_title = "Countersign administration"
