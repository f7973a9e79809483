from __future__ import annotations

from django.urls import URLPattern, path

from identity import passkey_views, views

urlpatterns: list[URLPattern] = [
    path("sso/login/", views.SsoStartView.as_view(), name="sso-login"),
    # The redirect URI registered at the provider: <COUNTERSIGN_PUBLIC_URL>/sso/callback/.
    path("sso/callback/", views.SsoCallbackView.as_view(), name="sso-callback"),
    path("account/", passkey_views.account, name="account"),
    path("account/passkeys/options", passkey_views.registration_options, name="passkey-options"),
    path("account/passkeys/", passkey_views.registration, name="passkey-add"),
    path(
        "account/passkeys/<int:passkey_id>/remove",
        passkey_views.removal,
        name="passkey-remove",
    ),
    path("passkeys/sign-in/options", passkey_views.sign_in_options, name="passkey-sign-in-options"),
    path("passkeys/sign-in", passkey_views.sign_in, name="passkey-sign-in"),
    path(
        "calls/<uuid:call_id>/passkey/<str:verb>",
        passkey_views.step_up_options,
        name="passkey-step-up",
    ),
]
