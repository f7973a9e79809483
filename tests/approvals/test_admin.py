"""Django admin: every page opens, rules are validated and saved through the service, every
change is audited, the audit log is read-only, tokens are shown once."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db.models import Model
from django.test import Client
from django.urls import reverse

import capcore
from approvals.admin.caret import CARET_CONTEXT, rule_line_caret
from approvals.admin.gates import BAD_GATE_NAME, GateForm
from approvals.models import (
    Agent,
    AgentToken,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    Gate,
    Ledger,
    LedgerEntry,
    PermissionRule,
    ToolClass,
)
from approvals.services.agents import agent_authenticate, agent_token_issue
from approvals.services.audit import audit_object_type
from approvals.services.rules import cap_rule_save
from tests.factories import agent_make, agent_with_token, call_make, payment

pytestmark = pytest.mark.django_db

MODELS = [
    Agent,
    AgentToken,
    AuditEntry,
    Budget,
    Call,
    CapRule,
    Gate,
    Ledger,
    LedgerEntry,
    PermissionRule,
    ToolClass,
]
TOKEN = re.compile(r"cs_[A-Za-z0-9_-]{43}")


def url(model: type[Model], view: str, *args: object) -> str:
    return reverse(f"admin:approvals_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def some_of_everything(db: None) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate finance")
    cap_rule_save(line="daily: pay arg=amount sum USD 100000 per day by principal -> gate")
    cap_rule_save(line="metal: buy arg=g max XAU 10.000 exponent=3 -> refuse")
    agent, _ = agent_with_token()
    call_make(agent=agent, arguments=payment("20.00"))
    call_make(agent=agent, arguments=payment("600.00"))
    ToolClass.objects.create(pattern="wire*", tool_class="dangerous")
    PermissionRule.objects.create(pattern="rm", decision="deny")
    Budget.objects.create(max_calls=100)


@pytest.mark.usefixtures("some_of_everything")
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_changelist_and_change_page_opens(admin_client: Client, model: type[Model]) -> None:
    assert admin_client.get(url(model, "changelist")).status_code == 200
    row = model._default_manager.first()
    assert row is not None
    assert admin_client.get(url(model, "change", row.pk)).status_code == 200


@pytest.mark.usefixtures("some_of_everything")
def test_changelists_filter_and_search(admin_client: Client) -> None:
    call = Call.objects.filter(status="pending").get()
    found = admin_client.get(url(Call, "changelist"), {"q": str(call.pk)})
    assert found.context["cl"].result_count == 1
    by_tool = admin_client.get(url(Call, "changelist"), {"q": "pay"})
    assert by_tool.context["cl"].result_count == 2
    by_principal = admin_client.get(url(Call, "changelist"), {"q": "carol"})
    assert by_principal.context["cl"].result_count == 2
    broken = admin_client.get(url(CapRule, "changelist"), {"parses": "no"})
    assert broken.context["cl"].result_count == 0


@pytest.mark.usefixtures("some_of_everything")
def test_the_rule_list_shows_parsed_parts(admin_client: Client) -> None:
    page = admin_client.get(url(CapRule, "changelist")).content.decode()
    for shown in ("USD 500.00", "USD 100,000.00", "XAU 10.000", "per day", "by principal"):
        assert shown in page
    assert "gate finance" in page
    assert "gate (default)" in page
    assert "NO LONGER PARSES" not in page


@pytest.mark.usefixtures("some_of_everything")
def test_the_ledger_list_shows_window_totals(admin_client: Client) -> None:
    page = admin_client.get(url(Ledger, "changelist")).content.decode()
    assert "USD 20.00 (per day)" in page


def test_a_rule_that_no_longer_parses_is_marked(admin_client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    CapRule.objects.update(line="big: pay arg=amount max QQQ 500.00 -> gate")
    response = admin_client.get(url(CapRule, "changelist"))
    page = response.content.decode()
    assert "NO LONGER PARSES" in page
    assert "1 enabled rule no longer parses" in page
    assert (
        admin_client.get(url(CapRule, "changelist"), {"parses": "no"}).context["cl"].result_count
        == 1
    )


def test_a_bad_rule_line_shows_the_column_and_never_the_text(admin_client: Client) -> None:
    line = "big: pay arg=amount max ZQXJ77 500.00 -> gate"
    response = admin_client.post(url(CapRule, "add"), {"line": line, "enabled": "on"})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["line"]
    assert errors == [
        "column 25: expected a currency code (3 upper-case letters)",
        rule_line_caret(line, 25),
    ]
    page = response.content.decode()
    assert "column 25: expected" in page
    # The message never repeats what was typed: only the input box and the caret view do.
    assert page.count("ZQXJ77") == 2
    assert re.search(r'<input[^>]*value="big: pay arg=amount max ZQXJ77', page)
    assert f"<pre>{line.replace('>', '&gt;')}\n{' ' * 24}^</pre>" in page
    assert not CapRule.objects.exists()


def test_the_caret_view_points_at_the_column() -> None:
    assert rule_line_caret("r: pay arg=amount MAX", 19) == (
        f"<pre>r: pay arg=amount MAX\n{' ' * 18}^</pre>"
    )
    # A token missing at the end: the caret is just after the line.
    assert rule_line_caret("r: pay", 7) == "<pre>r: pay\n      ^</pre>"


def test_the_caret_view_shows_invisible_characters_and_escapes_the_line() -> None:
    # A tab is one column and one blank; a no-break space is shown as U+FFFD.
    assert rule_line_caret("r:\tpay arg=amount\u00a0max", 18) == (
        f"<pre>r: pay arg=amount\ufffdmax\n{' ' * 17}^</pre>"
    )
    assert rule_line_caret("<b>x</b>: &", 1) == "<pre>&lt;b&gt;x&lt;/b&gt;: &amp;\n^</pre>"
    # A wide character takes two cells, a combining mark none.
    assert rule_line_caret("漢e\u0301 x", 5) == "<pre>漢e\u0301 x\n    ^</pre>"


def test_the_caret_view_of_a_long_line_shows_the_part_around_the_column() -> None:
    line = "a" * 200 + "!" + "b" * 200
    view = rule_line_caret(line, 201)
    first, second = view.removeprefix("<pre>").removesuffix("</pre>").split("\n")
    assert first == "…" + "a" * CARET_CONTEXT + "!" + "b" * (CARET_CONTEXT - 1) + "…"
    assert second == " " * (CARET_CONTEXT + 1) + "^"


def test_the_admin_names_an_invisible_character_and_points_at_it(admin_client: Client) -> None:
    line = "big: pay arg=amount\u00a0max USD 500.00 -> gate"
    response = admin_client.post(url(CapRule, "add"), {"line": line, "enabled": "on"})
    page = response.content.decode()
    shown = "column 20: expected &#x27;max&#x27; or &#x27;sum&#x27;, found U+00A0 NO-BREAK SPACE"
    assert shown in page
    assert f"<pre>big: pay arg=amount\ufffdmax USD 500.00 -&gt; gate\n{' ' * 19}^</pre>" in page


def test_the_admin_says_how_to_fix_a_code_without_minor_unit(admin_client: Client) -> None:
    line = "metal: buy arg=g max XAU 10 -> refuse"
    response = admin_client.post(url(CapRule, "add"), {"line": line, "enabled": "on"})
    errors = response.context["adminform"].form.errors["line"]
    assert errors[0] == (
        "column 22: expected exponent=N after the amount: XAU has no minor unit in ISO 4217"
        " (e.g. XAU 10 exponent=3)"
    )
    assert not CapRule.objects.exists()


def test_a_good_rule_is_saved_with_its_gate_and_audited(admin_client: Client) -> None:
    line = "big: pay arg=amount max USD 500.00 -> gate treasury"
    response = admin_client.post(
        url(CapRule, "add"), {"line": line, "enabled": "on", "description": "d"}
    )
    assert response.status_code == 302
    rule = CapRule.objects.get()
    assert (rule.name, rule.name_folded, rule.line, rule.description) == ("big", "big", line, "d")
    assert Gate.objects.filter(name="treasury").exists()
    admin = User.objects.get(username="admin")
    # One entry for the rule (the service's), one for the gate it named.
    saved = AuditEntry.objects.get(object_type=AuditEntry.ObjectType.CAP_RULE)
    assert (saved.action, saved.user, saved.object_id) == ("cap rule saved", admin, str(rule.pk))
    assert saved.before == ""
    assert json.loads(saved.after)[0]["fields"]["line"] == line
    assert AuditEntry.objects.get(action="gate created").user == admin
    assert AuditEntry.objects.exclude(object_type=AuditEntry.ObjectType.USER).count() == 2


def test_editing_a_rule_can_rename_it_and_is_audited(admin_client: Client) -> None:
    rule = cap_rule_save(line="big: pay arg=amount max USD 500.00 -> refuse")
    new = "Bigger: pay arg=amount max USD 600.00 -> refuse"
    response = admin_client.post(url(CapRule, "change", rule.pk), {"line": new, "enabled": "on"})
    assert response.status_code == 302
    rule.refresh_from_db()
    assert (rule.name, rule.name_folded, rule.line) == ("Bigger", "bigger", new)
    changed = AuditEntry.objects.get(user__username="admin")
    assert (changed.action, changed.object_type) == ("cap rule saved", "cap rule")
    assert "USD 500.00" in changed.before
    assert "USD 600.00" in changed.after


def test_one_admin_save_of_a_rule_writes_one_entry_that_shows_what_changed(
    admin_client: Client,
) -> None:
    line = "big: pay arg=amount max USD 500.00 -> refuse"
    rule = cap_rule_save(line=line, description="old")
    response = admin_client.post(
        url(CapRule, "change", rule.pk), {"line": line, "description": "new"}
    )
    assert response.status_code == 302
    changed = AuditEntry.objects.get(user__username="admin")
    old, new = (json.loads(text)[0]["fields"] for text in (changed.before, changed.after))
    assert (old["enabled"], old["description"]) == (True, "old")
    assert (new["enabled"], new["description"]) == (False, "new")


def test_deleting_a_rule_in_admin_spells_its_type_like_the_service(admin_client: Client) -> None:
    rule = cap_rule_save(line="big: pay arg=amount max USD 500.00 -> refuse")
    admin_client.post(url(CapRule, "delete", rule.pk), {"post": "yes"})
    assert not CapRule.objects.exists()
    entries = AuditEntry.objects.filter(object_type="cap rule", object_id=str(rule.pk))
    entries = entries.order_by("pk")
    assert [(e.action, e.object_type) for e in entries] == [
        ("cap rule saved", "cap rule"),
        ("admin delete", "cap rule"),
    ]


def test_a_rule_cannot_take_another_rules_name(admin_client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> refuse")
    response = admin_client.post(
        url(CapRule, "add"), {"line": "BIG: pay arg=amount max USD 1.00 -> refuse"}
    )
    assert response.status_code == 200
    assert "another rule already has this name" in response.content.decode()
    assert CapRule.objects.count() == 1


def test_export_as_rules_file(admin_client: Client) -> None:
    cap_rule_save(line="b: pay arg=amount max USD 5 -> refuse")
    cap_rule_save(line="a:  pay   arg=amount max USD 5 -> gate x")
    response = admin_client.post(
        url(CapRule, "changelist"),
        {
            "action": "export_rules_file",
            "_selected_action": list(CapRule.objects.values_list("pk", flat=True)),
        },
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == (
        "a: pay arg=amount max USD 5.00 -> gate x\nb: pay arg=amount max USD 5.00 -> refuse\n"
    )


def test_issuing_a_token_shows_it_once_and_stores_only_its_digest(admin_client: Client) -> None:
    agent = agent_make()
    response = admin_client.post(
        url(Agent, "changelist"),
        {"action": "issue_token", "_selected_action": [agent.pk]},
        follow=True,
    )
    assert response.status_code == 200
    shown = TOKEN.findall(response.content.decode())
    assert len(shown) == 1
    token = shown[0]
    row = AgentToken.objects.get(agent=agent)
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert row.prefix == token[:8]
    assert agent_authenticate(token=token) == agent
    for entry in AuditEntry.objects.all():
        assert token not in entry.before + entry.after
    again = admin_client.get(url(Agent, "change", agent.pk)).content.decode()
    assert token not in again
    assert row.prefix in again
    assert token not in admin_client.get(url(Agent, "changelist")).content.decode()


def test_revoking_tokens_in_admin(admin_client: Client) -> None:
    agent = agent_make()
    token = agent_token_issue(agent=agent)
    row = AgentToken.objects.get()
    response = admin_client.post(
        url(AgentToken, "changelist"), {"action": "revoke", "_selected_action": [row.pk]}
    )
    assert response.status_code == 302
    assert agent_authenticate(token=token) is None
    assert AuditEntry.objects.get(action="token revoked").user == User.objects.get(username="admin")
    assert admin_client.get(url(AgentToken, "add")).status_code == 403
    assert admin_client.post(url(AgentToken, "delete", row.pk), {"post": "yes"}).status_code == 403


def test_revoking_all_of_an_agents_tokens(admin_client: Client) -> None:
    agent = agent_make()
    tokens = [agent_token_issue(agent=agent) for _ in range(2)]
    admin_client.post(
        url(Agent, "changelist"), {"action": "revoke_tokens", "_selected_action": [agent.pk]}
    )
    assert [agent_authenticate(token=token) for token in tokens] == [None, None]


def test_admin_changes_are_audited_with_before_and_after(admin_client: Client) -> None:
    response = admin_client.post(
        url(Gate, "add"), {"name": "ops", "required_approvals": "2", "timeout_seconds": ""}
    )
    assert response.status_code == 302
    gate = Gate.objects.get(name="ops")
    admin_client.post(
        url(Gate, "change", gate.pk),
        {"name": "ops", "required_approvals": "3", "timeout_seconds": "60"},
    )
    admin_client.post(url(Gate, "delete", gate.pk), {"post": "yes"})
    assert not Gate.objects.filter(name="ops").exists()
    entries = AuditEntry.objects.filter(object_type="gate").order_by("pk")
    assert [e.action for e in entries] == ["admin add", "admin change", "admin delete"]
    add, change, delete = entries
    assert add.before == ""
    assert '"required_approvals": 2' in add.after
    assert '"required_approvals": 2' in change.before
    assert '"required_approvals": 3' in change.after
    assert '"required_approvals": 3' in delete.before
    assert delete.after == ""
    assert {e.object_id for e in entries} == {str(gate.pk)}
    assert {e.user.get_username() for e in entries if e.user} == {"admin"}


def test_a_gate_name_must_follow_the_grammar(admin_client: Client) -> None:
    response = admin_client.post(url(Gate, "add"), {"name": "no spaces", "required_approvals": "1"})
    assert response.status_code == 200
    assert not Gate.objects.filter(name="no spaces").exists()


@pytest.mark.parametrize(
    ("name", "valid"),
    [("ops", True), ("a.b-c_d9", True), ("9", True), ("-x", False), ("_x", False), ("é", False)],
)
def test_a_gate_name_is_what_a_rule_may_name(name: str, *, valid: bool) -> None:
    form = GateForm(data={"name": name, "required_approvals": "1"})
    assert form.is_valid() is valid
    if valid:
        capcore.parse_rule(f"r: pay arg=amount max USD 5 -> gate {name}")
    else:
        assert form.errors["name"] == [BAD_GATE_NAME]
        with pytest.raises(capcore.RuleError):
            capcore.parse_rule(f"r: pay arg=amount max USD 5 -> gate {name}")


def test_the_default_gate_cannot_be_deleted(admin_client: Client) -> None:
    default = Gate.objects.get(name="")
    assert admin_client.post(url(Gate, "delete", default.pk), {"post": "yes"}).status_code == 403
    assert Gate.objects.filter(name="").exists()


def test_a_budget_naming_a_gate_creates_it(admin_client: Client) -> None:
    response = admin_client.post(
        url(Budget, "add"), {"scope": "run", "action": "gate", "gate": "ops", "max_calls": "5"}
    )
    assert response.status_code == 302
    assert Gate.objects.filter(name="ops").exists()
    assert AuditEntry.objects.filter(action="admin add", object_type="budget").count() == 1


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (Gate, {"name": "ops", "required_approvals": "1", "timeout_seconds": ""}),
        (ToolClass, {"pattern": "pay*", "tool_class": "dangerous"}),
        (PermissionRule, {"pattern": "pay", "decision": "ask"}),
        (Budget, {"scope": "run", "action": "refuse", "max_calls": "5"}),
        (Agent, {"name": "bot", "principal": "carol", "mode": "default", "active": "on"}),
    ],
)
def test_every_admin_save_writes_exactly_one_entry(
    admin_client: Client, model: type[Model], data: dict[str, str]
) -> None:
    inline = {"tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"} if model is Agent else {}
    assert admin_client.post(url(model, "add"), {**data, **inline}).status_code == 302
    row = model._default_manager.order_by("-pk").first()
    assert row is not None
    entry = AuditEntry.objects.exclude(object_type=AuditEntry.ObjectType.USER).get()
    assert (entry.action, entry.object_id) == ("admin add", str(row.pk))
    assert entry.object_type == audit_object_type(model)


def test_the_audit_log_cannot_be_added_changed_or_deleted(admin_client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> refuse")
    entry = AuditEntry.objects.get(action="cap rule saved")
    assert admin_client.get(url(AuditEntry, "add")).status_code == 403
    assert (
        admin_client.post(url(AuditEntry, "delete", entry.pk), {"post": "yes"}).status_code == 403
    )
    admin_client.post(url(AuditEntry, "change", entry.pk), {"action": "forged"})
    changelist = admin_client.get(url(AuditEntry, "changelist"))
    assert "delete_selected" not in changelist.content.decode()
    entry.refresh_from_db()
    assert entry.action == "cap rule saved"
    assert AuditEntry.objects.exclude(object_type=AuditEntry.ObjectType.USER).count() == 1


def test_calls_are_read_only(admin_client: Client) -> None:
    call = call_make(agent=agent_make(mode="allow"))
    assert admin_client.get(url(Call, "add")).status_code == 403
    assert admin_client.post(url(Call, "delete", call.pk), {"post": "yes"}).status_code == 403
    assert Call.objects.filter(pk=call.pk).exists()


def test_messages_of_the_token_action_say_it_is_shown_once(admin_client: Client) -> None:
    agent = agent_make()
    response = admin_client.post(
        url(Agent, "changelist"), {"action": "issue_token", "_selected_action": [agent.pk]}
    )
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(texts) == 1
    assert "will not be shown again" in texts[0]


def test_agents_are_added_and_changed_in_admin_with_their_tokens_listed(
    admin_client: Client,
) -> None:
    inline = {"tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"}
    fields = {"name": "bot", "principal": "carol", "allowed_principals": "", "mode": "default"}
    response = admin_client.post(url(Agent, "add"), {**fields, "active": "on", **inline})
    assert response.status_code == 302
    agent = Agent.objects.get()
    agent_token_issue(agent=agent)
    row = AgentToken.objects.get()
    inline = {
        "tokens-TOTAL_FORMS": "1",
        "tokens-INITIAL_FORMS": "1",
        "tokens-0-id": str(row.pk),
        "tokens-0-agent": str(agent.pk),
    }
    response = admin_client.post(url(Agent, "change", agent.pk), {**fields, **inline})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert not agent.active
    assert AgentToken.objects.get().revoked_at is None
    changed = AuditEntry.objects.get(action="admin change", object_type="agent")
    assert '"active": true' in changed.before
    assert '"active": false' in changed.after


# --- Admin roughness (issue 19): names, dates, styles, the icon -----------------------------

INLINE_STYLE = re.compile(r"<[^>]+\sstyle=", re.IGNORECASE)


def test_ledger_entries_are_named_in_the_plural(admin_client: Client) -> None:
    assert LedgerEntry._meta.verbose_name_plural == "ledger entries"
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "Ledger entries" in page
    assert "entrys" not in page


@pytest.mark.usefixtures("some_of_everything")
def test_admin_dates_name_their_time_zone_as_the_approver_pages_do(admin_client: Client) -> None:
    call = Call.objects.order_by("created_at").first()
    assert call is not None
    shown = f"{call.created_at:%Y-%m-%d %H:%M:%S} UTC"
    assert shown in admin_client.get(url(Call, "changelist")).content.decode()
    assert shown in admin_client.get(url(Call, "change", call.pk)).content.decode()


def test_the_broken_rule_marker_is_styled_by_the_admin_stylesheet(admin_client: Client) -> None:
    """The Content-Security-Policy blocks inline styles: the marker's red is a class."""
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="old: pay arg=amount max USD 5.00 -> gate", enabled=False)
    CapRule.objects.update(line="x: pay arg=amount max QQQ 500.00 -> gate")
    page = admin_client.get(url(CapRule, "changelist")).content.decode()
    assert '<link rel="stylesheet" href="/static/css/admin.css">' in page
    assert '<strong class="cs-broken cs-broken-enabled">' in page
    assert '<strong class="cs-broken">' in page
    assert INLINE_STYLE.search(page) is None


