"""The filter every read applies (live, in scope, the request's own filters). Filters
compose as redisvl expressions and can be checked as strings without Redis."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from redisvl.query.filter import FilterExpression, Num
from redisvl.query.filter import Tag as _RedisvlTag
from redisvl.utils.token_escaper import TokenEscaper

from handlers.store.record import GENERAL, person_tag, workspace_tag


class Tag(_RedisvlTag):
    """redisvl's tag filter, escaping `_` too: RediSearch reads a bare `{_}` as a syntax
    error, so a workflow id or tag of `_` could be written but never found."""

    escaper = TokenEscaper(escape_chars_re=re.compile(r"[,.<>{}\[\]\\\"\':;!@#$%^&*()\-+=~|\/ ?_]"))


# Memories no newer memory superseded (and whose validity has not ended: `validity`). A
# negation, so memories written before `supersedes` existed (without the flag) pass it too.
CURRENT = Tag("superseded") != "1"


def valid_at(as_of_ms: int) -> FilterExpression:
    """v3 `as_of`: memories valid at that instant (`vf` <= as_of < `vu`), superseded or
    not (record.validity). Written as two negations, of those valid only later and of
    those whose validity had ended: each reads the few memories it names, where the
    positive ranges read every memory (which doubled an as_of search's Redis time). Every
    memory has both fields (layout 3, `migration`)."""
    return FilterExpression(f"-@vf:[({as_of_ms} +inf] -@vu:[-inf {as_of_ms}]")


@dataclass(frozen=True, slots=True)
class ReadScope:
    """What a read covers: one workflow's memories, the general ones, or both; within a
    workspace, when it names one. No workflow and not general, in a workspace, is all of
    the workspace's memories."""

    workflow_id: str | None
    general: bool
    workspace: str | None = None
    # The stores a caller of reduced trust sees; None: all of them (full trust).
    stores: tuple[str, ...] | None = None

    @property
    def applied(self) -> str:
        if self.workflow_id is None:
            # A whole workspace holds workflow and general memories alike.
            return "general" if self.general else "both"
        return "both" if self.general else "workflow"


class Scoped(NamedTuple):
    """What a filter that is a scope alone covers (`current`: memories no newer one
    superseded), so that its size can be read from the tallies instead of counted."""

    scope: ReadScope
    current: bool


def read_filter(
    now_ms: int | None,
    scope: ReadScope,
    *,
    types: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    people: Iterable[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    current: bool = False,
    as_of_ms: int | None = None,
) -> FilterExpression:
    """The filter every read applies: live (not expired), in scope, and the request's filters.

    `now_ms=None` leaves expiry out, for a caller that checks `expires_at` itself (vector
    search does: a numeric range over every document slows RediSearch's hybrid KNN down).
    `current` leaves out memories that a newer one superseded; `as_of_ms` keeps those
    valid then instead (a caller gives one or the other).
    """
    general = Tag("general") == GENERAL
    where: FilterExpression
    if scope.workflow_id is not None:
        where = Tag("wf") == scope.workflow_id
        if scope.general:
            where = where | general
    else:
        where = general
    if scope.workspace is not None:
        in_workspace = Tag("wsh") == workspace_tag(scope.workspace)
        whole = scope.workflow_id is None and not scope.general
        where = in_workspace if whole else in_workspace & where
    if scope.stores is not None:
        where = where & (Tag("store") == list(scope.stores))
    f = where if now_ms is None else (Num("expires_at") > now_ms) & where
    if types:
        f = f & (Tag("type") == list(types))
    if tags:
        f = f & (Tag("tags") == list(tags))
    if people:
        f = f & (Tag("people") == [person_tag(p) for p in people])
    if current:
        f = f & CURRENT
    if since_ms is not None:
        f = f & (Num("created_at") >= since_ms)
    if until_ms is not None:
        f = f & (Num("created_at") <= until_ms)
    if as_of_ms is not None:
        f = f & valid_at(as_of_ms)
    return f


def in_store(store: str) -> FilterExpression:
    """Memories of exactly this store; `private` includes those from before stores (which
    have no store field)."""
    if store == "private":
        return Tag("store") != ["shared", "social"]
    return Tag("store") == store


def always_recalled(identity_type: str, min_importance: float, since_ms: int) -> FilterExpression:
    """Recall's path 1: identity memories, important ones, and recent ones."""
    return (
        (Tag("type") == identity_type)
        | (Num("importance") >= min_importance)
        | (Num("created_at") >= since_ms)
    )
