"""``POST /api/v1/calls/simulate`` (docs/api.md): the verdict a submission would get now,
with the same policy, counters and ledgers, and nothing recorded anywhere — no row in any
table of either app, no count in the submission rate limit."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
import redis
from django.apps import apps
from django.db import connection
from django.test import Client

from approvals.api import routes
from approvals.api.ratelimit import RATE_KEY_PREFIX, LocalLimiter
from approvals.models import Agent, Budget, Call, Ledger
from approvals.services.rules import budget_save, cap_rule_save
from notifications.models import NotificationChannel
from tests.factories import agent_with_token, payment
from tests.local_redis import requires_redis

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db

TOKEN = "cs_simulate-test-token"
CALLS = "/api/v1/calls"
SIMULATE = "/api/v1/calls/simulate"
SECRET = "ZQXJ"  # a distinctive value the agent wrote, never to come back in an answer
REDIS_URL = "redis://127.0.0.1:6379/13"


@pytest.fixture
def agent() -> Agent:
    made, _ = agent_with_token(token=TOKEN, name="sim-bot", principal="carol")
    return made


@pytest.fixture
def client(agent: Agent) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def _post(client: Client, path: str, body: dict[str, Any] | bytes, **headers: str) -> Response:
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(path, data, content_type="application/json", headers=headers)


def _pay(amount: str, run_id: str = "") -> dict[str, Any]:
    return {"tool": "pay", "arguments": payment(amount), "run_id": run_id}


def _simulated(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = _post(client, SIMULATE, body)
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"status", "reasons", "gates", "shadow"}
    assert answer["shadow"] == []
    return answer


def _submitted(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = _post(client, CALLS, body)
    assert response.status_code == 201, response.content
    state: dict[str, Any] = response.json()
    return state


def _as_simulated(state: dict[str, Any]) -> dict[str, Any]:
    """A submitted call's state as simulate answers it: a held call is ``pending`` there."""
    status = "held" if state["status"] == Call.Status.PENDING else state["status"]
    return {"status": status, "reasons": state["reasons"], "gates": state["gates"], "shadow": []}


def _row_counts() -> dict[str, int]:
    """The rows of every table of both apps, the many-to-many tables included."""
    return {
        model._meta.label: model._default_manager.count()
        for label in ("approvals", "notifications")
        for model in apps.get_app_config(label).get_models(include_auto_created=True)
    }


