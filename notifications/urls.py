from __future__ import annotations

from django.conf import settings
from django.urls import URLPattern, path

urlpatterns: list[URLPattern] = []

# make run's own webhook receiver, for the demo's webhook channel (notifications/demo.py).
if settings.DEBUG:
    from notifications.demo import demo_webhook

    urlpatterns.append(path("demo/webhook", demo_webhook, name="demo-webhook"))
