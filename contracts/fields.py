"""The field types, patterns and text helpers that the messages of the wire protocol
share (contracts.requests, contracts.replies, contracts.events): a constraint is in the type,
so a field that takes a memory id, a tag list or a name says so in one word."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from contracts import limits
from contracts.subjects import WORKFLOW_ID_PATTERN
from contracts.types import TYPE_NAME_PATTERN

TAG_PATTERN = r"^[a-z0-9_:.-]{1,64}\Z"
# A workspace or state name: printable text without leading or trailing blanks: no control
# characters, line or paragraph separators, or invisible format characters (zero-width
# spaces, direction marks, BOM), so that two names that look alike are alike.
_HIDDEN = "\\x00-\\x1f\\x7f-\\x9f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff"
NAME_PATTERN = rf"^[^{_HIDDEN}\s](?:[^{_HIDDEN}]*[^{_HIDDEN}\s])?\Z"
SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}\Z"
_TAG_RE = re.compile(TAG_PATTERN)

TypeName = Annotated[str, msgspec.Meta(pattern=TYPE_NAME_PATTERN)]
WorkflowId = Annotated[str, msgspec.Meta(pattern=WORKFLOW_ID_PATTERN)]
MemoryId = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_ID_CHARS)]
ImportedId = Annotated[str, msgspec.Meta(pattern=limits.IMPORTED_ID_PATTERN)]
Ids = Annotated[list[MemoryId], msgspec.Meta(min_length=1, max_length=limits.MAX_IDS)]
Importance = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
# v4: a memory's name, chosen by its writer: no control characters (C0, DEL and C1: the
# C1 ones are controls too, and invisible).
MemoryKey = Annotated[
    str,
    msgspec.Meta(
        min_length=1, max_length=limits.MAX_KEY_CHARS, pattern=r"^[^\x00-\x1f\x7f-\x9f]*\Z"
    ),
]
Keys = Annotated[list[MemoryKey], msgspec.Meta(min_length=1, max_length=limits.MAX_IDS)]
# v4: the version a conditional write expects (0: no current memory, for a keyed add).
ExpectedVersion = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]
Tags = Annotated[list[str], msgspec.Meta(max_length=limits.MAX_TAGS)]
TypeList = Annotated[list[TypeName], msgspec.Meta(max_length=64)]
Embedding = Annotated[list[float], msgspec.Meta(min_length=1, max_length=limits.MAX_EMBEDDING_DIM)]
Query = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_QUERY_CHARS)]
AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_AGENT_ID_CHARS)]
Source = Annotated[str, msgspec.Meta(max_length=limits.MAX_SOURCE_CHARS)]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_TITLE_CHARS)]
Facts = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_FACT_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]
# Its limit is in UTF-8 bytes (`too_large`), checked by the handler; the body cap bounds it.
Narrative = str
Files = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_FILE_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]
PersonName = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_PERSON_CHARS)]
People = Annotated[list[PersonName], msgspec.Meta(max_length=limits.MAX_LIST_ITEMS)]
ReadScope = Literal["both", "workflow", "general"]
SearchMode = Literal["vector", "text", "hybrid"]
Fusion = Literal["linear", "rrf"]
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
StoreScope = Literal["general", "workflow"]
# Trust-gated stores: which one a memory is in; see contracts.subjects for trust.
MemoryStore = Literal["private", "shared", "social"]
TtlSeconds = Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_TTL_S)]
# v3: forgotten this long after the last access (each read pushes it).
IdleTtlSeconds = Annotated[int, msgspec.Meta(ge=60, le=limits.MAX_TTL_S)]
Name = Annotated[
    str, msgspec.Meta(min_length=1, max_length=limits.MAX_NAME_CHARS, pattern=NAME_PATTERN)
]
Description = Annotated[str, msgspec.Meta(max_length=limits.MAX_DESCRIPTION_CHARS)]
TaskText = Annotated[str, msgspec.Meta(max_length=limits.MAX_TASK_CHARS)]
Steps = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_STEP_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]


def compose_content(title: str, narrative: str | None, facts: list[str]) -> str:
    """The `content` of an observation added without one: the title, a blank line, the
    narrative, then one `- fact` line per fact (the blank line only when more follows)."""
    body = ([narrative] if narrative else []) + [f"- {fact}" for fact in facts]
    return title + ("\n\n" + "\n".join(body) if body else "")


def clip(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 (on a character boundary), with a mark
    saying how much was cut."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    kept = data[:max_bytes].decode(errors="ignore")
    return f"{kept}... [{len(data) - len(kept.encode())} more bytes cut]"


def normalize_tags(tags: list[str]) -> list[str]:
    """Lower-case, check and de-duplicate tags, keeping their first-seen order."""
    out: list[str] = []
    for tag in tags:
        low = tag.lower()
        if not _TAG_RE.match(low):
            raise ValueError(
                f"Invalid tag {tag!r}: after lower-casing, a tag must match {TAG_PATTERN}"
                " (letters, digits, _ : . -; at most 64 characters)"
            )
        if low not in out:
            out.append(low)
    return out
