from __future__ import annotations

from django.urls import URLPattern, path

from approvals.web import insights_page, views

urlpatterns: list[URLPattern] = [
    path("", views.queue, name="queue"),
    path("history/", views.history, name="history"),
    path("insights/", insights_page.insights, name="insights"),
    path("calls/decide", views.calls_decide_many, name="calls-decide"),
    path("calls/<uuid:call_id>/", views.call_detail, name="call-detail"),
    path("calls/<uuid:call_id>/approve", views.call_approve, name="call-approve"),
    path("calls/<uuid:call_id>/deny", views.call_deny, name="call-deny"),
    path("calls/<uuid:call_id>/extend", views.call_extend_deadline, name="call-extend"),
]
