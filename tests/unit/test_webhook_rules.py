"""The parts of `membus webhook` that need no network: URLs, signatures, what an answer
means, backoff, names. Delivery itself is tested in tests/integration/test_webhook.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from bus.cli import app
from bus.webhook import (
    FIRST_BACKOFF_S,
    SettingError,
    WebhookSettings,
    backoff_s,
    consumer_name,
    covers,
    event_id,
    parse_url,
    retry_after_s,
    signature,
    stream_config,
    verdict,
)


def test_signature_is_the_hex_hmac_sha256_of_the_body_with_the_secret() -> None:
    body = b'{"action":"added","id":"01J"}'
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert signature("s3cret", body) == f"sha256={expected}"
    # RFC 4231 test case 2, so that any receiver's implementation can be checked against it.
    assert signature("Jefe", b"what do ya want for nothing?") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


@pytest.mark.parametrize(
    ("status", "meaning"),
    [
        (None, "retry"),
        (200, "delivered"),
        (202, "delivered"),
        (204, "delivered"),
        (301, "refused"),
        (400, "refused"),
        (401, "refused"),
        (404, "refused"),
        (408, "retry"),
        (425, "retry"),
        (429, "retry"),
        (500, "retry"),
        (502, "retry"),
        (503, "retry"),
    ],
)
def test_what_an_answer_means(status: int | None, meaning: str) -> None:
    assert verdict(status) == meaning


def test_backoff_doubles_from_half_a_second_up_to_the_cap() -> None:
    waits = [backoff_s(attempt, cap=30) for attempt in range(1, 10)]
    assert waits == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff_s(1, cap=30) == FIRST_BACKOFF_S
    assert backoff_s(10_000, cap=30) == 30  # no overflow however long the receiver is down


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    assert backoff_s(1, cap=30, retry_after=12) == 12
    assert backoff_s(1, cap=30, retry_after=3600) == 30
    assert backoff_s(5, cap=30, retry_after=0) == 0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_s("7") == 7
    assert retry_after_s("Thu, 01 Jan 2026 12:00:20 GMT", now) == 20
    assert retry_after_s("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0
    assert retry_after_s(None) is None
    assert retry_after_s("soon") is None


def test_a_url_is_parsed_once_with_its_credentials_kept_out_of_logs() -> None:
    target = parse_url("https://hook:p%40ss@example.com/in/membus?token=abc")
    assert (target.https, target.host, target.port) == (True, "example.com", 443)
    assert target.path == "/in/membus?token=abc"
    assert target.authorization == "Basic " + base64.b64encode(b"hook:p@ss").decode()
    assert target.shown == "https://example.com:443/in/membus"
    plain = parse_url("http://127.0.0.1:8080")
    assert (plain.https, plain.port, plain.path, plain.authorization) == (False, 8080, "/", None)
    assert parse_url("http://[::1]:9000/x").shown == "http://[::1]:9000/x"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/x", "scheme must be http or https"),
        ("example.com/hook", "scheme must be http or https"),
        ("http:///hook", "names no host"),
        ("http://example.com:99999/", "port must be a number"),
        ("http://example.com:0/", "port must be a number"),
        ("http://example.com:abc/", "port must be a number"),
        ("http://example.com/a b", "percent-encoded"),
        ("", "the URL is empty"),
    ],
)
def test_a_bad_url_is_refused_with_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(SettingError, match=says) as caught:
        parse_url(url)
    assert caught.value.option == "--url"


def test_settings_are_checked_when_made() -> None:
    with pytest.raises(SettingError, match="workflow id"):
        WebhookSettings(url="http://h/", namespace="acme", workflow_id="wf.*")
    with pytest.raises(SettingError, match="must match"):
        WebhookSettings(url="http://h/", namespace="ac me")
    with pytest.raises(SettingError, match="retry or skip"):
        WebhookSettings(url="http://h/", namespace="acme", on_4xx="drop")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match="longest backoff"):
        WebhookSettings(url="http://h/", namespace="acme", max_backoff_s=0)
    settings = WebhookSettings(url="http://h/", namespace="acme", workflow_id="wf_1")
    assert settings.filter_subject == "mem.acme.events.wf_1.*.*"
    assert WebhookSettings(url="http://h/", namespace="acme").filter_subject == (
        "mem.acme.events.*.*.*"
    )


def test_a_webhook_keeps_its_consumer_across_restarts_and_secrets() -> None:
    one = consumer_name("https://example.com/a", "mem.acme.events.*.*.*")
    assert one == consumer_name("https://example.com/a", "mem.acme.events.*.*.*")
    assert one.startswith("membus-webhook-") and "." not in one and len(one) <= 64
    assert one != consumer_name("https://example.com/b", "mem.acme.events.*.*.*")
    assert one != consumer_name("https://example.com/a", "mem.acme.events.wf_1.*.*")
    assert one != consumer_name("https://example.com/a", "mem.other.events.*.*.*")


def test_event_ids_name_the_stream_its_creation_and_the_sequence() -> None:
    assert event_id("MEMBUS_EVENTS_acme", 1767225600000000, 42) == (
        "MEMBUS_EVENTS_acme:1767225600000000:42"
    )


@pytest.mark.parametrize(
    ("pattern", "subject", "kept"),
    [
        ("mem.acme.events.>", "mem.acme.events.*.*.*", True),
        ("mem.acme.events.>", "mem.acme.events.wf_1.*.*", True),
        ("mem.*.events.>", "mem.acme.events.*.*.*", True),
        ("mem.>", "mem.acme.events.*.*.*", True),
        ("mem.acme.events.*.*.*", "mem.acme.events.wf_1.*.*", True),
        ("mem.acme.events.wf_1.>", "mem.acme.events.*.*.*", False),
        ("mem.acme.events.>", "mem.other.events.*.*.*", False),
        ("mem.acme.events.*.*", "mem.acme.events.*.*.*", False),
        ("mem.acme.events.*.*.*", "mem.acme.events.>", False),
        ("mem.acme.events.>", "mem.acme.events", False),
    ],
)
def test_which_stream_subjects_keep_a_webhook_s_events(
    pattern: str, subject: str, kept: bool
) -> None:
    assert covers(pattern, subject) is kept


def test_the_events_stream_keeps_a_namespace_until_its_webhooks_deliver() -> None:
    config = stream_config("acme", replicas=3)
    assert config.name == "MEMBUS_EVENTS_acme"
    assert config.subjects == ["mem.acme.events.>"]
    assert config.retention is not None and config.retention.value == "interest"
    assert config.storage is not None and config.storage.value == "file"
    # "Down for a minute" is far inside the limits.
    assert config.max_age is not None and config.max_age >= 24 * 3600
    assert config.max_bytes is not None and config.max_bytes >= 100 * 1024 * 1024
    assert config.num_replicas == 3


def test_a_bad_url_is_refused_before_anything_starts() -> None:
    def error_of(*args: str) -> str:
        result = CliRunner().invoke(app, ["webhook", *args])
        assert result.exit_code == 2
        # Rich draws the message in a box, wrapped: its words, one space apart.
        return " ".join(result.stderr.replace("│", " ").split())

    assert "scheme must be http or https" in error_of("--url", "ftp://example.com/hook")
    assert "'wf.1' is not a workflow id" in error_of("--url", "http://example.com/", "wf.1")
