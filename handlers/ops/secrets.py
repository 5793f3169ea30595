"""Secrets in what agents write (PROTOCOL.md v3, "Secrets on write"): found before anything
is stored or embedded, then redacted, refused or let through (`MEMBUS_SECRETS`).

Each kind is a few regular expressions for shapes that are secrets by their form alone
(a provider's key prefix and length, a PEM block, a JWT's three base64url parts), or by an
unambiguous label beside them (`Bearer`, `aws_secret_access_key=`). A word that merely
looks random is not enough: a memory full of ids and hashes must not lose them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from handlers.errors import InvalidRequest

SecretsMode = Literal["redact", "block", "off"]

# (kind, pattern); where a pattern has a group named `secret`, only that group is
# replaced (the user and host of a URL stay readable), else the whole match.
_PATTERNS: list[tuple[str, str]] = [
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
    ),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # Anthropic (sk-ant-), OpenAI (sk-, sk-proj-, sk-svcacct-), and the like.
    ("api_key", r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("api_key", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b"),
    ("api_key", r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
    ("api_key", r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    ("api_key", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    ("api_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),
    ("api_key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("api_key", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("api_key", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("api_key", r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    ("api_key", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b"),
    ("cloud_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    (
        "cloud_key",
        r"(?i)\baws_?secret_?(?:access_?)?key\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    ),
    ("cloud_key", r"(?i)\bAccountKey=(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
    ("bearer_token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)"),
    (
        "url_password",
        r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*:(?P<secret>(?!\[redacted:)[^\s/@]+)@[^\s/@]",
    ),
]
_COMPILED = [(kind, re.compile(pattern, re.DOTALL)) for kind, pattern in _PATTERNS]


def mark(kind: str) -> str:
    return f"[redacted:{kind}]"


def find(text: str) -> list[str]:
    """The kinds of secret in `text`, in the order of the patterns (each once)."""
    return list(dict.fromkeys(kind for kind, pattern in _COMPILED if pattern.search(text)))


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret replaced by `[redacted:<kind>]`, and the kinds found."""
    kinds: list[str] = []
    for kind, pattern in _COMPILED:

        def replace(
            match: re.Match[str], kind: str = kind, pattern: re.Pattern[str] = pattern
        ) -> str:
            kinds.append(kind)
            if "secret" in pattern.groupindex:
                start, end = match.span("secret")
                whole = match.group(0)
                offset = match.start()
                return whole[: start - offset] + mark(kind) + whole[end - offset :]
            return mark(kind)

        text = pattern.sub(replace, text)
    return text, list(dict.fromkeys(kinds))


class Secrets:
    """What a write does with the secrets in its text fields."""

    def __init__(self, mode: SecretsMode) -> None:
        self.mode = mode
        self.found: list[str] = []

    def text(self, field: str, value: str) -> str:
        """`value` of `field` as it may be stored: redacted, or refused (`block`)."""
        if self.mode == "off" or not value:
            return value
        if self.mode == "block":
            kinds = find(value)
            if kinds:
                raise InvalidRequest(
                    f"`{field}` holds what looks like a secret ({', '.join(kinds)}); this"
                    " service refuses to store secrets (MEMBUS_SECRETS=block). Remove it, or"
                    " put a reference to where the secret is kept, and send the request again."
                )
            return value
        cleaned, kinds = redact(value)
        self.found += [k for k in kinds if k not in self.found]
        return cleaned

    def json(self, field: str, value: Any) -> Any:
        """A free JSON value (`metadata`) with every string in it scanned as a text field;
        keys, numbers and the shape stay as sent."""
        if self.mode == "off":
            return value
        if isinstance(value, str):
            return self.text(field, value)
        if isinstance(value, dict):
            return {key: self.json(field, item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.json(field, item) for item in value]
        return value

    def optional(self, field: str, value: str | None) -> str | None:
        return None if value is None else self.text(field, value)

    def texts(self, field: str, values: Iterable[str]) -> list[str]:
        return [self.text(field, v) for v in values]

    @property
    def redacted(self) -> list[str] | None:
        """The kinds redacted, for the reply; None when nothing was."""
        return self.found or None
