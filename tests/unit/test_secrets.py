"""Secrets found in written text (handlers.ops.secrets): real-shaped samples of each kind are
redacted, near misses are left alone. The samples are built from parts, so that no
complete key-shaped string sits in the repository for secret scanners to flag."""

from __future__ import annotations

import pytest

from handlers.errors import InvalidRequest
from handlers.ops.secrets import Secrets, find, redact

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
