"""One round trip for the work of several rooms: each room queues its commands (`Queued`)
and says how to read their replies; `Queries.run` sends them in one pipeline."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Queued(NamedTuple, Generic[T]):
    """A room's commands for a shared round trip, how to read their replies (in order),
    and the Lua sources they run by SHA (loaded again when Redis lost its scripts)."""

    commands: list[list[Any]]
    parse: Callable[[list[Any]], T]
    scripts: tuple[str, ...] = ()


class Search(NamedTuple):
    """An FT.SEARCH to send with others: its query, built for the namespace's index (the
    `Namespace`; building may ask Redis, e.g. for a word's forms), and whether it scores."""

    build: Callable[[Any], Awaitable[Any]]
    with_scores: bool = False


class Inside(NamedTuple, Generic[T]):
    """An FT.SEARCH that a script runs, with the work that follows from its reply, in one
    command: the search, the script's call around its FT.SEARCH command, how to read the
    call's reply, and the script's Lua."""

    search: Search
    call: Callable[[list[Any]], list[Any]]
    parse: Callable[[Any], T]
    script: str


def evalsha(sha: str, keys: list[str], args: list[Any]) -> list[Any]:
    """A script call as a raw command, for a pipeline (redis-py's Script in a pipeline
    checks SCRIPT EXISTS first: a round trip more)."""
    return ["EVALSHA", sha, len(keys), *keys, *args]
