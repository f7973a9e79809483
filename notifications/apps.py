from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals.services.demo import demo_prepared
        from notifications import checks, metrics  # noqa: F401 (registers the check and series)
        from notifications.demo import demo_prepared_received

        demo_prepared.connect(demo_prepared_received, dispatch_uid="notifications-demo")
