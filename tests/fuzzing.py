"""Fuzz inputs for `handlers.dispatch.dispatch()`, shared by tests/integration/test_fuzz.py and
bench/fuzz.py.

Every request body comes from the operation's contract: `msgspec.json.schema()` of its
Struct in `contracts.operations.TABLE`, turned into a Hypothesis strategy here
(`$ref`/`$defs`, `anyOf`, `enum`, `type`, `pattern`, lengths, bounds and `required` are
read; no hypothesis-jsonschema: the contracts' patterns are Python regexes, `\\Z` and all).
A generated input is one of three kinds:

- "valid": a body the schema accepts, with what the schema cannot express (an `add` needs
  `content` or `title`, a `search` a `query` or an `embedding`, ...) usually filled in after
  the operation's example, and ids, workspace and state names usually taken from a `Pool`
  of ones that exist. Its free
  text fields (queries, content, tags, people, names) mix ordinary words with hostile strings:
  RediSearch syntax, a lone `_`, NUL and control characters, lone surrogates, direction and
  zero-width marks, emoji, very long tokens, and strings at and just past their limits.
- "mutated": a valid body with one to three mutations: a field of the wrong type, an unknown
  field, a missing or null required field, huge or negative numbers, NaN/Infinity literals,
  deep nesting, a string just past its limit, a list just past its length, a duplicated key.
- "raw": bytes that are barely JSON or not JSON: random bytes, invalid UTF-8 (inside strings
  too, and lone surrogates encoded as bytes), truncated bodies, unterminated runs of escaped
  quotes, towers of brackets, odd top-level values, bodies past the size limit.

`run_input()` sends one input through `dispatch()` and checks its reply (`check_reply`).
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import msgspec
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from contracts import limits
from contracts.messages import ERROR_CODES, SESSION_ID_PATTERN, TAG_PATTERN, ImportedMemory
from contracts.operations import BY_NAME, DURABLE_OPERATIONS, OPERATIONS, REQUEST_TYPES
from contracts.subjects import (
    DURABLE_PREFIX,
    PREFIX,
    REDUCED_TRUST,
    WORKFLOW_ID_PATTERN,
    is_valid_namespace,
    request_subject,
)
from contracts.types import DEFAULT_TYPES, STATE_TYPE
from handlers.dispatch import dispatch, nesting_depth
from handlers.ops import Deps
from handlers.ops.deps import DurableWrite

OPS: tuple[str, ...] = OPERATIONS
TYPED_CODES = frozenset(code for code in ERROR_CODES if code != "internal")
KINDS = ("valid", "mutated", "raw")

# Ordinary words: the seeded memories use them, so searches and recalls find something.
WORDS = (
    "python",
    "redis",
    "deploy",
    "budget",
    "alice",
    "bob",
    "release",
    "vector",
    "search",
    "the",
    "and",
    "not",
)

# Pieces of hostile text; `hostile_text` strings them together.
HOSTILE = (
    # RediSearch query syntax, alone and in small queries.
    "@",
    "|",
    "-",
    "~",
    "*",
    "%",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ":",
    ";",
    '"',
    "'",
    "\\",
    "$",
    "_",
    "__",
    "_*",
    "*_",
    "=>",
    ",",
    ".",
    "/",
    "<",
    ">",
    "&",
    "^",
    "!",
    "#",
    "+",
    "=",
    "?",
    "`",
    "@tags:{x}",
    "@content:(a|b)",
    "-foo",
    "~bar",
    "%%fuzzy%%",
    "a|b",
    "(a)|(b)",
    "$param",
    "[KNN 10 @embedding $vec]",
    "[1 2]",
    "[-inf +inf]",
    "@created_at:[0 +inf]",
    "ismissing(@x)",
    "AND",
    "OR",
    "NOT",
    "INF",
    "-inf",
    "*:*",
    "\\*",
    "\\_",
    "\\\\",
    # Redis keys, RESP and Lua.
    "mem:*",
    "{hashtag}",
    "\r\n*3\r\n$3\r\nSET\r\n",
    "]]..[[",
    # Control characters, NUL, lone surrogates.
    "\x00",
    "a\x00b",
    "\x01",
    "\x08",
    "\x1b[31m",
    "\x1f",
    "\x7f",
    "\x85",
    "\x9f",
    "\t",
    "\n",
    "\r",
    " ",
    "\u00a0",
    "\u3000",
    "\ud800",
    "\udfff",
    "\udc00\ud800",
    # Direction, zero-width and other invisible format characters.
    "\u200b",
    "\u200c",
    "\u200d",
    "\u200e",
    "\u200f",
    "\u2028",
    "\u2029",
    "\u202a",
    "\u202e",
    "\u2060",
    "\u2066",
    "\ufeff",
    "\ufffd",
    "\ufffe",
    "\uffff",
    # Letters that change length or meaning when case-folded, emoji, other scripts.
    "İ",
    "ı",
    "ß",
    "ẞ",
    "ﬃ",
    "K",
    "Σ",
    "é",
    "é",
    "中文",
    "עברית",
    "العربية",
    "😀",
    "👨‍👩‍👧",
    "🏳️‍🌈",
    "\U0010ffff",
    "\U000e0041",
    # Values of other types spelled as text.
    "",
    "null",
    "true",
    "NaN",
    "Infinity",
    "-0",
    "1e999",
    "0x10",
    "{}",
    "[]",
    "%s%s%s",
    "${jndi:ldap://x}",
    "../../etc/passwd",
    "C:\\Windows",
    "<script>alert(1)</script>",
    "' OR 1=1 --",
)

# Trust tokens of a subject (`mem.<ns>.<op>.<trust>`) that are not levels.
ODD_TRUST = ("full", "FULL", "admin", "", "*", ">", "inner ", "Inner", "public\x00")

# Strings that ids, names and tokens are likely to trip on.
ODD_TOKENS = (
    "_",
    "-",
    "__",
    ".",
    ":",
    "0",
    "a",
    "A",
    "_-",
    "-_",
    "a_b",
    "a-b",
    "a:b",
    "a.b",
    "_a",
    "a_",
    "x" * 64,
    "x" * 65,
)

# Characters of 1 to 4 UTF-8 bytes, for strings at a limit measured in characters or bytes.
WIDE_CHARS = ("a", "é", "中", "😀", " ", "\\", '"', "\x00", "_")

# Per field: a limit in UTF-8 bytes that the schema (which counts characters) cannot show.
BYTE_LIMITS = {
    "content": limits.MAX_CONTENT_BYTES,
    "narrative": limits.MAX_NARRATIVE_BYTES,
    "goal": limits.MAX_CONTEXT_TEXT_BYTES,
    "memory": limits.MAX_CONTEXT_TEXT_BYTES,
    "constraints": limits.MAX_CONTEXT_TEXT_BYTES,
    "output": limits.CAPTURE_OUTPUT_BYTES,
    "conversation_context": limits.MAX_CONTENT_BYTES,
}

# Free JSON objects of the requests (`metadata`, `preferences`, `args`) and their limits.
FREE_OBJECTS = ("metadata", "preferences", "args")

# Numbers that break bounds, integer sizes and float parsing.
ODD_NUMBERS: tuple[Any, ...] = (
    -1,
    0,
    1,
    -0.0,
    0.5,
    1.0000000000000002,
    -1e-300,
    5e-324,
    2**31,
    2**31 - 1,
    2**32,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64,
    10**30,
    -(10**30),
    10**400,
    1e308,
    -1e308,
    1.7976931348623157e308,
    limits.MAX_TTL_S,
    limits.MAX_TTL_S + 1,
    limits.MAX_TURN,
    limits.MAX_TURN + 1,
    limits.MAX_LIST_OFFSET + 1,
    True,
    False,
    "1",
    "",
    None,
)

# JSON number spellings that msgspec must refuse or read safely; placed with `Raw`.
ODD_NUMBER_LITERALS = (
    "NaN",
    "-NaN",
    "Infinity",
    "-Infinity",
    "inf",
    "1e999",
    "-1e999",
    "1E400",
    "1e-400",
    "0e0",
    "-0",
    "00",
    "01",
    "1.",
    ".5",
    "+1",
    "0x10",
    "1_000",
    "1" + "0" * 400,
    "-" + "9" * 400,
    "1e" + "9" * 30,
    "0." + "0" * 400 + "1",
)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Pool:
    """Things that exist in the namespace under test, so that inputs reach past the
    not-found checks: memory ids, workspace names, and state names (of `workspaces[0]`)."""

    ids: tuple[str, ...] = ()
    workspaces: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    workflow_ids: tuple[str, ...] = ("wf_fuzz", "wf-2")
    session_ids: tuple[str, ...] = ("fuzz-session", "s:1.a")
    people: tuple[str, ...] = ("Alice", "Bob Smith")
    dimension: int = 384


@dataclass
class FuzzInput:
    op: str
    body: bytes
    kind: str
    # Set for the few inputs sent on a subject whose namespace is not valid.
    namespace: str | None = None
    # The subject's trust token (`mem.<ns>.<op>.<trust>`); None: none (full trust).
    trust: str | None = None
    # Sent as a durable write (`memq.` subject, with a `DurableWrite`), as the JetStream
    # consumer does.
    durable: bool = False

    def subject(self, ns: str) -> str:
        prefix = DURABLE_PREFIX if self.durable else PREFIX
        ns = self.namespace if self.namespace is not None else ns
        return f"{prefix}.{ns}.{self.op}" + ("" if self.trust is None else f".{self.trust}")

    def describe(self, head: int = 200) -> str:
        where = f" ns={self.namespace!r}" if self.namespace is not None else ""
        where += f" trust={self.trust!r}" if self.trust is not None else ""
        where += " durable" if self.durable else ""
        return f"{self.op} [{self.kind}{where}] {len(self.body)} bytes: {self.body[:head]!r}"


@dataclass
class Outcome:
    """What one input got: `code` is None on success."""

    input: FuzzInput
    code: str | None
    ms: float
    reply: bytes
    problem: str | None = None


@dataclass(frozen=True)
class Raw:
    """JSON text placed as is where this object sits (NaN, 1e999, ...)."""

    text: str


def encode(value: Any, ascii_only: bool = True, compact: bool = True) -> bytes:
    """JSON bytes of `value`, keeping lone surrogates (as `\\udXXX` escapes when
    `ascii_only`, else as their raw three bytes) and placing `Raw` texts verbatim."""
    raws: list[str] = []

    def swap(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(swap(value), ensure_ascii=ascii_only, separators=separators)
    for i, raw in enumerate(raws):
        marker = json.dumps(f"\x00RAW{i}\x00", ensure_ascii=ascii_only)
        text = text.replace(marker, raw, 1)
    return text.encode("utf-8", "surrogatepass")


# --------------------------------------------------------------------------- strings


def weighted(*choices: tuple[SearchStrategy[Any], int]) -> SearchStrategy[Any]:
    """One of the strategies, each about `weight` times as often as a weight of 1.
    (`st.one_of` drops repeated strategies, so repeating one there does not weigh it.)"""
    strategies = [strategy for strategy, _ in choices]
    picks = st.sampled_from([i for i, (_, weight) in enumerate(choices) for _ in range(weight)])

    @st.composite
    def pick(draw: st.DrawFn) -> Any:
        return draw(strategies[draw(picks)])

    return pick()


@cache
def near_limit(limit: int, byte_limit: int | None = None) -> SearchStrategy[str]:
    """Strings of one repeated character at and just past a limit (in characters, and in
    UTF-8 bytes for fields measured in bytes)."""
    sizes = [max(limit - 1, 0), limit, limit + 1]

    @st.composite
    def build(draw: st.DrawFn) -> str:
        char = draw(st.sampled_from(WIDE_CHARS))
        if byte_limit is not None and draw(st.booleans()):
            width = len(char.encode())
            n = draw(st.sampled_from([byte_limit // width, byte_limit // width + 1]))
        else:
            n = draw(st.sampled_from(sizes))
        return char * n

    return build()


@cache
def long_tokens() -> SearchStrategy[str]:
    """One very long word (no spaces), of ordinary or odd characters."""
    return st.builds(
        lambda c, n: c * n,
        st.sampled_from(["a", "x1", "_", "-", "@", "é", "😀", "\\", "*"]),
        st.sampled_from([100, 257, 1000, 4097, 20_000]),
    )


@cache
def hostile_text() -> SearchStrategy[str]:
    piece = st.one_of(
        st.sampled_from(HOSTILE),
        st.sampled_from(WORDS),
        st.text(max_size=8),
        st.characters(codec=None, categories=["Cc", "Cf", "Zs", "Zl", "Zp", "Co"]).map(str),
    )
    return st.one_of(
        st.sampled_from(HOSTILE),
        st.lists(piece, min_size=1, max_size=8).map("".join),
        st.lists(piece, min_size=1, max_size=6).map(" ".join),
        long_tokens(),
    )


@cache
def plain_text() -> SearchStrategy[str]:
    return st.one_of(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join),
        st.text(min_size=1, max_size=40),
    )


@cache
def any_text() -> SearchStrategy[str]:
    return weighted((plain_text(), 2), (hostile_text(), 1))


@cache
def regex(pattern: str) -> SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


@cache
def tokens(pattern: str, extra: tuple[str, ...] = ()) -> SearchStrategy[str]:
    """Ids and names: mostly the pattern's own (odd ones like a lone `_` too), and now and
    then odd tokens that break it, or hostile text."""
    fits = [t for t in ODD_TOKENS + extra if re.match(pattern, t)]
    breaks = [t for t in ODD_TOKENS + extra if not re.match(pattern, t)] or [""]
    return weighted(
        (regex(pattern), 3),
        (st.sampled_from(fits) if fits else regex(pattern), 4),
        (st.sampled_from(breaks), 1),
        (hostile_text(), 1),
    )


# --------------------------------------------------------------------------- JSON values

_keys = st.one_of(st.sampled_from(WORDS), st.sampled_from(HOSTILE), st.text(max_size=10))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(ODD_NUMBERS),
    any_text(),
)
json_values: SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=16,
)


def nested(depth: int, shape: str, leaf: Any = 1) -> Any:
    """A value `depth` levels deep (as `Raw` JSON text past 64 levels)."""
    if depth > 64:
        opens = {"list": "[", "dict": '{"k":', "mixed": '[{"k":'}[shape]
        closes = {"list": "]", "dict": "}", "mixed": "}]"}[shape]
        reps = depth if shape != "mixed" else depth // 2
        return Raw(opens * reps + json.dumps(leaf) + closes * reps)
    value = leaf
    for i in range(depth):
        as_list = shape == "list" or (shape == "mixed" and i % 2)
        value = [value] if as_list else {"k": value}
    return value


@cache
def deep_values() -> SearchStrategy[Any]:
    return st.builds(
        nested,
        st.sampled_from([7, 8, 9, 31, 32, 33, 64, 1000]),
        st.sampled_from(["list", "dict", "mixed"]),
    )


@cache
def free_objects(name: str) -> SearchStrategy[dict[str, Any]]:
    """A `metadata`, `preferences` or `args` object: small, deep, or near its byte limit."""
    limit = limits.MAX_METADATA_BYTES
    big = st.builds(
        lambda c, n: {"blob": c * n},
        st.sampled_from(["y", "é", "😀", "\\", '"']),
        st.sampled_from([limit // 2, limit - 12, limit - 11, limit - 10, limit, limit * 2]),
    )
    shallow = st.dictionaries(_keys, json_values, max_size=6)
    deep = deep_values().map(lambda v: {"d": v})
    files = st.fixed_dictionaries(
        {"path": any_text()},
        optional={"file_path": any_text(), "paths": st.lists(any_text(), max_size=40)},
    )
    extra = [files] if name == "args" else []
    return weighted((shallow, 4), (deep, 1), (big, 1), *[(e, 2) for e in extra])


@cache
def datetimes() -> SearchStrategy[str]:
    odd = st.sampled_from(
        [
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "1970-01-01T00:00:00+00:00",
            "2024-02-30T00:00:00Z",
            "2024-01-01T23:59:60Z",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+25:00",
            "2024-01-01T00:00:00-23:59",
            "now",
            "",
            "1e10",
        ]
    )
    real = st.datetimes(timezones=st.timezones() | st.none()).map(lambda d: d.isoformat())
    return weighted((real, 3), (odd, 1))


# --------------------------------------------------------------------------- schemas


def field_override(
    op: str, name: str, pool: Pool, owner: dict[str, Any]
) -> SearchStrategy[Any] | None:
    """A string strategy for a field whose values matter to the handler (ids that exist,
    known types, names), used for the string branch of its schema. None: the schema's.
    `owner`: the schema of the object the field is in."""
    ids = st.sampled_from(pool.ids) if pool.ids else st.nothing()
    workspaces = st.sampled_from(pool.workspaces) if pool.workspaces else st.nothing()
    states = st.sampled_from(pool.states) if pool.states else st.nothing()
    name_token = weighted(
        (regex(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,20}[A-Za-z0-9]"), 2),
        (tokens(r"[^\x00-\x1f]{1,16}"), 1),
    )
    types = st.sampled_from(list(DEFAULT_TYPES))
    odd_types = st.sampled_from(["bogus", "_", "State", "knowledge ", ""])
    if owner.get("title") == ImportedMemory.__name__ and name in ("id", "superseded_by"):
        # An export file may carry anything: new ids, existing ones, and hostile text.
        return weighted((tokens(r"[0-9A-Z]{26}"), 4), (ids, 1), (any_text(), 1))
    if name in ("id", "anchor", "ids", "supersedes"):
        return weighted((ids, 8), (tokens(r"[0-9A-Z]{26}"), 1))
    if name in ("type", "types"):
        return weighted((types, 12), (odd_types, 1), (regex(r"[a-z0-9_]{1,64}"), 1))
    if name == "workflow_id":
        return weighted((st.sampled_from(pool.workflow_ids), 2), (tokens(WORKFLOW_ID_PATTERN), 1))
    if name == "session_id":
        return weighted((st.sampled_from(pool.session_ids), 2), (tokens(SESSION_ID_PATTERN), 1))
    if name == "tags":
        return weighted(
            (st.sampled_from(["python", "infra", "a:b", "v1.2", "x-y", "A", "İ", "K", "ß"]), 2),
            (tokens(TAG_PATTERN), 2),
        )
    if name in ("people", "related_people"):
        return weighted((st.sampled_from(pool.people), 1), (any_text(), 1))
    if name == "workspace":
        return weighted((workspaces, 4), (name_token, 1))
    if name == "name":
        # Beside a `workspace`, a name is a state's (of that workspace); else a workspace's.
        # Mostly one that exists, except for an operation that creates it.
        known = states if "workspace" in owner.get("properties", {}) else workspaces
        if op.startswith("create_"):
            return weighted((known, 1), (name_token, 3))
        return weighted((known, 4), (name_token, 1))
    if name in ("since", "until", "created_at", "updated_at", "expires_at", "last_accessed_at"):
        return datetimes()
    return None


def _string(
    op: str, name: str, schema: dict[str, Any], pool: Pool, owner: dict[str, Any]
) -> SearchStrategy[str]:
    override = field_override(op, name, pool, owner)
    if override is not None:
        return override
    if "pattern" in schema:
        return tokens(schema["pattern"])
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    short = any_text().filter(lambda s: len(s) >= lo) if lo else any_text()
    if hi is not None:
        short = short.filter(lambda s: len(s) <= hi)
    if hi is None and name not in BYTE_LIMITS:
        return short
    return weighted((short, 6), (near_limit(hi or BYTE_LIMITS[name], BYTE_LIMITS.get(name)), 1))


# Counters near the edges of what clients and Redis can count.
EDGE_COUNTS = (2**63 - 1, 2**63, 2**64, 2**53, 2**53 - 1, 2**31)


def _number(schema: dict[str, Any], integer: bool) -> SearchStrategy[Any]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if integer:
        base = st.integers(min_value=lo, max_value=hi)
        edges = [n for n in EDGE_COUNTS if (lo is None or n >= lo) and (hi is None or n <= hi)]
        return weighted((base, 4), (st.sampled_from(edges), 1)) if edges else base
    xlo = schema.get("exclusiveMinimum")
    return st.floats(
        min_value=lo if xlo is None else xlo,
        max_value=hi,
        exclude_min=xlo is not None,
        allow_nan=False,
        allow_infinity=False,
    )


def from_schema(
    schema: dict[str, Any],
    defs: dict[str, Any],
    op: str,
    pool: Pool,
    name: str = "",
    owner: dict[str, Any] | None = None,
) -> SearchStrategy[Any]:
    """A strategy for values of a JSON schema (the subset msgspec writes); `name` is the
    field the value is for, in the object of schema `owner`."""
    owner = owner or {}
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, op, pool, name, owner)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, defs, op, pool, name, owner) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind is None:  # `Any`
        return json_values
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return _number(schema, integer=True)
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "string":
        return _string(op, name, schema, pool, owner)
    if kind == "array":
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", 8)
        if name == "embedding":
            vec = st.lists(
                st.floats(-1.0, 1.0, allow_nan=False),
                min_size=pool.dimension,
                max_size=pool.dimension,
            )
            odd = st.lists(
                st.floats(allow_nan=False, allow_infinity=False), min_size=lo, max_size=8
            )
            zero = st.just([0.0] * pool.dimension)
            return weighted((vec, 4), (zero, 1), (odd, 1))
        items = from_schema(schema.get("items", {}), defs, op, pool, name, owner)
        return st.lists(items, min_size=lo, max_size=min(hi, max(lo, 6)))
    if kind == "object":
        props = schema.get("properties")
        if props is None:
            return free_objects(name)
        required = set(schema.get("required", ()))
        strategies = {k: from_schema(v, defs, op, pool, k, schema) for k, v in props.items()}
        return st.fixed_dictionaries(
            {k: s for k, s in strategies.items() if k in required},
            optional={k: s for k, s in strategies.items() if k not in required},
        )
    raise ValueError(f"no strategy for schema {schema!r}")


def op_schema(op: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request object's schema of an operation, and the definitions it refers to."""
    full = msgspec.json.schema(REQUEST_TYPES[op])
    defs = full.get("$defs", {})
    top = defs[full["$ref"].rsplit("/", 1)[-1]] if "$ref" in full else full
    return top, defs


