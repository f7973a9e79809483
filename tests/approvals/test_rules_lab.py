"""The Rules lab in admin (docs/policy-lab.md, "The Rules lab"): who may open it, a draft's
faulty lines with their line and column, a call tried against the current rules and the
draft, a backtest that reports what ``manage.py backtest --json`` does, the period limit, and
nothing written by any part."""

from __future__ import annotations

import html
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals.admin import lab
from approvals.models import Agent, Call
from approvals.services.decisions import call_decide
from tests.factories import agent_make, call_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db

LAB = "/admin/approvals/caprule/lab/"
HTMX = {"HTTP_HX_REQUEST": "true"}
MONDAY = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
FAULTY = "ok: pay arg=amount max USD 5 -> gate\nbad: pay arg=amount max USD 5 => gate <b>x\n"


def staff(username: str, *, lab_permission: bool) -> User:
    user = user_make(username=username, decide=False)
    user.is_staff = True
    user.save()
    codenames = ["view_caprule"] + (["change_caprule"] if lab_permission else [])
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(staff("rhea", lab_permission=True))
    return client


@pytest.fixture
def agent() -> Agent:
    return agent_make(name="payer", principal="carol", mode="danger_full_access")


def text_of(markup: str) -> str:
    """The page's text as read: tags dropped, entities decoded, blanks collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def part_of(markup: str, element_id: str) -> str:
    """The text of the element with ``element_id`` (up to the end of its tag's line)."""
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</(tr|p|strong|span)>', markup, re.S)
    assert found, f"no #{element_id}"
    return text_of(found.group(1))


def post(client: Client, part: str, **fields: str) -> str:
    response = client.post(LAB, {"part": part, **fields}, **HTMX)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content
    content = response.content.decode()
    assert "<html" not in content  # the part's partial only
    return content


def try_call(client: Client, agent: Agent, amount: str, against: str, draft: str) -> str:
    content = post(
        client,
        "try",
        draft=draft,
        agent=str(agent.pk),
        tool="pay",
        arguments=payment(amount),
        principal="",
        run_id="r1",
        against=against,
    )
    return part_of(content, "lab-try-status")


def row_counts() -> dict[str, int]:
    """The rows of every table in the database, whichever app made it."""
    with connection.cursor() as cursor:
        counts = {}
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return counts


def test_only_staff_who_may_change_cap_rules_open_it() -> None:
    anonymous = Client().get(LAB)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("admin:login"))
    client = Client()
    client.force_login(staff("vera", lab_permission=False))
    assert client.get(LAB).status_code == 403
    assert client.post(LAB, {"part": "validate", "draft": ""}).status_code == 403
    # The cap rules' list links the lab only for those who may use it.
    assert "Rules lab" not in client.get("/admin/approvals/caprule/").content.decode()


def test_the_page_starts_with_the_rules_in_force_and_is_linked(admin_client: Client) -> None:
    rule_make(line="big: pay arg=amount max USD 500 -> gate")
    rule_make(line="old: pay arg=amount max USD 9 -> refuse", enabled=False)
    page = admin_client.get(LAB).content.decode()
    draft = re.search(r'<textarea name="draft"[^>]*>(.*?)</textarea>', page, re.S)
    assert draft is not None
    assert html.unescape(draft.group(1)).strip() == ("big: pay arg=amount max USD 500.00 -> gate")
    assert "✓ 1 rule, no faulty line." in text_of(page)
    assert LAB in admin_client.get("/admin/approvals/caprule/").content.decode()
    assert LAB in admin_client.get("/admin/").content.decode()


def test_each_faulty_line_is_listed_with_its_line_and_column(admin_client: Client) -> None:
    content = post(admin_client, "validate", draft=FAULTY)
    assert "1 faulty line; 1 rule read." in text_of(content)
    assert "line 2, column 31: expected '->'" in text_of(content)
    # The caret view shows the admin's own line, escaped: never as markup.
    assert "<b>" not in content
    assert "&lt;b&gt;x" in content
    clean = post(admin_client, "validate", draft="shadow s: pay arg=amount max USD 5 -> gate\n")
    assert "✓ 1 rule (1 shadow), no faulty line." in text_of(clean)