def test_favicon_ico_is_sent_on_to_the_icon_in_static(client: Client, settings: Any) -> None:
    response = client.get("/favicon.ico")
    assert (response.status_code, response["Location"]) == (302, "/static/img/favicon.ico")
    # WhiteNoise serves it (from the source tree here: the tests run no collectstatic).
    settings.WHITENOISE_USE_FINDERS = True
    icon = Client().get("/favicon.ico", follow=True)
    assert icon.status_code == 200
    assert icon["Content-Type"].startswith("image/")


# --- the header, a gate a save creates, a budget's cost as a decimal -------------------------


def test_the_admin_says_countersign_not_django(client: Client, admin_client: Client) -> None:
    login = client.get("/admin/login/").content.decode()
    index = admin_client.get("/admin/").content.decode()
    for page in (login, index):
        assert "Django administration" not in page
        assert re.search(r'<div id="site-name"><a href="/admin/">Countersign</a></div>', page)
    assert "<title>Log in | Countersign admin</title>" in login
    assert "<h1>Countersign administration</h1>" in index


def warnings_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "warning"]


def test_a_rule_naming_a_new_gate_says_it_created_it(admin_client: Client) -> None:
    Gate.objects.create(name="finance")
    line = "big: pay arg=amount max USD 500.00 -> gate finanse"
    response = admin_client.post(url(CapRule, "add"), {"line": line, "enabled": "on"})
    assert response.status_code == 302
    assert warnings_of(response) == [
        "Created gate finanse: no gate had that name. It has no group yet, so anyone who may "
        "decide calls can approve the calls held there, one approval enough, until an admin "
        "sets its group and required approvals under Approvals › Gates. If you meant an "
        "existing gate, correct the name."
    ]
    assert "Created gate finanse" in admin_client.get(response["Location"]).content.decode()
    # Saved again, or naming a gate that exists: nothing to say.
    row = CapRule.objects.get()
    for again in (line, "big: pay arg=amount max USD 500.00 -> gate finance"):
        response = admin_client.post(url(CapRule, "change", row.pk), {"line": again})
        assert (response.status_code, warnings_of(response)) == (302, [])