# --------------------------------------------------------------------------- bodies


def _refused(op: str, body: dict[str, Any]) -> bool:
    """Whether the operation's request refuses `body` (the Struct's types and checks)."""
    try:
        msgspec.json.decode(encode(body), type=REQUEST_TYPES[op])
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return True
    return False


def _given(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its null branch: a value that is there."""
    branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
    return {**schema, "anyOf": branches} if branches else schema


def _fixups(op: str, pool: Pool) -> Callable[[st.DrawFn, dict[str, Any]], None]:
    """Fill in what the schema cannot say is needed, so most valid bodies get past the
    Struct's own checks to the operation. The operation's example (contracts.operations)
    says what a body needs: a body its request refuses takes, one by one, the example's
    fields that it lacks (with values drawn from their schema) until it is accepted; if it
    is still refused, a field the example does without is dropped when that alone makes it
    accepted (fields that exclude each other: `message` and `messages`). A `type` of state
    becomes another, unless the example's is a state: only create_state writes one."""
    example = BY_NAME[op].example
    top, defs = op_schema(op)
    fills = {
        name: from_schema(_given(top["properties"][name]), defs, op, pool, name, top)
        for name in example
    }
    other_types = st.sampled_from(["knowledge", "decision", "fact"])

    def fix(draw: st.DrawFn, body: dict[str, Any]) -> None:
        if body.get("type") == STATE_TYPE and example.get("type") != STATE_TYPE:
            body["type"] = draw(other_types)
        _tune_memories(draw, body)
        for name in example:
            if not _refused(op, body):
                return
            if body.get(name) is None:
                body[name] = draw(fills[name])
        if not _refused(op, body):
            return
        for name in [n for n in body if n not in example]:
            trial = {k: v for k, v in body.items() if k != name}
            if not _refused(op, trial):
                del body[name]
                return

    return fix


def _tune_memories(draw: st.DrawFn, body: dict[str, Any]) -> None:
    """An import's memories (export lines), so that most of them reach past the checks of
    their own: mostly without a vector (it would need the namespace's dimension), a readable
    creation time half the time, and counters at the edges now and then."""
    for memory in body.get("memories") or []:
        if not isinstance(memory, dict):
            continue
        if draw(st.integers(0, 3)):
            memory.pop("embedding", None)
        if draw(st.booleans()):  # a readable time, so the rest is what is tried
            memory["created_at"] = draw(st.datetimes()).isoformat() + "Z"
        for counter in ("access_count", "mention_count"):
            if not draw(st.integers(0, 2)):
                memory[counter] = draw(st.sampled_from(EDGE_COUNTS))


def _tame(memory: dict[str, Any], new_id: str) -> None:
    """Keep of a drawn import memory only the fields an import accepts each on its own (the
    contract, then the checks an add makes), over a valid id, type, content and time: what
    is left is accepted, drawn values and all."""
    from handlers.errors import HandlerError
    from handlers.ops.checks import check_content, check_metadata, check_narrative, check_no_nul

    def accepted(candidate: dict[str, Any]) -> bool:
        try:
            m = msgspec.json.decode(msgspec.json.encode(candidate), type=ImportedMemory)
            check_narrative(m.narrative)
            check_no_nul(title=m.title, narrative=m.narrative, facts=m.facts)
            check_content(m.content)
            check_metadata(m.metadata)
        except (msgspec.ValidationError, msgspec.EncodeError, UnicodeEncodeError, HandlerError):
            return False
        return True

    base = {"id": new_id, "type": "knowledge", "content": "fuzz memory text"}
    base["created_at"] = "2024-01-01T00:00:00Z"
    if accepted({**base, "created_at": memory.get("created_at")}):
        base["created_at"] = memory["created_at"]
    fields = {k: v for k, v in memory.items() if k not in base or k == "content"}
    memory.clear()
    memory.update(base)
    for name, value in fields.items():
        if name == "embedding":
            continue  # a vector would need the namespace's dimension
        if name == "metadata":
            try:
                # As sent: a drawn value may hold raw JSON text (`Raw`), which
                # msgspec would encode as a string.
                deep = nesting_depth(encode(value)) > 8
            except UnicodeEncodeError:
                continue  # a lone surrogate: no JSON text can carry it
            if deep:
                continue  # (drawn values may be JSON text of their own: measured as sent)
        if accepted({**base, name: value}):
            # A copy: a drawn value can be shared with later draws, which may nest it deeper.
            memory[name] = copy.deepcopy(value)


def tame_import_bodies(pool: Pool) -> SearchStrategy[dict[str, Any]]:
    """Import bodies drawn from the schema whose memories (one or two) keep only what the
    contract and the handlers accept: every one of them must be imported."""

    schema_bodies = valid_bodies("import", pool)

    @st.composite
    def tamed(draw: st.DrawFn) -> dict[str, Any]:
        body = draw(schema_bodies)
        drawn = [m for m in body.get("memories") or [] if isinstance(m, dict)][:2] or [{}]
        for i, memory in enumerate(drawn):
            _tame(memory, draw(st.from_regex(r"[0-9A-Za-z_-]{1,60}", fullmatch=True)) + str(i))
        return {"memories": drawn}

    return tamed()


@lru_cache(maxsize=256)
def valid_bodies(op: str, pool: Pool) -> SearchStrategy[dict[str, Any]]:
    top, defs = op_schema(op)
    fix = _fixups(op, pool)
    schema_bodies = from_schema(top, defs, op, pool)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        body = dict(draw(schema_bodies))
        if draw(st.integers(0, 9)) < 8:
            fix(draw, body)
        return body

    return build()


def _mutate(draw: st.DrawFn, op: str, body: dict[str, Any], top: dict[str, Any]) -> None:
    props: dict[str, Any] = top.get("properties", {})
    names = sorted(props)
    kind = draw(
        st.sampled_from(
            [
                "wrong_type",
                "unknown_field",
                "drop",
                "null",
                "odd_number",
                "number_literal",
                "deep",
                "too_long",
                "too_many",
                "context",
            ]
        )
    )
    target = draw(st.sampled_from(names))
    if kind == "wrong_type":
        body[target] = draw(json_values)
    elif kind == "unknown_field":
        key = draw(
            st.one_of(
                st.sampled_from(["tag", "contents", "Type", "type ", "ids ", "__proto__", "_"]),
                _keys,
            )
        )
        if key not in props:
            body[key] = draw(json_values)
    elif kind == "drop":
        body.pop(target, None)
    elif kind == "null":
        body[target] = None
    elif kind == "odd_number":
        body[target] = draw(st.sampled_from(ODD_NUMBERS))
    elif kind == "number_literal":
        literal = Raw(draw(st.sampled_from(ODD_NUMBER_LITERALS)))
        if isinstance(body.get(target), list) and body[target]:
            body[target] = [*body[target][:-1], literal]
        else:
            body[target] = literal
    elif kind == "deep":
        free = [n for n in names if n in FREE_OBJECTS] or [target]
        body[draw(st.sampled_from(free))] = draw(deep_values())
    elif kind == "too_long":
        schema = props[target]
        his = [s.get("maxLength") for s in schema.get("anyOf", [schema]) if "maxLength" in s]
        limit = his[0] if his else BYTE_LIMITS.get(target, limits.MAX_QUERY_CHARS)
        body[target] = draw(near_limit(limit, BYTE_LIMITS.get(target)))
    elif kind == "too_many":
        schema = props[target]
        arrays = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "array"]
        if arrays:
            n = arrays[0].get("maxItems", 32)
            item = draw(st.sampled_from(["a", "x", "python", "0" * 26, "k"]))
            size = draw(st.sampled_from([n, n + 1]))
            distinct = draw(st.booleans())
            body[target] = [f"{item}{i}" if distinct else item for i in range(size)]
    elif kind == "context":
        body["context"] = draw(
            st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "session_id": any_text(),
                        "goal": st.one_of(any_text(), near_limit(4096, 4096)),
                        "memory": st.one_of(any_text(), deep_values()),
                        "constraints": any_text(),
                        "extra": json_values,
                    },
                ),
            )
        )


