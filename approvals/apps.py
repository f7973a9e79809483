from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals.accounts import lockouts, receivers
        from approvals.ops import checks  # noqa: F401 (registers the checks)

        receivers.connect()  # people and groups are audited however they change
        lockouts.connect()  # a login lockout is audited as it begins
