"""Secrets found in written text (handlers.ops.secrets): real-shaped samples of each kind are
redacted, near misses are left alone. The samples are built from parts, so that no
complete key-shaped string sits in the repository for secret scanners to flag."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
import unicodedata

import pytest

from handlers.errors import InvalidRequest
from handlers.ops.secrets import Secrets, find, redact, visible

ALNUM = "Zq8xLm2Pv7Rt4Wn9Yb3Kc6Hd1Jf5Gs0AeU"  # mixed case and digits
assert len(ALNUM) == 34


def _pem(kind: str) -> str:
    body = "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", ALNUM * 2, ALNUM + "=="])
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----"


SAMPLES: list[tuple[str, str]] = [
    ("api_key", "sk-" + "proj-" + ALNUM + "_" + ALNUM),
    ("api_key", "sk-" + "ant-api03-" + ALNUM + ALNUM),
    ("api_key", "sk-" + ALNUM[:24]),
    ("api_key", "gh" + "p_" + ALNUM + "AB"),
    ("api_key", "github" + "_pat_" + ALNUM + "_" + ALNUM[:20]),
    ("api_key", "xox" + "b-1234567890-" + ALNUM[:20]),
    ("api_key", "sk" + "_live_" + ALNUM[:24]),
    ("api_key", "AI" + "za" + ALNUM + "x"),
    ("api_key", "hf" + "_" + ALNUM),
    ("api_key", "gl" + "pat-" + ALNUM[:20]),
    ("jwt", "ey" + "JhbGciOiJIUzI1NiJ9." + "ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0." + ALNUM[:30]),
    ("private_key", _pem("RSA PRIVATE KEY")),
    ("private_key", _pem("PRIVATE KEY")),
    ("private_key", _pem("OPENSSH PRIVATE KEY")),
    ("bearer_token", "Authorization: Bearer " + ALNUM[:28]),
    ("url_password", "postgres://app:" + "s3cr3t-Pa55" + "@db.internal:5432/main"),
    ("url_password", "redis://:" + "hunter2hunter2" + "@cache:6379/0"),
    ("cloud_key", "AK" + "IA" + "IOSFODNN7EXAMPL" + "E"),
    ("cloud_key", "aws_secret_access_key = " + ("wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY")),
    ("cloud_key", "DefaultEndpointsProtocol=https;AccountKey=" + ALNUM * 3 + "=="),
]


@pytest.mark.parametrize(
    ("kind", "secret"), SAMPLES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SAMPLES)]
)
def test_each_kind_is_found_and_redacted_in_running_text(kind: str, secret: str) -> None:
    text = f"The deploy uses {secret} for now; rotate it next week."
    cleaned, kinds = redact(text)
    assert kinds == [kind]
    assert f"[redacted:{kind}]" in cleaned
    assert cleaned.startswith("The deploy uses ") and cleaned.endswith("; rotate it next week.")
    assert find(cleaned) == []  # nothing of it is left to find


def test_a_url_keeps_its_user_and_host() -> None:
    cleaned, _ = redact("connect to postgres://app:" + "pw-12345678" + "@db.internal:5432/main")
    assert cleaned == "connect to postgres://app:[redacted:url_password]@db.internal:5432/main"


def test_an_unterminated_private_key_is_redacted_to_the_end() -> None:
    cleaned, kinds = redact("key:\n-----BEGIN PRIVATE KEY-----\n" + ALNUM * 4)
    assert kinds == ["private_key"] and cleaned == "key:\n[redacted:private_key]"


NEAR_MISSES = [
    "the sk- prefix marks OpenAI keys",  # a prefix alone
    "sk-" + "short123",  # too short for a key
    "tasks like ask-the-user-politely-before-deploying",  # `sk-` inside a word
    "eyJ" + "hbGciOi is how a JWT header starts",  # one part, not three
    "AKIA" + "IOSFODNN7EXAMP",  # 14 characters after AKIA, not 16
    "https://user@example.com/path and https://example.com:8443/x",  # no password
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----",
    "the bearer of bad news",  # `bearer` without a token
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 and ULID 01HZX3Y7Q8K9M2N4P6R8S0T2V4",
    "ghp is not a token, gh_1234 neither",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(text: str) -> None:
    assert redact(text) == (text, [])


def test_block_names_the_kind_and_the_field() -> None:
    with pytest.raises(InvalidRequest, match=r"`narrative` holds .*\(jwt\).*MEMBUS_SECRETS=block"):
        Secrets("block").text("narrative", SAMPLES[10][1])
    assert Secrets("block").text("content", "nothing secret") == "nothing secret"


def test_redact_collects_the_kinds_of_every_field_once() -> None:
    secrets = Secrets("redact")
    assert secrets.redacted is None
    secrets.text("content", SAMPLES[0][1])
    secrets.texts("facts", [SAMPLES[1][1], SAMPLES[17][1]])
    assert secrets.redacted == ["api_key", "cloud_key"]


def test_off_stores_as_sent() -> None:
    assert Secrets("off").text("content", SAMPLES[0][1]) == SAMPLES[0][1]


# --------------------------------------------------------------------------- v4 shapes

OPENAI = SAMPLES[0][1]
PEM = _pem("RSA PRIVATE KEY")
UNPADDED = PEM + "\n" * (3 - len(PEM) % 3)  # its base64 has no `=`
assert len(UNPADDED) % 3 == 0
V4_SHAPES: list[tuple[str, str, str]] = [
    # (kind, text, what it is redacted to)
    (
        "url_password",
        "postgres://app:" + "Zx9/Qw+8" + ALNUM[:10] + "@db:5432/main",
        "postgres://app:[redacted:url_password]@db:5432/main",
    ),
    (
        "url_password",
        "redis://app:" + "p@ss@w0rd" + "@cache:6379/0",
        "redis://app:[redacted:url_password]@cache:6379/0",
    ),
    ("api_key", "OPENAI_KEY_" + OPENAI, "OPENAI_KEY_[redacted:api_key]"),
    ("api_key", "TOKEN_" + SAMPLES[3][1] + "_prod", "TOKEN_[redacted:api_key]_prod"),
    ("cloud_key", "AWS_ID_" + SAMPLES[17][1], "AWS_ID_[redacted:cloud_key]"),
    ("jwt", "jwt=" + SAMPLES[10][1], "jwt=[redacted:jwt]"),
    ("private_key", PEM.lower(), "[redacted:private_key]"),
    ("private_key", PEM.replace("-----", "---"), "[redacted:private_key]"),
    ("private_key", _pem("ENCRYPTED PRIVATE KEY"), "[redacted:private_key]"),
    ("private_key", _pem("PGP PRIVATE KEY BLOCK"), "[redacted:private_key]"),
    (
        "private_key",
        "tls.key: " + base64.b64encode(PEM.encode()).decode(),
        "tls.key: [redacted:private_key]",
    ),
    (
        "private_key",
        "KEY=" + base64.urlsafe_b64encode(PEM.encode()).decode(),
        "KEY=[redacted:private_key]",
    ),
    # A label glued to the encoded block goes with it.
    ("private_key", "key_" + base64.b64encode(PEM.encode()).decode(), "[redacted:private_key]"),
    # An encoded block broken into MIME lines.
    (
        "private_key",
        "\n".join(textwrap.wrap(base64.b64encode(PEM.encode()).decode(), 76)) + "\nnext line",
        "[redacted:private_key]\nnext line",
    ),
    # ... unpadded, followed by a line of one word, which a line of base64 could be: the
    # word goes too (after padding, it would not).
    (
        "private_key",
        "\n".join(textwrap.wrap(base64.b64encode(UNPADDED.encode()).decode(), 64)) + "\nThanks",
        "[redacted:private_key]",
    ),
    # An encoded env file: what it holds is found too.
    (
        "api_key",
        "data: " + base64.b64encode(b"OPENAI_API_KEY=" + OPENAI.encode()).decode() + " end",
        "data: [redacted:api_key] end",
    ),
]


@pytest.mark.parametrize(("kind", "text", "redacted"), V4_SHAPES)
def test_v4_shapes_are_found(kind: str, text: str, redacted: str) -> None:
    assert find(text) == [kind]
    assert redact(text) == (redacted, [kind])


HIDDEN_SAMPLES = ["\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\U000e0041"]


@pytest.mark.parametrize("hidden", HIDDEN_SAMPLES, ids=[f"U+{ord(h):04X}" for h in HIDDEN_SAMPLES])
def test_an_invisible_character_inside_a_secret_does_not_hide_it(hidden: str) -> None:
    key = OPENAI[:5] + hidden + OPENAI[5:20] + hidden + OPENAI[20:]
    text = f"key{hidden} {key} end{hidden}"
    assert find(text) == ["api_key"]
    # The key goes with what hid in it; what hid elsewhere stays.
    assert redact(text) == (f"key{hidden} [redacted:api_key] end{hidden}", ["api_key"])
    dsn = f"postgres://app:hunter{hidden}2-pass@db/x"
    assert redact(dsn)[0] == "postgres://app:[redacted:url_password]@db/x"


def test_every_format_character_is_hidden() -> None:
    # This Python's Unicode data: a newer one adds to `HIDDEN` what a test here fails on.
    cf = [chr(i) for i in range(sys.maxunicode + 1) if unicodedata.category(chr(i)) == "Cf"]
    assert cf and all(visible(c) == "" for c in cf)
    assert visible("a\u200bb\u00e9\u4e2d\U0001f600") == "ab\u00e9\u4e2d\U0001f600"


def test_a_url_password_stops_at_the_host_and_at_a_quote() -> None:
    # JSON, as a capture's arguments are scanned: the password ends with its string.
    args = json.dumps({"url": "postgres://u:" + "pw/1@2" + "@h/db", "to": "ops@example.com"})
    cleaned, kinds = redact(args)
    assert kinds == ["url_password"]
    assert json.loads(cleaned) == {
        "url": "postgres://u:[redacted:url_password]@h/db",
        "to": "ops@example.com",
    }
    two = "a postgres://u:" + "pw1" + "@h1/x and redis://v:" + "pw2" + "@h2/0"
    assert redact(two)[0] == (
        "a postgres://u:[redacted:url_password]@h1/x and redis://v:[redacted:url_password]@h2/0"
    )


V4_NEAR_MISSES = [
    "ids 01HZX3Y7Q8K9M2N4P6R8S0T2V4 01J0ABCDEFGHJKMNPQRSTVWXYZ and mem_01HZX3Y7Q8K9M2N4P6R8S0T2V4",
    "uuid 550e8400-e29b-41d4-a716-446655440000 and 123e4567-e89b-12d3-a456-426614174000",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 in the lock file",
    "git 9fceb02d0ae598e95dc970b74767f19372d61af8 9fceb02",
    "task-refactor-the-login-flow-before-release task-zq8xlm2pv7rt4wn9yb3kc6hd1jf5gs0aeu",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n"
    "-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa\n"
    "-----END CERTIFICATE-----",
    "pub: "
    + base64.b64encode(
        b"-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----\n"
    ).decode(),
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC" + "Pu8bLiC4Ke7yXs" * 5 + " me@laptop",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host",
    "see https://example.com/a/b?q=1#x, https://example.com:8443/docs/@team,"
    " git@github.com:o/r.git",
    "https://mastodon.social/@alice and http://localhost:8080/users/@me",
    "mail ops@example.com or first.last+tag@sub.example.co.uk",
    "an image: iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg==",
    "a word with a soft\u00adhyphen and a zero\u200bwidth space",
]


@pytest.mark.parametrize("text", V4_NEAR_MISSES)
def test_v4_near_misses_are_left_alone(text: str) -> None:
    assert find(text) == []
    assert redact(text) == (text, [])


def test_tags_holding_a_secret_become_one_redacted_tag() -> None:
    secrets = Secrets("redact")
    tags = ["deploy", SAMPLES[3][1].lower(), "sk-" + "proj-" + ALNUM.lower(), "later"]
    assert secrets.tags("tags", tags) == ["deploy", "redacted:api_key", "later"]
    assert secrets.redacted == ["api_key"]
    assert Secrets("redact").tags("tags", ["task-1", "v2.0"]) == ["task-1", "v2.0"]
    with pytest.raises(InvalidRequest, match=r"`tags` holds .*\(api_key\)"):
        Secrets("block").tags("tags", tags)
    assert Secrets("off").tags("tags", tags) == tags


def test_metadata_keys_are_redacted_and_kept_apart() -> None:
    secrets = Secrets("redact")
    meta = {OPENAI: 1, SAMPLES[1][1]: {"nested " + OPENAI: [OPENAI]}, "plain": "x"}
    assert secrets.json("metadata", meta) == {
        "[redacted:api_key]": 1,
        "[redacted:api_key]#2": {"nested [redacted:api_key]": ["[redacted:api_key]"]},
        "plain": "x",
    }
    with pytest.raises(InvalidRequest, match=r"`metadata` holds .*\(api_key\)"):
        Secrets("block").json("metadata", {OPENAI: 1})


def test_a_name_holding_a_secret_is_refused_in_redact_and_block() -> None:
    for mode in ("redact", "block"):
        with pytest.raises(InvalidRequest, match=r"`name` holds .*\(api_key\).*cannot be redacted"):
            Secrets(mode).name("name", "state " + OPENAI)  # type: ignore[arg-type]
    assert Secrets("redact").name("name", "before-deploy") == "before-deploy"
    assert Secrets("off").name("name", OPENAI) == OPENAI


def test_kinds_are_reported_in_one_order_whatever_the_text_order() -> None:
    text = f"{SAMPLES[15][1]} then {OPENAI} then {SAMPLES[10][1]}"
    assert redact(text)[1] == ["jwt", "api_key", "url_password"]
    assert find(text) == ["jwt", "api_key", "url_password"]
