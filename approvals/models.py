"""Tables and their invariants only; the logic lives in ``services`` and ``selectors``."""

from __future__ import annotations

import enum
import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

# The choices whose values capcore reads (modes, tool classes, decisions, budget scopes and
# actions) are capcore's enum values, spelled out; tests/approvals/test_models.py keeps them
# equal.


class Agent(models.Model):
    class Mode(models.TextChoices):
        """``capcore.Mode``."""

        DEFAULT = "default", "default: ask before dangerous tools"
        READ_ONLY = "read_only", "read only"
        WORKSPACE_WRITE = "workspace_write", "workspace write: refuse dangerous tools"
        DANGER_FULL_ACCESS = "danger_full_access", "danger, full access"
        ALLOW = "allow", "allow everything"
        PROMPT = "prompt", "prompt: ask before every call"

    name = models.CharField(max_length=200, unique=True)
    principal = models.CharField(max_length=200, help_text="On whose behalf it acts by default.")
    allowed_principals = models.TextField(
        blank=True,
        help_text="Other principals it may act for: comma-separated glob patterns ('*' = any).",
    )
    mode = models.CharField(max_length=32, choices=Mode.choices, default=Mode.DEFAULT)
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
    require_passkey = models.BooleanField(
        "require a passkey",
        default=False,
        help_text="Approving or denying a call held here needs a passkey touch made for that "
        'decision (docs/identity.md, "Step-up at a gate").',
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
    # Evaluated and recorded on every call, never enforced (docs/rules.md, "Shadow rules").
    shadow = models.BooleanField(
        default=False,
        help_text="Shadow: evaluated and recorded on every call, never holds or refuses one.",
    )
    description = models.TextField(
        blank=True,
        help_text="The rule's ledger is kept by name: editing the limit or window keeps it, "
        "renaming the rule starts a new one.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name


class ToolClass(models.Model):
    class Kind(models.TextChoices):
        """``capcore.ToolClass``."""

        READ = "read", "read"
        WRITE = "write", "write"
        DANGEROUS = "dangerous", "dangerous"

    pattern = models.CharField(max_length=128, unique=True, help_text="A tool name or glob.")
    tool_class = models.CharField(max_length=16, choices=Kind.choices)

    class Meta:
        verbose_name_plural = "tool classes"

    def __str__(self) -> str:
        return f"{self.pattern}: {self.tool_class}"


class PermissionRule(models.Model):
    class Decision(models.TextChoices):
        """``capcore.Decision``."""

        ALLOW = "allow", "allow"
        ASK = "ask", "ask"
        DENY = "deny", "deny"

    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, help_text="Empty = all agents."
    )
    pattern = models.CharField(max_length=128, help_text="A tool name or glob (case-sensitive).")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    # NULL = every run; "" is the agent's default run, so the two must differ.
    run_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # Blank = any arguments; else only calls whose arguments have this SHA-256. Blank in the
    # database too, for a row another program inserts without it.
    arguments_sha256 = models.CharField(
        max_length=64, blank=True, default="", db_default="", help_text="Empty = any arguments."
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # A grant (docs/ui.md, "Grants"): the approval's call, who approved it and when. Empty on
    # a rule an admin wrote; the audit log keeps the grant's entry whatever becomes of them.
    call = models.ForeignKey(
        "Call", null=True, blank=True, on_delete=models.SET_NULL, related_name="grants"
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="grants",
    )
    granted_at = models.DateTimeField(null=True, blank=True)

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

    class Scope(models.TextChoices):
        """``capcore.BudgetScope``; also the scope of a ``RunCounter``."""

        RUN = "run", "run"
        DAY = "day", "day"

    class Action(models.TextChoices):
        """``capcore.ActionKind``."""

        REFUSE = "refuse", "refuse"
        GATE = "gate", "gate"

    agent = models.OneToOneField(Agent, null=True, blank=True, on_delete=models.CASCADE)
    max_calls = models.PositiveBigIntegerField(null=True, blank=True)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_cost = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="In 10⁻⁹ units of the cost currency."
    )
    cost_currency = models.CharField(max_length=3, blank=True)
    max_duration = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds.")
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.RUN)
    action = models.CharField(max_length=8, choices=Action.choices, default=Action.REFUSE)
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
    class Status(models.TextChoices):
        """A call's status (docs/api.md); the sets below are the only lists of statuses."""

        ALLOWED = "allowed", "allowed"
        REFUSED = "refused", "refused"
        PENDING = "pending", "pending"  # held for a human
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        EXPIRED = "expired", "expired"
        CANCELLED = "cancelled", "cancelled"

        # Decided by the policy, so approved by nobody: at submission, or refused by the
        # re-check of a held call's sums when its quorum was met.
        NEVER_HELD = enum.nonmember(frozenset({"allowed", "refused"}))
        # Held, then ended by someone or the clock: the call state carries a decision.
        DECIDED = enum.nonmember(frozenset({"approved", "denied", "expired", "cancelled"}))
        # NEVER_HELD and DECIDED: every status but pending, nothing changes the call any more.
        FINAL = enum.nonmember(
            frozenset({"allowed", "refused", "approved", "denied", "expired", "cancelled"})
        )

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="calls")
    tool = models.CharField(max_length=128)
    arguments = models.TextField(help_text="Exactly as received.")
    arguments_sha256 = models.CharField(max_length=64)
    # An approver's edit replaces ``arguments``; the text the agent sent is kept here
    # (docs/ui.md, "Edit, then approve"). Empty = never edited.
    original_arguments = models.TextField(blank=True)
    original_arguments_sha256 = models.CharField(max_length=64, blank=True)
    principal = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200, blank=True)
    context = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    reasons = models.JSONField(default=list)
    gates = models.JSONField(default=list)
    # Ledger amounts assessed at submission, recorded if and when the call is approved.
    pending_records = models.JSONField(default=list)
    # The reasons shadow rules would have given (docs/rules.md, "Shadow rules"): never
    # enforced; their amounts go with ``pending_records``, into the shadow rules' own ledgers.
    shadow = models.JSONField(default=list)
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
    # The deadline whose ``call.expiring`` notice was written (docs/notifications.md): an
    # extended deadline differs from it, so it gets a notice of its own.
    expiring_noticed_for = models.DateTimeField(null=True, blank=True)
    # The signed receipt (docs/receipts.md) of an allowed or approved call, issued once.
    receipt = models.TextField(blank=True)

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
            # The insights' expiries of a day: only expired calls are in it (the status leads so
            # that SQLite, without statistics, prefers it to call_status_newest).
            models.Index(
                fields=["status", "decided_at"],
                condition=Q(status="expired"),
                name="call_expired_when",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"


class Approval(models.Model):
    """One eligible user's first decision on a call; later clicks change nothing."""

    class Scope(models.TextChoices):
        """What an approval allows besides this call: nothing more, the same tool with the
        same arguments or any for the rest of the run, any for the next hour, or always
        (docs/ui.md, "Grants")."""

        ONCE = "once", "once"
        RUN_SAME = "run_same", "run_same"
        RUN = "run", "run"
        HOUR = "hour", "hour"
        ALWAYS = "always", "always"

    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    approve = models.BooleanField()
    comment = models.TextField(blank=True)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.ONCE)
    created_at = models.DateTimeField()
    # The version of the arguments decided on; an edit voids the approvals of earlier ones.
    arguments_sha256 = models.CharField(max_length=64, blank=True)
    # The gates the call was held at when it was given: it counts towards their quorums only,
    # not towards a gate a re-check adds later (docs/policies.md, "Gates and quorum").
    gates = models.JSONField(default=list)
    voided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["call", "user"],
                condition=Q(voided_at__isnull=True),
                name="one_decision_per_user",
            )
        ]
        # The insights' decisions given in a day.
        indexes = [models.Index(fields=["created_at"], name="approval_given")]

    def __str__(self) -> str:
        return f"{'approve' if self.approve else 'deny'} by user {self.user_id}"