def test_without_htmx_a_part_answers_with_the_whole_page(admin_client: Client) -> None:
    response = admin_client.post(LAB, {"part": "validate", "draft": FAULTY})
    content = response.content.decode()
    assert "<html" in content
    assert "line 2, column 31" in text_of(content)
    assert admin_client.post(LAB, {"part": "write"}, **HTMX).status_code == 400  # type: ignore[arg-type]


def test_a_call_tried_against_the_current_rules_and_the_draft(
    admin_client: Client, agent: Agent
) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    draft = "big: pay arg=amount max USD 1000.00 -> gate finance\n"
    assert try_call(admin_client, agent, "600", "current", draft) == "held"
    assert try_call(admin_client, agent, "600", "draft", draft) == "allowed"
    refusing = "huge: pay arg=amount max USD 100.00 -> refuse\n"
    assert try_call(admin_client, agent, "600", "draft", refusing) == "refused"
    content = post(
        admin_client,
        "try",
        draft=draft,
        agent=str(agent.pk),
        tool="pay",
        arguments=payment("600"),
        against="current",
    )
    assert part_of(content, "lab-try-gates") == "finance"
    reasons = re.search(r'id="lab-try-reasons".*?</table>', content, re.S)
    assert reasons is not None
    assert "cap big gate finance" in text_of(reasons.group(0))
    shadowed = "shadow watch: pay arg=amount max USD 10.00 -> gate\n"
    content = post(
        admin_client,
        "try",
        draft=shadowed,
        agent=str(agent.pk),
        tool="pay",
        arguments=payment("600"),
        against="draft",
    )
    assert part_of(content, "lab-try-status") == "allowed"
    shadow = re.search(r'id="lab-try-shadow".*?</table>', content, re.S)
    assert shadow is not None
    assert "watch gate" in text_of(shadow.group(0))


def test_a_try_the_form_refuses_says_why_without_quoting(
    admin_client: Client, agent: Agent
) -> None:
    fields = {"agent": str(agent.pk), "tool": "pay", "arguments": "{}", "against": "draft"}
    content = post(admin_client, "try", draft=FAULTY, **fields)
    assert "fix them to use the draft here" in text_of(content)
    content = post(admin_client, "try", draft="", **{**fields, "principal": "mallory-ZQXJ"})
    assert "This agent may not act for that principal." in text_of(content)
    assert "ZQXJ" not in content
    content = post(admin_client, "try", draft="", **{**fields, "tool": "no tool ZQXJ"})
    assert "Tool: A tool name" in text_of(content)
    assert "ZQXJ" not in content
    content = post(admin_client, "try", draft="", **{**fields, "against": "ZQXJ"})
    assert "Choose the draft or the current rules." in text_of(content)
    assert "ZQXJ" not in content


def history(approver: User, agent: Agent | None = None) -> dict[str, Call]:
    agent = agent or agent_make(name="payer", principal="carol", mode="danger_full_access")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    calls = {}
    for index, amount in enumerate(["100", "600", "700", "50", "800", "10"]):
        calls[f"c{index + 1}"] = call_make(
            agent=agent, arguments=payment(amount), now=MONDAY + timedelta(hours=index)
        )
    for name, approve in (("c2", True), ("c3", False), ("c5", True)):
        call = Call.objects.get(pk=calls[name].pk)
        call_decide(
            call_id=call.pk,
            user=approver,
            approve=approve,
            comment="",
            arguments_sha256=call.arguments_sha256,
            now=call.created_at + timedelta(minutes=5),
        )
    return calls


def command_report(tmp_path: Path, draft: str, *options: str) -> dict[str, Any]:
    path = tmp_path / "draft.txt"
    path.write_text(draft, encoding="utf-8")
    out = io.StringIO()
    call_command("backtest", str(path), "--json", *options, stdout=out)
    answer: dict[str, Any] = json.loads(out.getvalue())
    return answer


