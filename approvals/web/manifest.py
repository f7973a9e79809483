"""The web app manifest (``/manifest.webmanifest``): with it and the icons in ``static/img/``
a phone adds the queue to its home screen, opening it in a window of its own."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.templatetags.static import static
from django.views.decorators.http import require_safe

CONTENT_TYPE = "application/manifest+json"
THEME_COLOR = "#2f6f73"  # the icon's


def manifest(request: HttpRequest) -> HttpResponse:
    document = {
        "name": "Countersign",
        "short_name": "Countersign",
        "description": "Approve or deny the calls your AI agents are holding for you.",
        "id": "/",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#ffffff",
        "theme_color": THEME_COLOR,
        "icons": [
            {"src": static("img/icon-192.png"), "sizes": "192x192", "type": "image/png"},
            {"src": static("img/icon-512.png"), "sizes": "512x512", "type": "image/png"},
            {
                "src": static("img/icon-maskable-512.png"),
                "sizes": "512x512",
                "type": "image/png",
                "purpose": "maskable",
            },
            {"src": static("img/countersign.svg"), "sizes": "any", "type": "image/svg+xml"},
        ],
    }
    response = HttpResponse(json.dumps(document, indent=2), content_type=CONTENT_TYPE)
    # The icons' names change with them (hashed static names): an hour, then ask again.
    response["Cache-Control"] = "public, max-age=3600"
    return response


web_manifest = require_safe(manifest)
