from __future__ import annotations

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """Who a person is at the identity provider: the issuer and its ``sub``, which never
    changes when the provider renames them. Made at their first single sign-on."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class Passkey(models.Model):
    """A person's WebAuthn credential: its id and public key as registered, and the
    authenticator's signature counter, checked and moved on at every use."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys"
    )
    name = models.CharField(max_length=64)
    # base64url, as WebAuthn's JSON spells it; at most 1023 bytes.
    credential_id = models.CharField(max_length=1400, unique=True)
    public_key = models.BinaryField()
    sign_count = models.PositiveBigIntegerField(default=0)
    created = models.DateTimeField()
    last_used = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"passkey {self.name} of {self.user_id}"


class PasskeyChallenge(models.Model):
    """A ceremony's server nonce: used once (the row is deleted by the use that succeeds or
    fails) and only until ``expires_at``. A step-up's names the decision it is for."""

    class Purpose(models.TextChoices):
        REGISTER = "register", "register"
        SIGN_IN = "sign in", "sign in"
        STEP_UP = "step up", "step up"

    nonce = models.CharField(max_length=64, unique=True)
    purpose = models.CharField(max_length=8, choices=Purpose.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE
    )
    call_id = models.UUIDField(null=True, blank=True)
    arguments_sha256 = models.CharField(max_length=64, blank=True)
    verb = models.CharField(max_length=8, blank=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.purpose} challenge"
