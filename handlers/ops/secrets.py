"""Secrets in what agents write (PROTOCOL.md v3 "Secrets on write", v4 "Secrets: every stored
text"): found before anything is stored or embedded, then redacted, refused or let through
(`MEMBUS_SECRETS`).

Each kind is a few regular expressions for shapes that are secrets by their form alone
(a provider's key prefix and length, a PEM block, a JWT's three base64url parts), or by an
unambiguous label beside them (`Bearer`, `aws_secret_access_key=`). A word that merely
looks random is not enough: a memory full of ids and hashes must not lose them.

The shapes are matched in the text with its invisible characters (zero-width spaces, joiners,
direction marks, soft hyphens, ...) left out, so that one slipped inside a key does not hide
it; what is replaced is the span of the original text the match covers. A long base64 run is
decoded and scanned too (a base64-encoded PEM private key, as Kubernetes secrets hold them)."""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, NamedTuple

from handlers.errors import InvalidRequest

SecretsMode = Literal["redact", "block", "off"]

# Characters that show nothing: Unicode's format characters (category Cf, as of Unicode 15:
# a unit test checks the list against `unicodedata`), the combining grapheme joiner,
# variation selectors and the Hangul fillers.
HIDDEN = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f"
    "\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef"
)
_HIDDEN_RE = re.compile(f"[{HIDDEN}]")

# A key's prefix starts a word, or follows a label it is glued to by `_`
# (`OPENAI_KEY_sk-proj-...`); `=` and `:` already end a word. Not after a letter or digit:
# `task-...` holds `sk-`.
_START = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"
# The characters a URL's password may not hold: blanks, and what quotes or ends a URL in
# running text and JSON.
_NOT_URL = "\\s\"'<>`"

# (kind, pattern); where a pattern has a group named `secret`, only that group is
# replaced (a label stays readable), else the whole match. A URL's password (`_url_spans`)
# goes first, whole, before a key inside it could leave part of it behind.
_PATTERNS: list[tuple[str, str]] = [
    (
        "private_key",
        # Any case, any number of dashes (a header retyped or lower-cased is still one).
        r"(?i)-{3,}\s*BEGIN[ \t]+(?:[A-Z0-9]+[ \t]+)*PRIVATE[ \t]+KEY(?:[ \t]+BLOCK)?\s*-{3,}"
        r"(?:.*?-{3,}\s*END[ \t]+(?:[A-Z0-9]+[ \t]+)*PRIVATE[ \t]+KEY(?:[ \t]+BLOCK)?\s*-{3,}"
        r"|.*\Z)",
    ),
    ("jwt", rf"{_START}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}"),
    (
        "api_key",
        # One pattern (one pass over the text) for the providers' prefixes: Anthropic
        # (sk-ant-), OpenAI (sk-, sk-proj-, sk-svcacct-), GitHub, GitLab, Slack, Stripe,
        # Google, Hugging Face, npm, PyPI, SendGrid.
        _START
        + "(?:"
        + "|".join(
            [
                r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
                rf"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{{36,}}{_END}",
                rf"github_pat_[A-Za-z0-9_]{{40,}}{_END}",
                rf"glpat-[A-Za-z0-9_-]{{20,}}{_END}",
                rf"xox[abposr]-[A-Za-z0-9-]{{10,}}{_END}",
                rf"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{{16,}}{_END}",
                r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])",
                rf"hf_[A-Za-z0-9]{{30,}}{_END}",
                rf"npm_[A-Za-z0-9]{{36}}{_END}",
                r"pypi-AgE[A-Za-z0-9_-]{50,}",
                r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
            ]
        )
        + ")",
    ),
    ("cloud_key", rf"{_START}(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{{16}}{_END}"),
    (
        "cloud_key",
        r"(?i)(?<![A-Za-z0-9])aws_?secret_?(?:access_?)?key\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    ),
    ("cloud_key", r"(?i)\bAccountKey=(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
    ("bearer_token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)"),
]

# `scheme://user:`, where a password may follow: not a port followed by a path
# (`host:8080/x@y`), nor what was redacted already.
_URL_START = re.compile(
    # A scheme is short: unbounded, each word of a long dotted run would be read to its end.
    rf"\b[a-zA-Z][a-zA-Z0-9+.-]{{0,31}}://[^{_NOT_URL}/:@]*:(?!\d{{1,5}}/)(?!\[redacted:)"
)
_URL_TOKEN = re.compile(f"[^{_NOT_URL}]+")

# A run of base64 (standard or URL-safe) long enough to hold a key, with the lines that
# continue it (MIME breaks its lines, JSON shows the break as `\n`).
_ENCODED = re.compile(
    r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}"
    # A continuing line is a whole line (padding at most after it).
    r"(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z0-9+/_-]{4,}(?==*(?:\r?\n|\\r|\\n|\"|\Z)))*"
    r"={0,2}(?![A-Za-z0-9+/_=-])"
)
_BREAKS = re.compile(r"\r|\n|\\r|\\n")
# `-----`, base64-encoded from a multiple of three bytes: how an encoded PEM block starts.
_ENCODED_DASHES = "LS0tLS"
# A decoded run is only scanned when it is text: random bytes are not UTF-8.
_MAX_DECODED = 1 << 20


