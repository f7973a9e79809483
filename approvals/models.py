"""Tables and their invariants only; the logic lives in ``services`` and ``selectors``."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

MODE_CHOICES = [
    ("default", "default: ask before dangerous tools"),
    ("read_only", "read only"),
    ("workspace_write", "workspace write: refuse dangerous tools"),
    ("danger_full_access", "danger, full access"),
    ("allow", "allow everything"),
    ("prompt", "prompt: ask before every call"),
]


class Agent(models.Model):
    name = models.CharField(max_length=200, unique=True)
    principal = models.CharField(max_length=200, help_text="On whose behalf it acts by default.")
    allowed_principals = models.TextField(
        blank=True,
        help_text="Other principals it may act for: comma-separated glob patterns ('*' = any).",
    )
    mode = models.CharField(max_length=32, choices=MODE_CHOICES, default="default")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class AgentToken(models.Model):
    """An API token, stored only as its SHA-256 digest; shown once when issued."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(
        max_length=12, help_text="The first characters, to tell tokens apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}…"


class Gate(models.Model):
    """Where held calls wait. ``""`` is the default gate and always exists."""

    name = models.CharField(max_length=64, unique=True, blank=True)
    group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        help_text="Who may decide here; empty = anyone with the 'decide call' permission.",
    )
    required_approvals = models.PositiveSmallIntegerField(default=1)
    timeout_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty = COUNTERSIGN_HOLD_TIMEOUT."
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1), name="gate_needs_an_approval"
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__isnull=True) | Q(timeout_seconds__gte=1),
                name="gate_timeout_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name or "(default gate)"


class CapRule(models.Model):
    """One cap-rule line. The parsed form is never stored apart from the line."""

    name = models.CharField(max_length=64, editable=False)
    name_folded = models.CharField(max_length=64, unique=True, editable=False)
    line = models.TextField()
    enabled = models.BooleanField(default=True)
    description = models.TextField(
        blank=True,
        help_text="The rule's ledger is kept by name: editing the limit or window keeps it, "
        "renaming the rule starts a new one.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name


class ToolClass(models.Model):
    pattern = models.CharField(max_length=128, unique=True, help_text="A tool name or glob.")
    tool_class = models.CharField(
        max_length=16,
        choices=[("read", "read"), ("write", "write"), ("dangerous", "dangerous")],
    )

    class Meta:
        verbose_name_plural = "tool classes"

    def __str__(self) -> str:
        return f"{self.pattern}: {self.tool_class}"


class PermissionRule(models.Model):
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, help_text="Empty = all agents."
    )
    pattern = models.CharField(max_length=128, help_text="A tool name or glob (case-sensitive).")
    decision = models.CharField(
        max_length=8, choices=[("allow", "allow"), ("ask", "ask"), ("deny", "deny")]
    )
    # NULL = every run; "" is the agent's default run, so the two must differ.
    run_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.decision} {self.pattern}"


class PolicyStamp(models.Model):
    """One row whose ``stamp`` database triggers set to a new random value whenever a table
    the verdicts depend on changes (cap rules, permission rules, tool classes, budgets),
    whatever made the change: a service, admin, a bulk update, raw SQL, another process.
    Processes keep the policies they read under the stamp they read with them
    (``approvals.policies``). Triggers, not ``save()``: no path can miss them."""

    stamp = models.BigIntegerField()

    def __str__(self) -> str:
        return f"policy stamp {self.stamp}"


class Budget(models.Model):
    """Run ceilings for one agent, or the default for all (``agent`` empty)."""

    agent = models.OneToOneField(Agent, null=True, blank=True, on_delete=models.CASCADE)
    max_calls = models.PositiveBigIntegerField(null=True, blank=True)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_cost = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="In 10⁻⁹ units of the cost currency."
    )
    cost_currency = models.CharField(max_length=3, blank=True)
    max_duration = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds.")
    scope = models.CharField(max_length=8, choices=[("run", "run"), ("day", "day")], default="run")
    action = models.CharField(
        max_length=8, choices=[("refuse", "refuse"), ("gate", "gate")], default="refuse"
    )
    gate = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent"], condition=Q(agent__isnull=True), name="one_default_budget"
            ),
            models.CheckConstraint(
                condition=Q(max_cost__isnull=True, cost_currency="")
                | Q(max_cost__isnull=False) & ~Q(cost_currency=""),
                name="budget_cost_has_currency",
            ),
            models.CheckConstraint(
                condition=Q(action="gate") | Q(gate=""), name="budget_refusal_names_no_gate"
            ),
        ]

    def __str__(self) -> str:
        return f"budget for {self.agent or 'all agents'}"


