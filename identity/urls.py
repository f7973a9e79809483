from __future__ import annotations

from django.urls import URLPattern, path

from identity import views

urlpatterns: list[URLPattern] = [
    path("sso/login/", views.SsoStartView.as_view(), name="sso-login"),
    # The redirect URI registered at the provider: <COUNTERSIGN_PUBLIC_URL>/sso/callback/.
    path("sso/callback/", views.SsoCallbackView.as_view(), name="sso-callback"),
]