# What every secret holds, one of these at least (a pattern's fixed part, a base64 run): a
# text with none, nearly all of them, is scanned with one search instead of twenty.
_MAYBE = re.compile(
    r"(?i:---|://|bearer|secret|accountkey)|[A-Za-z0-9+/_-]{32}"
    rf"|{_START}(?:eyJ|sk-|gh[pousr]_|github_pat_|glpat-|xox|[sr]k_(?:live|test)_|AIza|hf_"
    r"|npm_|pypi-|SG\.|AKIA|ASIA|ABIA|ACCA)"
)

# The kinds, in the order a field's are reported (v3's).
KINDS = ("private_key", "jwt", "api_key", "cloud_key", "bearer_token", "url_password")


class _Pattern(NamedTuple):
    kind: str
    regex: re.Pattern[str]
    whole: bool  # replaced whole, else only its `secret` group


_COMPILED = [
    _Pattern(kind, compiled, "secret" not in compiled.groupindex)
    for kind, pattern in _PATTERNS
    for compiled in [re.compile(pattern, re.DOTALL)]
]


def mark(kind: str) -> str:
    return f"[redacted:{kind}]"


def visible(text: str) -> str:
    """`text` without its invisible characters."""
    return _HIDDEN_RE.sub("", text)


def find(text: str) -> list[str]:
    """The kinds of secret in `text`, each once, in the order of `KINDS`."""
    shown = visible(text)
    if not _MAYBE.search(shown):
        return []
    kinds = _plain_kinds(shown)
    for run in _ENCODED.finditer(shown):
        kinds += _decoded_kinds(run.group(0))
    return sorted(set(kinds), key=KINDS.index)


def _plain_kinds(shown: str) -> list[str]:
    """The kinds `shown` holds as it is (not encoded)."""
    kinds = [p.kind for p in _COMPILED if p.regex.search(shown)]
    return kinds + ["url_password" for _ in itertools.islice(_url_spans(shown), 1)]