def _duplicate_key(body: bytes, key: str, value: Any) -> bytes:
    """`body` (a JSON object) with `key` repeated at its end."""
    if not body.endswith(b"}"):
        return body
    extra = encode({key: value})[1:-1]
    sep = b"," if body != b"{}" else b""
    return body[:-1] + sep + extra + b"}"


@lru_cache(maxsize=256)
def mutated_bodies(op: str, pool: Pool) -> SearchStrategy[bytes]:
    top, _ = op_schema(op)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        body = draw(valid_bodies(op, pool))
        for _ in range(draw(st.integers(1, 3))):
            _mutate(draw, op, body, top)
        data = encode(body, ascii_only=draw(st.booleans()), compact=draw(st.booleans()))
        if draw(st.integers(0, 9)) == 0:
            key = draw(st.sampled_from(sorted(top.get("properties", {}))))
            data = _duplicate_key(data, key, draw(json_values))
        return data

    return build()


BAD_UTF8 = (
    b"\xff",
    b"\xfe\xff",
    b"\xc3",
    b"\xc3(",
    b"\xe2\x82",
    b"\xe2\x28\xa1",
    b"\xf0\x28\x8c\xbc",
    b"\xf4\x90\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",  # a lone high surrogate, encoded as bytes (CESU-8)
    b"\xed\xbf\xbf",
    b"\xed\xa0\xbd\xed\xb8\x80",  # a surrogate pair, encoded as bytes
    b"\x80",
    b"\xbf\xbf",
    b"caf\xe9",
)

