"""Checks of a request that its Struct cannot express: known memory types, and content and
metadata sizes measured the way the store keeps them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import msgspec

from contracts import limits
from contracts.messages import Context
from contracts.types import TypeConfig, TypeTable
from handlers.errors import InvalidRequest, TooLarge
from handlers.ops.deps import Deps

_encoder = msgspec.json.Encoder()


def type_config(types: TypeTable, name: str) -> TypeConfig:
    cfg = types.get(name)
    if cfg is None:
        close = difflib.get_close_matches(name, types, n=1)
        hint = f' Did you mean "{close[0]}"?' if close else ""
        raise InvalidRequest(
            f'Unknown memory type "{name}".{hint} Known types: {", ".join(types)}.'
        )
    return cfg


def check_types(types: TypeTable, names: Iterable[str] | None) -> None:
    for name in names or ():
        type_config(types, name)


def check_metadata(value: dict[str, object] | None) -> str | None:
    """The metadata as the JSON text we store, once it is known to be small and shallow."""
    if value is None:
        return None
    return check_object(value, "metadata", "put long text in `content`")


def check_object(value: dict[str, object], name: str, instead: str) -> str:
    """A free JSON object of a request (`metadata`, `preferences`) as the JSON text we
    store, once it is known to be small and shallow."""
    data = _encoder.encode(value)
    if len(data) > limits.MAX_METADATA_BYTES:
        raise TooLarge(
            f"`{name}` is {len(data)} bytes of JSON; the limit is {limits.MAX_METADATA_BYTES}."
            f" Keep {name} small and {instead}."
        )
    if limits.nesting(value) > limits.MAX_METADATA_NESTING:
        raise InvalidRequest(
            f"`{name}` nests more than {limits.MAX_METADATA_NESTING} levels deep; flatten it."
        )
    return data.decode()


def check_no_nul(**texts: str | list[str] | None) -> None:
    """RediSearch's tokenizer stops at a NUL, so the words after one would never be found:
    text fields that are stored and searched refuse it."""
    for name, value in texts.items():
        values = value if isinstance(value, list) else [value]
        if any(v is not None and "\x00" in v for v in values):
            raise InvalidRequest(
                f"`{name}` contains a NUL character (\\u0000), which full-text search cannot"
                " index. Remove it, or replace it with a space, and send the request again."
            )


def check_content(content: str, composed: bool = False) -> None:
    check_no_nul(content=content)
    size = len(content.encode())
    if size > limits.MAX_CONTENT_BYTES:
        what = "The content composed from `title`, `narrative` and `facts`" if composed else None
        raise TooLarge(
            f"{what or '`content`'} is {size} bytes; the limit is {limits.MAX_CONTENT_BYTES}"
            " (32 KiB). Split it into several memories or store a summary."
        )


def check_narrative(narrative: str | None) -> None:
    if narrative is not None and len(narrative.encode()) > limits.MAX_NARRATIVE_BYTES:
        raise TooLarge(
            f"`narrative` is {len(narrative.encode())} bytes; the limit is"
            f" {limits.MAX_NARRATIVE_BYTES} (32 KiB). Keep the details in `facts` or split it."
        )


def check_context(ctx: Context) -> None:
    """The context texts' limit is in UTF-8 bytes; the contract's length check counts
    characters, so a multi-byte text is measured again here."""
    for name in ("goal", "memory", "constraints"):
        text = getattr(ctx, name)
        if text is not None and len(text.encode()) > limits.MAX_CONTEXT_TEXT_BYTES:
            raise TooLarge(
                f"`context.{name}` is {len(text.encode())} bytes; the limit is"
                f" {limits.MAX_CONTEXT_TEXT_BYTES} (4 KiB). Summarise it."
            )


async def unseen_ids(ns: str, ids: list[str], deps: Deps) -> set[str]:
    """The ids of memories that exist in stores the caller cannot see: every operation
    answers them as missing, so that ids do not leak across trust levels."""
    if deps.access.stores is None or not ids:
        return set()
    stores = await deps.store.reads.stores(ns, ids)
    return {mid for mid, st in zip(ids, stores, strict=True) if st and not deps.access.sees(st)}
