"""The request the approver's pages are typed with: Django's, with the ``htmx`` attribute
django-htmx's middleware adds (the pattern django-htmx documents for type checkers)."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