def test_a_budget_naming_a_new_gate_says_it_created_it(admin_client: Client) -> None:
    data = {"scope": "run", "action": "gate", "gate": "opps", "max_calls": "5"}
    response = admin_client.post(url(Budget, "add"), data)
    assert response.status_code == 302
    assert [w.split(":")[0] for w in warnings_of(response)] == ["Created gate opps"]


BUDGET = {"scope": "run", "action": "refuse", "cost_currency": "USD"}


@pytest.mark.parametrize(
    ("typed", "units"),
    [
        ("0.25", 250_000_000),
        ("12", 12_000_000_000),
        ("0.000000001", 1),
        ("1.123456789", 1_123_456_789),
        ("9223372036.854775807", 2**63 - 1),
        (" 3.5 ", 3_500_000_000),  # the form strips the blanks around it
    ],
)
def test_a_budget_cost_is_typed_as_a_decimal(admin_client: Client, typed: str, units: int) -> None:
    response = admin_client.post(url(Budget, "add"), {**BUDGET, "max_cost": typed})
    assert response.status_code == 302
    budget = Budget.objects.get()
    assert (budget.max_cost, budget.cost_currency) == (units, "USD")
    # The change form shows it back as the shortest exact decimal, and so does the list.
    shown = admin_client.get(url(Budget, "change", budget.pk)).content.decode()
    assert re.search(rf'name="max_cost" value="{re.escape(typed.strip())}"', shown)
    listed = admin_client.get(url(Budget, "changelist")).content.decode()
    assert f'<td class="field-cost_ceiling">USD {typed.strip()}</td>' in listed


@pytest.mark.parametrize(
    ("typed", "currency", "field", "message"),
    [
        ("0.1234567891", "USD", "max_cost", "A cost has at most 9 decimal places"),
        ("1e3", "USD", "max_cost", "Type the cost as a decimal such as 0.25"),
        ("1,000", "USD", "max_cost", "Type the cost as a decimal such as 0.25"),
        ("-1", "USD", "max_cost", "A cost ceiling cannot be negative."),
        ("9223372036.854775808", "USD", "max_cost", "A cost ceiling is at most"),
        ("0.25", "", "cost_currency", "A cost ceiling needs its currency"),
        ("0.25", "usd", "cost_currency", "Not an ISO 4217 currency code"),
    ],
)
def test_a_bad_budget_cost_is_refused_with_what_to_type(
    admin_client: Client, typed: str, currency: str, field: str, message: str
) -> None:
    data = {**BUDGET, "cost_currency": currency, "max_cost": typed}
    response = admin_client.post(url(Budget, "add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert errors[field][0].startswith(message)
    assert typed not in errors[field][0]
    assert not Budget.objects.exists()