class Call(models.Model):
    STATUS_CHOICES = [
        (status, status)
        for status in (
            "allowed",
            "refused",
            "pending",
            "approved",
            "denied",
            "expired",
            "cancelled",
        )
    ]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="calls")
    tool = models.CharField(max_length=128)
    arguments = models.TextField(help_text="Exactly as received.")
    arguments_sha256 = models.CharField(max_length=64)
    principal = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200, blank=True)
    context = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES)
    reasons = models.JSONField(default=list)
    gates = models.JSONField(default=list)
    # Ledger amounts assessed at submission, recorded if and when the call is approved.
    pending_records = models.JSONField(default=list)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    extended = models.BooleanField(default=False)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    decision_comment = models.TextField(blank=True)
    updated_at = models.DateTimeField()
    # NULL = no key, so that the partial unique constraint ignores calls without one.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        permissions = [("decide_call", "Can approve or deny held calls")]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="one_call_per_idempotency_key",
            ),
            models.CheckConstraint(
                condition=Q(status="pending", expires_at__isnull=False) | ~Q(status="pending"),
                name="pending_call_has_deadline",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="call_status_deadline"),
            models.Index(fields=["agent", "-created_at"], name="call_agent_newest"),
            models.Index(fields=["agent", "updated_at"], name="call_agent_changed"),
            # The history: newest first, alone or within one status, tool or principal
            # (the agent filter uses call_agent_newest).
            models.Index(fields=["-created_at", "-id"], name="call_newest"),
            models.Index(fields=["status", "-created_at", "-id"], name="call_status_newest"),
            models.Index(fields=["tool", "-created_at", "-id"], name="call_tool_newest"),
            models.Index(fields=["principal", "-created_at", "-id"], name="call_principal_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"


class Approval(models.Model):
    """One eligible user's first decision on a call; later clicks change nothing."""

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    approve = models.BooleanField()
    comment = models.TextField(blank=True)
    scope = models.CharField(max_length=8, default="once")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["call", "user"], name="one_decision_per_user")
        ]

    def __str__(self) -> str:
        return f"{'approve' if self.approve else 'deny'} by user {self.user_id}"


class Ledger(models.Model):
    """One running total's identity: the row locked while a call is checked and recorded."""

    rule = models.CharField(max_length=64, help_text="The rule's name, casefolded.")
    currency = models.CharField(max_length=3)
    key_digest = models.CharField(max_length=64, blank=True, help_text="Empty = one total.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "currency", "key_digest"], name="one_ledger")
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.currency}"


class LedgerEntry(models.Model):
    ledger = models.ForeignKey(Ledger, on_delete=models.PROTECT, related_name="entries")
    call = models.ForeignKey(Call, on_delete=models.PROTECT, related_name="ledger_entries")
    minor = models.BigIntegerField()
    recorded_at = models.DateTimeField()
    voided_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(minor__gte=0), name="ledger_entry_not_negative"),
            models.UniqueConstraint(fields=["ledger", "call"], name="one_entry_per_call"),
        ]
        indexes = [models.Index(fields=["ledger", "recorded_at"], name="ledger_entry_window")]

    def __str__(self) -> str:
        return f"{self.minor} on ledger {self.ledger_id}"


class AppendOnly(Exception):
    """The audit log is append-only: entries are never changed or deleted."""


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnly("audit entries cannot be changed")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit entries cannot be deleted")


class AuditEntry(models.Model):
    """Append-only: written by services, shown read-only in admin. The ORM refuses to change
    or delete an entry, through an instance or a queryset."""

    at = models.DateTimeField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.TextField(blank=True)
    after = models.TextField(blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type} {self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("audit entries cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit entries cannot be deleted")


class RunCounter(models.Model):
    """Server-side counters of one run (``scope="run"``, key = run id) or one agent-day
    (``scope="day"``, key = the UTC date), updated with each created call."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    scope = models.CharField(max_length=8)
    key = models.CharField(max_length=200, blank=True)
    calls = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "scope", "key"], name="one_counter_per_run")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key!r} of agent {self.agent_id}"


class RunCost(models.Model):
    """A run counter's cost in one currency, in 10⁻⁹ units."""

    counter = models.ForeignKey(RunCounter, on_delete=models.CASCADE, related_name="costs")
    currency = models.CharField(max_length=3)
    amount = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["counter", "currency"], name="one_cost_per_currency")
        ]

    def __str__(self) -> str:
        return f"{self.currency} {self.amount}"