class Ledger(models.Model):
    """One running total's identity: the row locked while a call is checked and recorded."""

    # 64 for the name, and "shadow " before a shadow rule's (capcore.caps.ledger_rule).
    rule = models.CharField(
        max_length=72, help_text="The rule's name, casefolded; 'shadow name' for a shadow rule."
    )
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
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(condition=Q(minor__gte=0), name="ledger_entry_not_negative"),
            models.UniqueConstraint(fields=["ledger", "call"], name="one_entry_per_call"),
        ]
        # A submission sums every entry of its ledgers' windows: with every column the sum
        # reads in the index, SQLite never visits the table's rows for it (PostgreSQL can
        # scan the index alone too, once vacuum has marked the table's pages visible).
        indexes = [
            models.Index(
                fields=["ledger", "recorded_at", "voided_at", "minor"],
                name="ledger_entry_window_sum",
            )
        ]

    def __str__(self) -> str:
        return f"{self.minor} on ledger {self.ledger_id}"


class LedgerReservation(models.Model):
    """A held call's amount in one ledger, counted in its totals from the call's submission
    until the call ends: approval turns it into an entry, every other end deletes it
    (docs/rules.md, "Held calls reserve")."""

    # Found by ledger through the unique constraint's index: no index of its own.
    ledger = models.ForeignKey(
        Ledger, on_delete=models.PROTECT, related_name="reservations", db_index=False
    )
    call = models.ForeignKey(Call, on_delete=models.CASCADE, related_name="ledger_reservations")
    minor = models.BigIntegerField()
    held_for_rule = models.BooleanField(
        help_text="The call is held at this ledger's rule's own gate for going over it: only "
        "that gate's approval records it, so other calls' re-checks leave it out."
    )
    reserved_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["ledger", "call"], name="one_reservation_per_call"),
            models.CheckConstraint(
                condition=Q(minor__gte=0), name="ledger_reservation_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.minor} reserved on ledger {self.ledger_id}"


class LedgerHour(models.Model):
    """A ledger's total of its entries recorded in one UTC hour, voided ones left out: kept in
    the transaction of every entry recorded or voided, so that a window's total reads these
    rows and at most the entries of the hour its window starts in (``ledger_window_totals``)."""

    # Found by (ledger, hour), the unique constraint's index: no index of its own.
    ledger = models.ForeignKey(
        Ledger, on_delete=models.PROTECT, related_name="hours", db_index=False
    )
    hour = models.DateTimeField(help_text="The hour's start, UTC.")
    minor = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["ledger", "hour"], name="one_ledger_hour"),
            # A void taken twice, or from the wrong hour, fails rather than lowering a total.
            models.CheckConstraint(condition=Q(minor__gte=0), name="ledger_hour_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.minor} on ledger {self.ledger_id} in the hour from {self.hour}"


AUDIT_NOT_CHANGED = "audit entries cannot be changed"
AUDIT_NOT_DELETED = "audit entries cannot be deleted"


class AppendOnly(Exception):
    """The audit log is append-only: entries are never changed or deleted."""


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnly(AUDIT_NOT_CHANGED)

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly(AUDIT_NOT_DELETED)


class AuditEntry(models.Model):
    """Append-only: written by ``services.audit`` only, shown read-only in admin. The ORM
    refuses to change or delete an entry, through an instance or a queryset, and the
    database refuses it too, whatever the path (triggers, migration ``0009_audit_guard``)."""

    class Action(models.TextChoices):
        CALL_ALLOWED = "call allowed", "call allowed"
        CALL_REFUSED = "call refused", "call refused"
        CALL_PENDING = "call pending", "call pending"
        CALL_APPROVED = "call approved", "call approved"
        CALL_DENIED = "call denied", "call denied"
        CALL_EXPIRED = "call expired", "call expired"
        CALL_CANCELLED = "call cancelled", "call cancelled"
        CALL_EXTENDED = "call extended", "call extended"
        CALL_EDITED = "call edited", "call edited"
        AGENT_CREATED = "agent created", "agent created"
        AGENT_UPDATED = "agent updated", "agent updated"
        TOKEN_ISSUED = "token issued", "token issued"
        TOKEN_REVOKED = "token revoked", "token revoked"
        GATE_CREATED = "gate created", "gate created"
        CAP_RULE_SAVED = "cap rule saved", "cap rule saved"
        CAP_RULE_DISABLED = "cap rule disabled", "cap rule disabled"
        LEDGER_ENTRY_VOIDED = "ledger entry voided", "ledger entry voided"
        ADMIN_ADD = "admin add", "admin add"
        ADMIN_CHANGE = "admin change", "admin change"
        ADMIN_DELETE = "admin delete", "admin delete"
        USER_CREATED = "user created", "user created"
        USER_DELETED = "user deleted", "user deleted"
        USER_ACTIVATED = "user activated", "user activated"
        USER_DEACTIVATED = "user deactivated", "user deactivated"
        USER_CHANGED = "user changed", "user changed"
        PASSWORD_SET = "password set", "password set"
        USER_GROUPS_CHANGED = "user groups changed", "user groups changed"
        USER_PERMISSIONS_CHANGED = "user permissions changed", "user permissions changed"
        GROUP_CREATED = "group created", "group created"
        GROUP_DELETED = "group deleted", "group deleted"
        GROUP_PERMISSIONS_CHANGED = "group permissions changed", "group permissions changed"
        STANDING_RULE_CREATED = "standing rule created", "standing rule created"
        STANDING_RULE_REVOKED = "standing rule revoked", "standing rule revoked"
        LOGIN_LOCKED_OUT = "login locked out", "login locked out"
        LOGIN_UNLOCKED = "login unlocked", "login unlocked"
        NOTIFICATION_RETRIED = "notification retried", "notification retried"
        PASSKEY_ADDED = "passkey added", "passkey added"
        PASSKEY_REMOVED = "passkey removed", "passkey removed"

        @classmethod
        def call(cls, status: str) -> AuditEntry.Action:
            """The entry of a call entering ``status`` (a ``Call.Status``)."""
            return cls(f"call {status}")

    class ObjectType(models.TextChoices):
        """One spelling per model. Entries are never rewritten, so the spelling most stored
        entries had was kept; entries written by admin before it changed say ``caprule``
        for ``CAP_RULE``."""

        AGENT = "agent", "agent"
        AGENT_TOKEN = "agent token", "agent token"
        BUDGET = "budget", "budget"
        CALL = "call", "call"
        CAP_RULE = "cap rule", "cap rule"
        GATE = "gate", "gate"
        GROUP = "group", "group"
        LEDGER_ENTRY = "ledgerentry", "ledgerentry"
        LOGIN = "login", "login"
        NOTIFICATION = "notification", "notification"
        NOTIFICATION_CHANNEL = "notification channel", "notification channel"
        PERMISSION_RULE = "permissionrule", "permissionrule"
        TOOL_CLASS = "toolclass", "toolclass"
        USER = "user", "user"

    at = models.DateTimeField()
    # Who acted: the link, and the username as it was then, which no later rename changes.
    # PROTECT: a person or agent with entries cannot be deleted (deactivate instead), so no
    # delete ever nulls a link.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    username = models.CharField(max_length=150, blank=True)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT)
    action = models.CharField(max_length=64, choices=Action.choices)
    object_type = models.CharField(max_length=64, choices=ObjectType.choices)
    object_id = models.CharField(max_length=64)
    before = models.TextField(blank=True)
    after = models.TextField(blank=True)
    # The chain (approvals/audit_chain.py): 1, 2, 3… with no gaps, the hash of the entry
    # before (64 zeros before the first), and this entry's own. Set as the entry is written.
    seq = models.BigIntegerField(unique=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type} {self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly(AUDIT_NOT_CHANGED)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly(AUDIT_NOT_DELETED)


AUDIT_CHAIN_HEAD = 1  # the head's one row


class AuditChainHead(models.Model):
    """The audit chain's latest link, one row: every writer locks it, links its entries to
    it and moves it on, in the transaction that writes them (services/audit.py), so the
    chain stays one line and ``seq`` follows the order of the commits."""

    seq = models.BigIntegerField()
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(id=AUDIT_CHAIN_HEAD), name="one_audit_chain_head")
        ]

    def __str__(self) -> str:
        return f"audit chain head {self.seq}"


class RunCounter(models.Model):
    """Server-side counters of one run (``scope="run"``, key = run id) or one agent-day
    (``scope="day"``, key = the UTC date), updated with each created call."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE)
    scope = models.CharField(max_length=8, choices=Budget.Scope.choices)
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


class InsightsDay(models.Model):
    """One closed UTC day's insights figures (``selectors.insights``), counted from the calls
    and approvals once the day has settled: over, and none of its calls still held. The
    services no longer change what such a day counts, so its row is written once and never
    updated; ``manage.py rebuild_insights`` counts the rows again from the calls."""

    day = models.DateField(primary_key=True)
    figures = models.JSONField()

    def __str__(self) -> str:
        return f"insights of {self.day}"