def _decoded_kinds(run: str) -> list[str]:
    """The kinds of secret in the text a base64 run encodes (none when it encodes no text)."""
    raw = _BREAKS.sub("", run).rstrip("=").replace("-", "+").replace("_", "/")
    # From the run's start; or, when a label is glued to it (`key_LS0t...`), from where an
    # encoded `-----` begins.
    starts = [0, *([i] if (i := raw.find(_ENCODED_DASHES, 1)) > 0 else [])]
    for start in starts:
        text = _decoded(raw[start : start + _MAX_DECODED * 4 // 3])
        if text is not None:
            # Not decoded again: a secret encoded twice over is beyond what a scan guesses.
            kinds = _plain_kinds(visible(text))
            if kinds:
                return sorted(set(kinds), key=KINDS.index)
    return []


def _decoded(raw: str) -> str | None:
    """The text base64 `raw` (unpadded) encodes; None when it is not base64 of text. A few
    undecodable bytes are let by (a last line that was a word, not base64, spoils the tail);
    random bytes are mostly undecodable as UTF-8."""
    raw = raw[: len(raw) - 1] if len(raw) % 4 == 1 else raw
    try:
        data = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    text = data.decode("utf-8", "replace")
    return text if text.count("\ufffd") * 20 <= len(text) else None


Spans = Iterator[tuple[int, int, list[str]]]


def _pattern_spans(p: _Pattern, shown: str) -> Spans:
    for match in p.regex.finditer(shown):
        start, end = match.span() if p.whole else match.span("secret")
        yield start, end, [p.kind]


def _url_spans(shown: str) -> Spans:
    """The passwords of URLs (`scheme://user:password@host`): each runs to the last `@` of
    its URL that a host follows, so it may hold `/`, `+` and `@`. One pass, whatever the
    text: each run of URL characters is measured once, however many URLs start in it."""
    run_end = last_at = done = -1
    for start in _URL_START.finditer(shown):
        at = start.end()
        if at < done:  # in a password redacted already
            continue
        if at >= run_end:
            run = _URL_TOKEN.match(shown, at)
            if run is None:
                continue
            run_end, last_at = run.end(), _last_host_at(shown, at, run.end())
        if last_at > at:
            done = last_at
            yield at, last_at, ["url_password"]


def _last_host_at(shown: str, start: int, end: int) -> int:
    """Where the last `@` in `shown[start:end]` that a host follows is; -1 if none."""
    at = shown.rfind("@", start, end)
    while at >= 0 and (at + 1 >= end or shown[at + 1] in "/@"):
        at = shown.rfind("@", start, at)
    return at


def _encoded_spans(shown: str) -> Spans:
    for match in _ENCODED.finditer(shown):
        kinds = _decoded_kinds(match.group(0))
        if kinds:
            yield *match.span(), kinds


def _replace(text: str, shown: str, spans: Callable[[str], Spans], found: list[str]) -> str:
    """`text` with each span `spans` finds in `shown` (its visible characters) replaced by
    the mark of its first kind; the kinds are added to `found`. A span of the visible text
    covers the original from its first character to its last, invisible ones among them."""
    at: list[int] | None = None  # where each visible character is in `text`, once needed
    out: list[str] = []
    last = 0
    for start, end, kinds in spans(shown):
        if len(shown) != len(text):
            if at is None:
                skip = {m.start() for m in _HIDDEN_RE.finditer(text)}
                at = [i for i in range(len(text)) if i not in skip]
            start, end = at[start], at[end - 1] + 1
        out += [text[last:start], mark(kinds[0])]
        last = end
        found += kinds
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# Each finds its own spans, in this order: a URL's password first (see `_PATTERNS`), and the
# base64 runs last, once what is plain in them went.
_SCANNERS: list[Callable[[str], Spans]] = [
    _url_spans,
    *(functools.partial(_pattern_spans, p) for p in _COMPILED),
    _encoded_spans,
]


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret replaced by `[redacted:<kind>]`, and the kinds found (in the
    order of `KINDS`)."""
    shown = visible(text)
    if not _MAYBE.search(shown):
        return text, []
    found: list[str] = []
    for spans in _SCANNERS:
        replaced = _replace(text, shown, spans, found)
        if replaced is not text:
            text, shown = replaced, visible(replaced)
    return text, sorted(set(found), key=KINDS.index)


class Secrets:
    """What a write does with the secrets in its text fields; one per write, collecting the
    kinds it redacted for the reply."""

    def __init__(self, mode: SecretsMode) -> None:
        self.mode = mode
        self.found: list[str] = []

    def _refuse(self, field: str, kinds: list[str]) -> InvalidRequest:
        return InvalidRequest(
            f"`{field}` holds what looks like a secret ({', '.join(kinds)}); this service"
            " refuses to store secrets (MEMBUS_SECRETS=block). Remove it, or put a reference"
            " to where the secret is kept, and send the request again."
        )

    def text(self, field: str, value: str) -> str:
        """`value` of `field` as it may be stored: redacted, or refused (`block`)."""
        if self.mode == "off" or not value:
            return value
        if self.mode == "block":
            kinds = find(value)
            if kinds:
                raise self._refuse(field, kinds)
            return value
        cleaned, kinds = redact(value)
        self.found += [k for k in kinds if k not in self.found]
        return cleaned

    def json(self, field: str, value: Any) -> Any:
        """A free JSON value (`metadata`, `preferences`) with every string in it, keys
        included, scanned as a text field; numbers and the shape stay as sent. Two keys
        redacted alike stay two (`#2` after the second)."""
        if self.mode == "off":
            return value
        if isinstance(value, str):
            return self.text(field, value)
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = self.text(field, key) if isinstance(key, str) else key
                n = 1
                while name != key and name in out:
                    n += 1
                    name = f"{self.text(field, key)}#{n}"
                out[name] = self.json(field, item)
            return out
        if isinstance(value, list):
            return [self.json(field, item) for item in value]
        return value

    def optional(self, field: str, value: str | None) -> str | None:
        return None if value is None else self.text(field, value)

    def texts(self, field: str, values: Iterable[str]) -> list[str]:
        return [self.text(field, v) for v in values]

    def tags(self, field: str, tags: Iterable[str]) -> list[str]:
        """Tags as they may be stored: a tag holding a secret becomes `redacted:<kind>` (a
        tag's characters hold no brackets), once however many there were."""
        out: list[str] = []
        for tag in tags:
            if self.mode != "off" and (kinds := find(tag)):
                if self.mode == "block":
                    raise self._refuse(field, kinds)
                self.found += [k for k in kinds if k not in self.found]
                tag = f"redacted:{kinds[0]}"
            if tag not in out:
                out.append(tag)
        return out

    def name(self, field: str, value: str) -> str:
        """A name that finds what it names (a workspace, a state) cannot be redacted: one
        holding a secret is refused whatever the mode but `off`."""
        if self.mode != "off" and (kinds := find(value)):
            raise InvalidRequest(
                f"`{field}` holds what looks like a secret ({', '.join(kinds)}); a name"
                " cannot be redacted, since it is how the item is found again. Choose a"
                " name without it and send the request again."
            )
        return value

    @property
    def redacted(self) -> list[str] | None:
        """The kinds redacted, for the reply; None when nothing was."""
        return self.found or None