def test_each_verdict_is_the_one_the_submission_then_gets(client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate finance")
    cap_rule_save(line="huge: pay arg=amount max USD 10000.00 -> refuse")
    for amount, status in (("12.50", "allowed"), ("600", "held"), ("20000", "refused")):
        simulated = _simulated(client, _pay(amount))
        assert simulated["status"] == status
        assert simulated == _as_simulated(_submitted(client, _pay(amount)))
    held = _simulated(client, _pay("600"))
    assert held["gates"] == ["finance"]
    assert [reason["rule"] for reason in held["reasons"]] == ["big"]


def test_unreadable_arguments_are_refused_as_a_submission_is(client: Client) -> None:
    body = {"tool": "pay", "arguments": '{"amount": 1, "amount": 2}'}
    simulated = _simulated(client, body)
    assert simulated["status"] == "refused"
    assert simulated == _as_simulated(_submitted(client, body))


# Committed for real: outside a test's transaction, as a server runs it (on SQLite there is
# then no transaction around the evaluation to roll anything back).
@pytest.mark.django_db(transaction=True)
def test_simulating_leaves_every_table_as_it_was(client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="daily: pay arg=amount sum USD 1000.00 per day by principal -> gate")
    budget_save(budget=Budget(max_calls=100, max_tokens=10**6))
    NotificationChannel.objects.create(
        kind=NotificationChannel.Kind.EMAIL,
        target="approvers",
        events=list(NotificationChannel.Event.values),
    )
    usage = {"input_tokens": 10, "output_tokens": 5, "cost": "0.01", "cost_currency": "USD"}
    bodies = [
        {**_pay("600", run_id="r1"), "usage": usage, "context": "held"},
        {**_pay("12", run_id="r1"), "usage": usage},
        {"tool": "pay", "arguments": "not json"},
    ]
    before = _row_counts()
    assert Ledger.objects.count() == 0  # the submission would create the daily ledger
    for body in bodies:
        _simulated(client, body)
        _post(client, SIMULATE, body, **{"Idempotency-Key": "k1"})
    assert _row_counts() == before

    # The count sees what a submission of the same call writes.
    _submitted(client, bodies[0])
    after = _row_counts()
    grew = {label for label, count in after.items() if count > before[label]}
    expected = {"approvals.Call", "approvals.AuditEntry", "approvals.Ledger"}
    expected |= {"approvals.LedgerReservation", "approvals.RunCounter", "approvals.RunCost"}
    expected |= {"notifications.Notification"}
    assert expected <= grew, grew

    # With ledgers, counters and a held call in place, simulating still writes nothing.
    for body in bodies:
        _simulated(client, body)
    assert _row_counts() == after


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_simulate_answers_while_another_writer_holds_the_lock(client: Client) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's one write lock")
    cap_rule_save(line="daily: pay arg=amount sum USD 1000.00 per day -> gate")
    _submitted(client, _pay("400"))
    writer = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # what every submission's transaction takes first
        assert _simulated(client, _pay("700"))["status"] == "held"
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_sum_near_its_limit_holds_in_simulate_as_in_submission(client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="daily: pay arg=amount sum USD 1000.00 per day -> gate treasury")
    assert _submitted(client, _pay("400"))["status"] == "allowed"  # recorded: 400
    assert _submitted(client, _pay("550"))["status"] == "pending"  # reserved: 550
    assert _simulated(client, _pay("50"))["status"] == "allowed"  # 1000, at the limit
    over = _simulated(client, _pay("50.01"))
    assert over["status"] == "held"
    assert over["gates"] == ["treasury"]
    (reason,) = over["reasons"]
    assert reason["rule"] == "daily"
    assert "spent USD 950.00" in reason["message"]
    # Simulating again and again spends nothing: the answer stays the same.
    assert _simulated(client, _pay("50.01")) == over
    assert _simulated(client, _pay("50")) == _as_simulated(_submitted(client, _pay("50")))
    # Now the ledger is full: what simulate says of the next cent, the submission gets.
    assert _simulated(client, _pay("0.01")) == _as_simulated(_submitted(client, _pay("0.01")))


def test_a_budget_is_read_as_the_submission_reads_it_and_not_spent(
    client: Client, agent: Agent
) -> None:
    budget_save(budget=Budget(agent=agent, max_calls=2, action="gate", gate="ops"))
    for _ in range(5):  # simulations are no calls of the run
        assert _simulated(client, _pay("1", run_id="r"))["status"] == "allowed"
    assert _submitted(client, _pay("1", run_id="r"))["status"] == "allowed"
    assert _submitted(client, _pay("1", run_id="r"))["status"] == "allowed"
    third = _simulated(client, _pay("1", run_id="r"))
    assert (third["status"], third["gates"]) == ("held", ["ops"])
    assert third == _as_simulated(_submitted(client, _pay("1", run_id="r")))
    assert _simulated(client, _pay("1", run_id="another"))["status"] == "allowed"


def test_the_agents_mode_decides_as_for_a_submission(db: None) -> None:
    agent_with_token(token="cs_sim-default", name="asking", mode="default")
    client = Client(HTTP_AUTHORIZATION="Bearer cs_sim-default")
    body = {"tool": "shell", "arguments": '{"cmd": "ls"}'}
    simulated = _simulated(client, body)
    assert simulated == _as_simulated(_submitted(client, body))
    assert Call.objects.count() == 1


def test_simulating_spends_none_of_the_submission_rate(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = LocalLimiter(2, 60)
    monkeypatch.setattr(routes, "submission_limiter", lambda: limiter)
    simulated = [_post(client, SIMULATE, _pay("1")) for _ in range(3)]
    assert [r.status_code for r in simulated] == [200, 200, 429]
    assert simulated[2].json()["error"]["code"] == "rate_limited"
    assert "simulated" in simulated[2].json()["error"]["message"]
    assert 1 <= int(simulated[2]["Retry-After"]) <= 60
    # The submissions' own window is whole, and spending it leaves simulate's alone.
    submitted = [_post(client, CALLS, _pay("1")) for _ in range(3)]
    assert [r.status_code for r in submitted] == [201, 201, 429]
    assert Call.objects.count() == 2


@requires_redis
def test_in_redis_only_the_simulate_window_counts(
    client: Client, agent: Agent, settings: Any
) -> None:
    settings.COUNTERSIGN_RATE_LIMIT = (5, 60)
    settings.REDIS_URL = REDIS_URL
    submissions = f"{RATE_KEY_PREFIX}agent:{agent.pk}"
    simulations = f"{RATE_KEY_PREFIX}simulate:{agent.pk}"
    with redis.Redis.from_url(REDIS_URL) as store:
        store.delete(submissions, simulations)
        for _ in range(3):
            _simulated(client, _pay("1"))
        assert (store.zcard(submissions), store.zcard(simulations)) == (0, 3)
        _submitted(client, _pay("1"))
        assert (store.zcard(submissions), store.zcard(simulations)) == (1, 3)
        store.delete(submissions, simulations)


def test_an_unreachable_limiter_refuses_simulate_too(
    client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.COUNTERSIGN_RATE_LIMIT = (2, 60)
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # the discard port: nothing answers there
    response = _post(client, SIMULATE, _pay("1"))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"


@pytest.mark.parametrize(
    "authorization", [None, "Bearer cs_not-a-token", f"Basic {TOKEN}", f"Bearer {TOKEN} x"]
)
def test_without_a_valid_token_nothing_is_simulated(
    agent: Agent, authorization: str | None
) -> None:
    client = Client() if authorization is None else Client(HTTP_AUTHORIZATION=authorization)
    response = client.post(SIMULATE, json.dumps(_pay("1")), "application/json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert "WWW-Authenticate" in response


def test_a_disabled_agent_may_not_simulate(agent: Agent, client: Client) -> None:
    Agent.objects.filter(pk=agent.pk).update(active=False)
    response = _post(client, SIMULATE, _pay("1"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "agent_disabled"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        f'{{"tool": "pay", "arguments": "{{}}", "{SECRET}": 1}}'.encode(),
        f'{{"tool": "{SECRET} x", "arguments": "{{}}"}}'.encode(),
        b'{"tool": "pay", "arguments": 5}',
        b'{"tool": "pay", "tool": "pay", "arguments": "{}"}',
        f'{{"tool": "pay", "arguments": "{{}}", "run_id": "{SECRET * 60}"}}'.encode(),
        b'{"tool": "pay", "arguments": "{}", "context": "a\\u0000b"}',
        b'{"tool": "pay", "arguments": "{}", "usage": {"input_tokens": -1}}',
        f'{{"tool": "pay", "arguments": "{{}}", "principal": "{SECRET}"}}'.encode(),
    ],
)
def test_bad_input_gets_the_submissions_refusal_and_changes_nothing(
    client: Client, body: bytes
) -> None:
    before = _row_counts()
    simulated = _post(client, SIMULATE, body)
    assert _row_counts() == before
    submitted = _post(client, CALLS, body)
    assert simulated.status_code in (400, 403)
    assert (simulated.status_code, simulated.json()) == (submitted.status_code, submitted.json())
    assert SECRET not in simulated.content.decode()
    assert Call.objects.count() == 0


def test_an_overlong_idempotency_key_is_refused_as_on_submission(client: Client) -> None:
    response = _post(client, SIMULATE, _pay("1"), **{"Idempotency-Key": "k" * 201})
    assert response.status_code == 400
    assert (
        response.json() == _post(client, CALLS, _pay("1"), **{"Idempotency-Key": "k" * 201}).json()
    )


def test_a_used_idempotency_key_does_not_replay_in_simulate(client: Client) -> None:
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    first = _post(client, CALLS, _pay("1"), **{"Idempotency-Key": "same"})
    assert first.status_code == 201
    # Another body under the same key: a submission would be a conflict; simulate evaluates it.
    simulated = _post(client, SIMULATE, _pay("600"), **{"Idempotency-Key": "same"})
    assert (simulated.status_code, simulated.json()["status"]) == (200, "held")
    assert _post(client, CALLS, _pay("600"), **{"Idempotency-Key": "same"}).status_code == 409


def test_only_post_is_served(client: Client) -> None:
    response = client.get(SIMULATE)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_the_openapi_document_describes_simulate(client: Client) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    operation = schema["paths"][SIMULATE]["post"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "429", "503"}
    submit = schema["paths"][CALLS]["post"]["requestBody"]
    assert operation["requestBody"] == submit
    answer = schema["components"]["schemas"]["SimulationOut"]
    assert answer["properties"]["status"]["enum"] == ["allowed", "held", "refused"]
    assert set(answer["required"]) == {"status", "reasons", "gates", "shadow"}