def page_report(content: str) -> dict[str, Any]:
    """The report as the page shows it, in the shape of ``--json``."""

    def counts(row_id: str) -> dict[str, int]:
        numbers = [int(n) for n in part_of(content, row_id).split()[1:]]
        return dict(zip(["allowed", "held", "refused"], numbers, strict=True))

    rules = {
        text_of(name): {"held": int(held), "refused": int(refused)}
        for name, held, refused in re.findall(
            r'<tr class="lab-rule"><th scope="row">(.*?)</th><td class="num">(\d+)</td>'
            r'<td class="num">(\d+)</td></tr>',
            content,
        )
    }
    changed = [
        {
            "call": call,
            "actual": actual,
            "replay": replay,
            "rules": re.findall(r"<code>(.*?)</code>", names),
        }
        for call, actual, replay, names in re.findall(
            r'<tr class="lab-change"><td><a href="/calls/([0-9a-f-]+)/"><code>[^<]*</code></a></td>'
            r"<td>(\w+)</td><td>(\w+)</td><td>(.*?)</td></tr>",
            content,
        )
    ]
    holds = re.search(
        r"mean <span class=\"num\">([\d.]+)</span>, max <span class=\"num\">(\d+)", content
    )
    assert holds is not None
    return {
        "calls": int(part_of(content, "lab-backtest-calls")),
        "actual": counts("lab-backtest-actual"),
        "replay": counts("lab-backtest-replay"),
        "rules": rules,
        "changed": changed,
        "holds_per_day": {"mean": float(holds.group(1)), "max": int(holds.group(2))},
    }


def test_the_backtest_shows_what_the_command_reports(admin_client: Client, tmp_path: Path) -> None:
    calls = history(user_make(username="ana"))
    draft = (
        "total: pay arg=amount sum USD 1000.00 per day -> gate\n"
        "big: pay arg=amount max USD 700.00 -> gate\n"
    )
    expected = command_report(tmp_path, draft)
    shown = page_report(post(admin_client, "backtest", draft=draft, since="", until=""))
    assert shown == {key: expected[key] for key in shown}
    assert expected["changed"], "the draft changes some verdicts"
    assert {change["call"] for change in shown["changed"]} <= {str(c.pk) for c in calls.values()}
    # A period: the same as the command's --since and --until.
    since, until = "2026-11-30T11:00:00Z", "2026-11-30T14:00"
    expected = command_report(tmp_path, draft, "--since", since, "--until", until)
    shown = page_report(post(admin_client, "backtest", draft=draft, since=since, until=until))
    assert shown == {key: expected[key] for key in shown}
    assert shown["calls"] == 3


def test_a_period_past_the_limit_is_left_to_the_command(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    history(user_make(username="ana"))
    monkeypatch.setattr(lab, "BACKTEST_MAX_CALLS", 5)
    draft = "big: pay arg=amount max USD 700.00 -> gate\n"
    content = text_of(post(admin_client, "backtest", draft=draft, since="", until=""))
    assert "This period holds 6 recorded calls, more than the 5 the lab replays" in content
    assert "manage.py backtest" in content
    content = post(admin_client, "backtest", draft=draft, since="2026-11-30T11:00Z", until="")
    assert part_of(content, "lab-backtest-calls") == "5"


def test_a_backtest_the_form_refuses_says_why_without_quoting(admin_client: Client) -> None:
    draft = "big: pay arg=amount max USD 700.00 -> gate\n"
    content = post(admin_client, "backtest", draft=draft, since="ZQXJ", until="")
    assert "Since: Expected an ISO-8601 date" in text_of(content)
    assert "ZQXJ" not in content
    content = post(admin_client, "backtest", draft=draft, since="2026-12-02", until="2026-12-01")
    assert "'Since' must be before 'until'." in text_of(content)
    content = post(admin_client, "backtest", draft=FAULTY, since="", until="")
    assert "fix them to backtest the draft" in text_of(content)


@pytest.mark.django_db(transaction=True)
def test_no_part_writes_anything(admin_client: Client, agent: Agent) -> None:
    history(user_make(username="ana"), agent)
    admin_client.get(LAB)  # the session as a first visit leaves it
    before = row_counts()
    draft = "total: pay arg=amount sum USD 100.00 per day -> gate\n"
    admin_client.get(LAB)
    post(admin_client, "validate", draft=FAULTY)
    for against in ("current", "draft"):
        try_call(admin_client, agent, "600", against, draft)
    post(admin_client, "backtest", draft=draft, since="", until="")
    assert row_counts() == before
