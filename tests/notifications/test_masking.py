"""Channels' secrets in admin (notifications/masking.py): staff who may only view channels see
``••••`` in place of each secret on every admin page; those who may change channels see the
secret and the whole target on a channel's page, to edit them. Pages are fetched with
Django's test client as each of them."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from approvals.models import AuditEntry
from notifications.channels import channel_add
from notifications.masking import SECRET_MASK, target_masked
from notifications.models import Notification, NotificationChannel
from tests.factories import user_make
from tests.outbox import SECRET, held, holding_agent

pytestmark = pytest.mark.django_db
Kind = NotificationChannel.Kind

WEBHOOK = (
    "https://hookuser:H00kPassw0rd@hooks.example.test/countersign/T0KEN-in-the-path?key=also-secret"
)
SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7/#approvals"
JSON = "json://apiuser:Ch4tS3cret@127.0.0.1:8080/chat?token=t0ken-in-the-query"
# Every piece of the channels above that is a credential.
SECRETS = (
    SECRET,
    "hookuser",
    "H00kPassw0rd",
    "T0KEN-in-the-path",
    "also-secret",
    "T1JJ3T3L2",
    "A1BRTD4JD",
    "TIiajkdnlazkcOXrIdevi7",
    "apiuser",
    "Ch4tS3cret",
    "t0ken-in-the-query",
)


def staff(username: str, *codenames: str) -> Client:
    """A signed-in staff member holding the notifications' and the audit's permissions
    named."""
    person = user_make(username=username, decide=False)
    person.is_staff = True
    person.save()
    person.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(User.objects.get(pk=person.pk))
    return client


VIEWING = ("view_notificationchannel", "view_notification", "view_auditentry")


@pytest.fixture
def channels() -> list[NotificationChannel]:
    made = [
        channel_add(kind=Kind.WEBHOOK, target=WEBHOOK, secret=SECRET, name="ops hook"),
        channel_add(kind=Kind.APPRISE, target=SLACK, name="slack"),
        channel_add(kind=Kind.APPRISE, target=JSON, name="json"),
        channel_add(kind=Kind.EMAIL, target="approvers", name="mail"),
    ]
    held(holding_agent())  # a message of each channel in the outbox
    return made


def pages(channels: list[NotificationChannel]) -> list[str]:
    """Every admin page that shows a channel or what refers to one."""
    base = "/admin/notifications"
    urls = ["/admin/", f"{base}/notificationchannel/", f"{base}/notification/"]
    for channel in channels:
        urls += [
            f"{base}/notificationchannel/{channel.pk}/change/",
            f"{base}/notificationchannel/{channel.pk}/history/",
        ]
    urls += [f"{base}/notification/{message.pk}/change/" for message in Notification.objects.all()]
    urls.append("/admin/approvals/auditentry/")
    entries = AuditEntry.objects.filter(object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL)
    urls += [f"/admin/approvals/auditentry/{entry.pk}/change/" for entry in entries]
    return urls


def text_of(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return html.unescape(response.content.decode())


def test_view_only_staff_see_no_secret_on_any_page(channels: list[NotificationChannel]) -> None:
    viewer = staff("vic", *VIEWING)
    for url in pages(channels):
        page = text_of(viewer, url)
        for secret in SECRETS:
            assert secret not in page, (url, secret)
    hook, slack, json_channel, mail = channels
    page = text_of(viewer, f"/admin/notifications/notificationchannel/{hook.pk}/change/")
    assert "https://••••:••••@hooks.example.test/••••/••••?key=••••" in page
    # The secret's place shows that there is one.
    assert re.search(r'Secret:</label>\s*<div class="readonly">••••</div>', page)
    page = text_of(viewer, f"/admin/notifications/notificationchannel/{slack.pk}/change/")
    assert "slack://••••/••••/••••/#••••" in page
    page = text_of(viewer, f"/admin/notifications/notificationchannel/{json_channel.pk}/change/")
    assert "json://••••:••••@127.0.0.1:8080/••••?token=••••" in page
    # Addresses are no secret.
    page = text_of(viewer, f"/admin/notifications/notificationchannel/{mail.pk}/change/")
    assert '<div class="readonly">approvers</div>' in page
    # Nor may a viewer change or delete a channel, which would show a form with its secret.
    change = f"/admin/notifications/notificationchannel/{hook.pk}/change/"
    assert viewer.post(change, {"name": "x"}).status_code == 403
    assert (
        viewer.get(f"/admin/notifications/notificationchannel/{hook.pk}/delete/").status_code == 403
    )


def test_who_may_change_channels_sees_each_secret_on_its_page_to_edit(
    channels: list[NotificationChannel],
) -> None:
    changer = staff("chad", "view_notificationchannel", "change_notificationchannel")
    hook, slack, json_channel, _ = channels
    page = text_of(changer, f"/admin/notifications/notificationchannel/{hook.pk}/change/")
    assert f'name="target" value="{WEBHOOK}"' in page
    assert f'name="secret" value="{SECRET}"' in page
    for channel in (slack, json_channel):
        page = text_of(changer, f"/admin/notifications/notificationchannel/{channel.pk}/change/")
        assert f'name="target" value="{channel.target}"' in page
    # The list is for finding a channel: its secrets stay masked there for everyone.
    listing = text_of(changer, "/admin/notifications/notificationchannel/")
    assert "slack://••••/••••/••••/#••••" in listing
    for secret in SECRETS:
        assert secret not in listing


@pytest.mark.parametrize(
    ("kind", "target", "shown"),
    [
        (Kind.WEBHOOK, "http://u:p@[::1]:8080/x/", "http://••••:••••@[::1]:8080/••••/"),
        (Kind.WEBHOOK, "http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        (
            Kind.APPRISE,
            "mmost://chat.example.com:8065/3ccdd1134",
            "mmost://chat.example.com:8065/••••",
        ),
        # Where a service's URL forms put a token in the host's place, the host is masked.
        (Kind.APPRISE, "tgram://123456789:AAHfSecretTok/12345", "tgram://••••:••••/••••"),
        (Kind.APPRISE, "ntfy://my-secret-topic", "ntfy://••••"),
        (Kind.APPRISE, "ntfys://ntfy.sh/my-secret-topic", "ntfys://••••/••••"),
        (
            Kind.APPRISE,
            "matrixs://user:pw@matrix.example.org/#room",
            "matrixs://••••:••••@••••/#••••",
        ),
        (Kind.APPRISE, "discord://4174216298/JHMHI8qBe7bk", "discord://••••/••••"),
        (
            Kind.APPRISE,
            "json://host.example/p?+Authorization=Bearer%20x&a",
            "json://host.example/••••?+Authorization=••••&••••",
        ),
        (Kind.APPRISE, "nosuchscheme://a.example/b", "nosuchscheme://••••/••••"),
        (Kind.APPRISE, "not a url", SECRET_MASK),
        (
            Kind.EMAIL,
            "ops@example.test, audit@example.test",
            "ops@example.test, audit@example.test",
        ),
    ],
)
def test_each_part_that_may_be_a_credential_is_masked(kind: str, target: str, shown: str) -> None:
    assert target_masked(kind, target) == shown
