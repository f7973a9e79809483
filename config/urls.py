from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.decorators.csrf import csrf_exempt

from approvals.accounts.password_reset import PublicUrlPasswordResetView
from approvals.api.routes import api, api_not_found
from approvals.ops import views as ops_views
from approvals.receipts import views as receipt_views
from approvals.web.manifest import web_manifest
from config import bench
from identity import views as identity_views


def favicon_redirect(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for ``/favicon.ico`` on pages that link no icon (the admin, the API's
    docs): sent on to the icon in ``static/``, which WhiteNoise serves under its hashed,
    long-cached name. Not permanent, because that name changes with the icon."""
    return HttpResponseRedirect(static("img/favicon.ico"))


urlpatterns: list[URLPattern | URLResolver] = [
    # Admin's login page with single sign-on, and without a password form when passwords are
    # off (identity/views.py); before admin's own routes, which it stands in for.
    path("admin/login/", identity_views.admin_sign_in),
    path("admin/", admin.site.urls),
    path("favicon.ico", favicon_redirect),
    # The web app manifest: the queue on a phone's home screen (approvals/web/manifest.py).
    path("manifest.webmanifest", web_manifest, name="web-manifest"),
    # For load balancers and Prometheus, on a thread of their own (COUNTERSIGN_PATH_POOLS).
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics, name="metrics"),
    # The public keys that verify receipts and audit heads (docs/receipts.md).
    path(".well-known/jwks.json", receipt_views.jwks, name="jwks"),
    # After logging in: the queue (Django's default, /accounts/profile/, is no page here).
    # With single sign-on, and without a password form when passwords are off.
    path(
        "accounts/login/",
        identity_views.SignInView.as_view(next_page="/", redirect_authenticated_user=True),
        name="login",
    ),
    # Single sign-on with OpenID Connect (docs/identity.md).
    path("", include("identity.urls")),
    # Its mail's link from COUNTERSIGN_PUBLIC_URL, never the request's Host; throttled.
    path(
        "accounts/password_reset/",
        PublicUrlPasswordResetView.as_view(),
        name="password_reset",
    ),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("approvals.web.urls")),
    path("", include("notifications.urls")),
    # Under /api/ every unknown path is a JSON 404; ninja's own root view, which answers an
    # HTML one, is kept (ninja reverses it by name) but never reached.
    path("api/v1/", csrf_exempt(api_not_found)),
    path("api/v1/", api.urls),
    re_path(r"^api/", csrf_exempt(api_not_found)),
]

if settings.COUNTERSIGN_BENCH:
    urlpatterns.append(path("bench/bare", bench.bare))
