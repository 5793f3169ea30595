"""`reconcile` (PROTOCOL.md v3): the deterministic half of LLM fact extraction. An extractor
outside the service proposes facts; for each, the nearest current memories in scope and
what to do: `noop` (it is known), `supersede` (a memory of its type says something else
about the same thing), or `add`. Read-only: the extractor applies what it decides."""

from __future__ import annotations

import asyncio

import msgspec

from contracts import limits
from contracts.messages import (
    Neighbour,
    Reconciled,
    ReconcileFact,
    ReconcileReply,
    ReconcileRequest,
)
from handlers.ops.checks import check_content, type_config
from handlers.ops.deps import Deps
from handlers.ops.ranking import similarity
from handlers.ops.registry import handles
from handlers.ops.scoping import read_scope
from handlers.ops.secrets import Secrets
from handlers.ops.vectors import embed_texts
from handlers.store.filters import read_filter
from handlers.store.record import Candidate

# Neighbours are looked for among this many nearest memories (any type), so that the
# nearest of the fact's own type is found even behind closer ones of other types; more
# than the most neighbours a request may ask for.
_POOL = 20
assert limits.MAX_RECONCILE_NEIGHBOURS <= _POOL


def normal(text: str) -> str:
    """Content as exact dedup compares it: case and runs of whitespace ignored."""
    return " ".join(text.lower().split())


@handles(ReconcileRequest)
async def reconcile(ns: str, req: ReconcileRequest, deps: Deps) -> ReconcileReply:
    # Scanned before they are embedded: the embedding (and its cache) sees only the
    # redacted text, which is also what `add` would store.
    secrets = Secrets(deps.settings.secrets)
    req = msgspec.structs.replace(
        req, facts=[_scanned(i, f, secrets) for i, f in enumerate(req.facts)]
    )
    for fact in req.facts:
        check_content(fact.content)
        if fact.type is not None:
            type_config(deps.settings.types, fact.type)
    meta = await deps.store.meta(ns)
    # The embedding `add` would store (not the query graph): an added fact reuses it.
    vectors = await embed_texts(ns, deps, meta, [fact.content for fact in req.facts])
    now = deps.clock()
    scope = read_scope("both", req.workflow_id, req.workspace, deps.access.stores)
    where = read_filter(now, scope, current=True)
    found = await asyncio.gather(
        *(deps.store.queries.knn(ns, vec, where, _POOL, ended_by=now) for vec in vectors)
    )
    ids = list(dict.fromkeys(c.id for cands in found for c in cands))
    fetched = await deps.store.reads.fetch(ns, ids, now, count_access=False)
    contents = {f.record.id: f.record.content for f in fetched if f is not None}
    results = [
        _decide(fact, [c for c in cands if c.id in contents], contents, req.limit, deps)
        for fact, cands in zip(req.facts, found, strict=True)
    ]
    if secrets.redacted:
        return ReconcileReply(results=results, redacted=secrets.redacted)
    return ReconcileReply(results=results)


def _scanned(i: int, fact: ReconcileFact, secrets: Secrets) -> ReconcileFact:
    return msgspec.structs.replace(
        fact,
        content=secrets.text(f"facts[{i}].content", fact.content),
        title=secrets.optional(f"facts[{i}].title", fact.title),
    )


def _decide(
    fact: ReconcileFact,
    cands: list[Candidate],
    contents: dict[str, str],
    limit: int,
    deps: Deps,
) -> Reconciled:
    scored = sorted(((c, similarity(c.distance or 0.0)) for c in cands), key=lambda pair: -pair[1])
    neighbours = [
        Neighbour(id=c.id, content=contents[c.id], type=c.type, similarity=round(s, 4))
        for c, s in scored[:limit]
    ]
    same_type = [(c, s) for c, s in scored if fact.type is None or c.type == fact.type]
    text = normal(fact.content)
    for c, s in same_type:
        if normal(contents[c.id]) == text or s >= deps.settings.dedup_threshold:
            return Reconciled(
                content=fact.content, action="noop", target=c.id, neighbours=neighbours
            )
    if same_type and same_type[0][1] >= deps.settings.reconcile_supersede:
        target = same_type[0][0].id
        return Reconciled(
            content=fact.content, action="supersede", target=target, neighbours=neighbours
        )
    return Reconciled(content=fact.content, action="add", neighbours=neighbours)