ODD_DOCUMENTS = (
    b"",
    b" ",
    b"\n\t\r ",
    b"null",
    b"true",
    b"0",
    b"-",
    b'"x"',
    b"[]",
    b"[{}]",
    b"{}",
    b"{}{}",
    b"{} x",
    b"{,}",
    b'{"a"}',
    b'{"a":}',
    b"{'a':1}",
    b"{a:1}",
    b'{"a":1,}',
    b"\xef\xbb\xbf{}",
    b"\x00{}",
    b"{}\x00",
    b"\x00",
    b'{"\\u0000":1}',
    b'{"":1}',
    b"{" * 32 + b"}" * 32,
    b"[" * 33 + b"]" * 33,
)

ESCAPE_RUNS = (
    b'\\"',  # escaped quotes
    b"\\\\",  # escaped backslashes
    b'\\\\\\"',
    b'\\"[',
    b'"',
    b"\\u0022",
    b"[",
    b"{",
    b'{"a":',
    b'"a":[',
)


@st.composite
def raw_bodies(draw: st.DrawFn, op: str, pool: Pool) -> bytes:
    shape = draw(
        st.sampled_from(
            [
                "binary",
                "bad_utf8_in_string",
                "bad_utf8_anywhere",
                "truncated",
                "escape_run",
                "brackets",
                "odd_document",
                "oversized",
                "escapes",
                "spliced",
            ]
        )
    )
    if shape == "binary":
        return draw(st.binary(max_size=300))
    if shape == "odd_document":
        return draw(st.sampled_from(ODD_DOCUMENTS))
    if shape in ("bad_utf8_in_string", "bad_utf8_anywhere", "truncated", "spliced"):
        data = encode(draw(valid_bodies(op, pool)))
        bad = draw(st.sampled_from(BAD_UTF8))
        if shape == "bad_utf8_in_string":
            quotes = [m.end() for m in re.finditer(rb'":"', data)] or [len(data) // 2]
            at = draw(st.sampled_from(quotes))
            return data[:at] + bad + data[at:]
        at = draw(st.integers(0, len(data)))
        if shape == "bad_utf8_anywhere":
            return data[:at] + bad + data[at:]
        if shape == "truncated":
            return data[:at]
        other = encode(draw(json_values))
        return data[:at] + other + data[at:]
    if shape == "escape_run":
        unit = draw(st.sampled_from(ESCAPE_RUNS))
        size = draw(st.sampled_from([10, 100, 1000, 10_000, 40_000, 80_000]))
        count = max(1, min(size, (limits.MAX_BODY_BYTES - 64) // len(unit)))
        head = draw(st.sampled_from([b'{"a":"', b'{"content":"', b"[" * 33 + b'"', b""]))
        tail = draw(st.sampled_from([b"", b"[" * 40, b'"}', b"]" * 40]))
        return head + unit * count + tail
    if shape == "brackets":
        unit = draw(st.sampled_from([b"[", b"{", b"[{", b'{"a":[', b'["[', b"]", b"}"]))
        count = draw(st.sampled_from([31, 32, 33, 100, 5000, 80_000]))
        count = min(count, limits.MAX_BODY_BYTES // len(unit))
        return unit * count
    if shape == "oversized":
        cap = limits.MAX_BODY_BYTES
        body = draw(valid_bodies(op, pool))
        # Padded inside `metadata` where the request takes one (a body of fields, not blanks).
        padded = "metadata" in op_schema(op)[0].get("properties", {})
        core = encode({**body, "metadata": {"pad": ""}} if padded else body)
        size = draw(st.sampled_from([cap, cap + 1, cap * 2]))
        pad = max(size - len(core), 0)
        if padded:
            return core.replace(b'"pad":""', b'"pad":"' + b"x" * max(pad, 0) + b'"', 1)[:size]
        return core + b" " * pad
    # shape == "escapes": JSON escapes of odd code points in a field the op reads.
    escape = draw(
        st.sampled_from(
            [
                b"\\ud800",
                b"\\udfff",
                b"\\udc00\\ud800",
                b"\\ud83d\\ude00",
                b"\\u0000",
                b"\\u001f",
                b"\\u202e",
                b"\\uffff",
                b"\\uZZZZ",
                b"\\u12",
                b"\\x41",
                b"\\'",
                b"\\",
            ]
        )
    )
    top, _ = op_schema(op)
    strings = [
        k
        for k, v in top.get("properties", {}).items()
        if any(s.get("type") in ("string", "array") for s in v.get("anyOf", [v]))
    ]
    key = draw(st.sampled_from(strings or ["x"]))
    body = draw(valid_bodies(op, pool))
    was = body.pop(key, None)
    value = b'["a' + escape + b'"]' if isinstance(was, list) else b'"a' + escape + b'b"'
    data = encode(body)
    return data[:-1] + (b"," if body else b"") + encode(key) + b":" + value + b"}"


@cache
def bad_namespaces() -> SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["", "a.b", "*", ">", "a b", "x" * 65, "ns\x00", "é", "_\n"]),
        hostile_text(),
    ).filter(lambda ns: not is_valid_namespace(ns))


@lru_cache(maxsize=64)
def inputs(pool: Pool, ops: tuple[str, ...] = OPS) -> SearchStrategy[FuzzInput]:
    """Fuzz inputs for `ops`: about 40% valid, 30% mutated, 30% raw (before Hypothesis drops
    examples too large for its buffer). Of all of them, 2% are sent on a subject with an
    invalid namespace, 25% at a reduced trust level and 5% with an odd trust token, and 10%
    of the durable operations' as durable writes."""

    @st.composite
    def build(draw: st.DrawFn) -> FuzzInput:
        # The mix is rolled on a Random (seeded by the example) so that Hypothesis's
        # mutations of earlier examples do not skew it.
        rnd = draw(st.randoms(use_true_random=True))
        op = ops[rnd.randrange(len(ops))]
        roll = rnd.randrange(100)
        if roll < 40:
            kind = "valid"
            body = encode(
                draw(valid_bodies(op, pool)),
                ascii_only=draw(st.booleans()),
                compact=draw(st.booleans()),
            )
        elif roll < 70:
            kind, body = "mutated", draw(mutated_bodies(op, pool))
        else:
            kind, body = "raw", draw(raw_bodies(op, pool))
        namespace = draw(bad_namespaces()) if rnd.randrange(50) == 0 else None
        trust_roll = rnd.randrange(100)
        trust = None
        if trust_roll >= 75:
            trust = REDUCED_TRUST[trust_roll % len(REDUCED_TRUST)]
        elif trust_roll >= 70:
            trust = ODD_TRUST[trust_roll % len(ODD_TRUST)]
        durable = op in DURABLE_OPERATIONS and rnd.randrange(10) == 0
        return FuzzInput(op, body, kind, namespace=namespace, trust=trust, durable=durable)

    return build()


# --------------------------------------------------------------------------- running


def check_reply(reply: bytes, error: object) -> str | None:
    """The problem with a reply of `dispatch()`, or None when it is well-formed: a JSON
    object with a boolean `success`; on an error, a typed code (never `internal`) and a
    non-empty message, matching the HandlerError returned beside it."""
    try:
        decoded = msgspec.json.decode(reply)
    except msgspec.DecodeError as exc:
        return f"reply is not JSON: {exc}"
    if not isinstance(decoded, dict):
        return f"reply is not a JSON object: {type(decoded).__name__}"
    success = decoded.get("success")
    if not isinstance(success, bool):
        return f"reply has no boolean `success`: {success!r}"
    if success:
        return None if error is None else f"success reply with an error: {error!r}"
    code, message = decoded.get("code"), decoded.get("error")
    if code == "internal":
        return f"internal: {message}"
    if code not in TYPED_CODES:
        return f"unknown error code {code!r}"
    if not isinstance(message, str) or not message.strip():
        return f"error reply without a message: {message!r}"
    if error is None or getattr(error, "code", None) != code:
        return f"error reply {code!r} but dispatch returned {error!r}"
    return None


async def run_input(item: FuzzInput, ns: str, deps: Deps) -> Outcome:
    """Send one input through `dispatch()`, time it and check its reply. An exception out of
    `dispatch()` itself is a problem too (it must always reply)."""
    write = DurableWrite(uuid.uuid4().hex[:16], int(time.time() * 1000)) if item.durable else None
    started = time.perf_counter()
    try:
        reply, error = await dispatch(item.op, item.subject(ns), item.body, deps, write)
    except Exception as exc:
        ms = (time.perf_counter() - started) * 1000
        return Outcome(item, "crash", ms, b"", f"dispatch raised {exc!r}")
    ms = (time.perf_counter() - started) * 1000
    problem = check_reply(reply, error)
    code = None if error is None else getattr(error, "code", "internal")
    return Outcome(item, code, ms, reply, problem)


# --------------------------------------------------------------------------- seeding


async def seed_pool(ns: str, deps: Deps) -> Pool:
    """Memories, workspaces and states in `ns` for the inputs to find (by the same path the
    inputs take), and the `Pool` that names them."""

    async def call(op: str, body: dict[str, Any]) -> dict[str, Any]:
        reply, error = await dispatch(op, request_subject(ns, op), encode(body), deps)
        decoded: dict[str, Any] = msgspec.json.decode(reply)
        assert error is None, f"seeding {op} {body!r} failed: {decoded}"
        return decoded

    ids: list[str] = []
    adds: list[dict[str, Any]] = [
        {"type": "knowledge", "content": "python and redis deploy notes", "tags": ["python"]},
        {"type": "user_pref", "content": "alice likes the vector search", "importance": 0.9},
        {
            "type": "decision",
            "content": "release the budget plan",
            "workflow_id": "wf_fuzz",
            "related_people": ["Alice", "Bob Smith"],
        },
        {
            "type": "observation",
            "title": "Bob ran the deploy",
            "facts": ["it failed", "redis was down"],
            "narrative": "the release and the budget",
            "workflow_id": "wf-2",
            "related_files": ["src/app.py"],
            "related_people": ["Bob Smith"],
        },
        {"type": "identity", "content": "I am the fuzz agent", "agent_id": "fuzzer"},
        {"type": "context", "content": "not the budget", "workflow_id": "wf_fuzz", "ttl_s": 60},
        {"type": "fact", "content": "redis 7 supports vector search", "metadata": {"k": [1]}},
        {"type": "todo", "content": "write the fuzz suite", "workflow_id": "wf_fuzz"},
    ]
    # Memories that reduced trust levels see (stores shared and social).
    for store in ("shared", "social"):
        adds.append(
            {
                "type": "knowledge",
                "content": f"python budget in the {store} store",
                "store": store,
                "related_people": ["Alice"],
            }
        )
    for body in adds:
        ids.append((await call("add", body))["id"])
    replaced = await call(
        "add", {"type": "fact", "content": "redis 8 is out", "supersedes": [ids[-2]]}
    )
    ids.append(replaced["id"])
    await call("update", {"id": ids[0], "tags": ["python", "infra"], "content": "python redis"})
    await call("history", {"id": ids[0]})
    workspaces = ["fuzz space", "Ünïcode ws 😀"]
    for name in workspaces:
        await call(
            "create_workspace",
            {
                "name": name,
                "description": "a workspace for the fuzzer",
                "root_folder": "/tmp/fuzz",
                "purpose": "fuzzing",
                "workflows": ["run it"],
                "key_files": ["README.md"],
            },
        )
    states = ["s1", "state two"]
    for state in states:
        await call(
            "create_state",
            {
                "workspace": workspaces[0],
                "name": state,
                "conversation_context": "we were fuzzing",
                "active_task": "fuzz",
                "active_files": ["tests/fuzzing.py"],
                "next_steps": ["read the report"],
                "tags": ["fuzz"],
            },
        )
    loaded = await call("load_state", {"workspace": workspaces[0], "name": states[0]})
    ids.append(loaded["data"]["id"])
    await call(
        "add",
        {"type": "knowledge", "content": "in the workspace", "workspace": workspaces[0]},
    )
    await call("recall", {"message": "python redis", "session_id": "fuzz-session"})
    return Pool(
        ids=tuple(ids),
        workspaces=tuple(workspaces),
        states=tuple(states),
        dimension=deps.embedder.dimension,
    )


def draw(strategy: SearchStrategy[Any], count: int, seed: int) -> list[Any]:
    """`count` values of `strategy` outside a test, reproducibly for a `seed`: a `@given`
    function run once with `max_examples=count`, generation only (no shrinking, no database)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    drawn: list[Any] = []

    @with_seed(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn
