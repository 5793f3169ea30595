"""Request structs built on the client: a struct's own checks (tag patterns, query or
embedding) fail as the `InvalidRequest` the server would send."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from bus.errors import InvalidRequest

Q = TypeVar("Q", bound=msgspec.Struct)


def opt_list(items: Sequence[Any] | None) -> list[Any] | None:
    return list(items) if items is not None else None


def build(cls: type[Q], **fields: Any) -> Q:
    # Request structs check some rules on construction (tag patterns, query-or-embedding);
    # surface those as the same typed error the server would send.
    try:
        return cls(**fields)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(str(exc)) from None
