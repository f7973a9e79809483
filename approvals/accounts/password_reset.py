"""Password reset requests (``/accounts/password_reset/``), Django's view with two changes.

- **The link comes from ``COUNTERSIGN_PUBLIC_URL``**, never from the request: Django's own
  builds it from the ``Host`` header, and ``ALLOWED_HOSTS`` does not look at the port, so a
  request for ``127.0.0.1:8443`` would have mailed a link to whatever listens there.
- **Requests are throttled** per email address and per client address
  (``throttle.password_reset_allowed``). Every valid request gets the same answer, the "check
  your mail" page, whether the address has an account, whether a mail went out, and whether
  the request was over a limit: the page tells nobody which addresses have accounts.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.views import PasswordResetView
from django.http import HttpResponse, HttpResponseRedirect

from approvals.accounts.throttle import password_reset_allowed

SITE_NAME = "Countersign"


class PublicUrlPasswordResetView(PasswordResetView):
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"

    def form_valid(self, form: PasswordResetForm) -> HttpResponse:
        if password_reset_allowed(request=self.request, email=form.cleaned_data["email"]):
            public = urlsplit(settings.COUNTERSIGN_PUBLIC_URL)
            form.save(
                # Given, so that Django never reads the request's Host for the mail.
                domain_override=public.netloc,
                use_https=public.scheme == "https",
                token_generator=self.token_generator,
                from_email=self.from_email,
                email_template_name=self.email_template_name,
                subject_template_name=self.subject_template_name,
                request=self.request,
                html_email_template_name=None,
                extra_email_context={
                    "site_name": SITE_NAME,
                    "public_url": settings.COUNTERSIGN_PUBLIC_URL,
                },
            )
        return HttpResponseRedirect(self.get_success_url())
