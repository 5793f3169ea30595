"""Reading commands: search, describe, list, get, recall, history, timeline, people."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from bus.cli.base import (
    DEFAULT_NS,
    DEFAULT_URL,
    Agent,
    AsJson,
    AsOf,
    IncludeSuperseded,
    Namespace,
    NatsUrl,
    Scope,
    TagsOpt,
    Types,
    Workflow,
    WorkspaceOpt,
    app,
    ask,
    err,
    instant,
    marks,
    memory_table,
    one_of,
    out,
    read_scope,
    record_table,
    sends,
    short,
    shown,
    when,
)
from contracts.messages import (
    DescribeReply,
    DescribeRequest,
    GetRequest,
    HistoryRequest,
    ListRequest,
    PeopleRequest,
    RecallRequest,
    SearchRequest,
    TimelineRequest,
)

Id = Annotated[str, typer.Argument(metavar="ID", help="Memory id.")]


@app.command(rich_help_panel="Read")
@sends(SearchRequest)
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    workflow: Workflow = None,
    type: Types = None,
    tag: TagsOpt = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Results at most.")] = 10,
    mode: Annotated[
        str | None, typer.Option(metavar="MODE", help="vector, text or hybrid (default).")
    ] = None,
    scope: Scope = "both",
    workspace: WorkspaceOpt = None,
    as_of: AsOf = None,
    include_superseded: IncludeSuperseded = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Search memories by meaning and words, ranked."""
    if mode is not None:
        one_of(mode, ("vector", "text", "hybrid"), "--mode")
    at = instant(as_of)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).search(
            query,
            types=type,
            tags=tag,
            limit=limit,
            mode=mode,  # type: ignore[arg-type]  # checked above
            scope=read_scope(scope),
            workspace=workspace,
            as_of=at,
            include_superseded=include_superseded,
        ),
        as_json=as_json,
    )
    if not as_json:
        n = len(reply.results)
        title = f"{n} result{'' if n == 1 else 's'} ({shown(reply.mode)})"
        out.print(memory_table(reply.results, title + (f" as of {when(at)}" if at else "")))


def describe_table(d: DescribeReply) -> Table:
    table = Table(show_header=False, title="namespace overview", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("memories", str(d.total))
    # list and search leave these out: say so, or the two totals seem to disagree.
    table.add_row("superseded", f"{d.superseded_count} (left out of list and search)")
    idle = "not known now (counting)" if d.idle_count is None else str(d.idle_count)
    table.add_row("idle-bounded", f"{idle} (forgotten once unread for their idle_ttl_s)")
    by_type = ", ".join(f"{t}: {n}" for t, n in sorted(d.by_type.items()))
    table.add_row("by type", shown(by_type) or "-")
    table.add_row("workflow / general", f"{d.workflow_count} / {d.general_count}")
    tags = ", ".join(d.tags[:30]) + (" …" if len(d.tags) > 30 or d.tags_truncated else "")
    table.add_row("tags", shown(tags) or "-")
    table.add_row("oldest / newest", f"{when(d.oldest)} / {when(d.newest)}")
    table.add_row("embedder", f"{shown(d.embedder)} ({d.dimension} dims)")
    return table


@app.command(rich_help_panel="Read")
@sends(DescribeRequest)
def describe(
    workflow: Workflow = None,
    scope: Scope = "both",
    workspace: WorkspaceOpt = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """What the namespace holds: counts by type and scope, tags, oldest and newest."""
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).describe(
            scope=read_scope(scope), workspace=workspace
        ),
        as_json=as_json,
    )
    if not as_json:
        out.print(describe_table(reply))


@app.command(rich_help_panel="Read", name="list")
@sends(ListRequest)
def list_(
    workflow: Workflow = None,
    type: Types = None,
    tag: TagsOpt = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Memories per page.")] = 20,
    offset: Annotated[int, typer.Option(metavar="N", help="Skip this many.")] = 0,
    scope: Scope = "both",
    workspace: WorkspaceOpt = None,
    as_of: AsOf = None,
    include_superseded: IncludeSuperseded = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """List memories, newest first, filtered by type, tag, workflow and workspace."""
    at = instant(as_of)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).list(
            types=type,
            tags=tag,
            limit=limit,
            offset=offset,
            scope=read_scope(scope),
            workspace=workspace,
            as_of=at,
            include_superseded=include_superseded,
        ),
        as_json=as_json,
    )
    if not as_json:
        span = f"{offset + 1}-{offset + reply.count}" if reply.count else "none"
        title = f"memories {span} of {reply.total}" + (f" as of {when(at)}" if at else "")
        out.print(memory_table(reply.memories, title))


@app.command(rich_help_panel="Read")
@sends(GetRequest)
def get(
    ids: Annotated[list[str] | None, typer.Argument(metavar="[ID...]", help="Memory ids.")] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(
            "--key", metavar="KEY", help="A key a keyed add named a memory with (repeat)."
        ),
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Read memories whole, by id and by key (a missing one exits 1)."""
    if not ids and not key:
        raise typer.BadParameter("name memories: ID... or --key KEY (or both)")
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent().get(ids or None, keys=key or None),
        as_json=as_json,
    )
    if not as_json:
        for m in reply.memories:
            out.print(record_table(m))
        if reply.missing:
            err.print(f"[yellow]not found:[/] {shown(', '.join(reply.missing))}")
        if reply.missing_keys:
            err.print(f"[yellow]no memory holds key:[/] {shown(', '.join(reply.missing_keys))}")
    if reply.missing or reply.missing_keys:
        raise typer.Exit(1)


@app.command(rich_help_panel="Read")
@sends(RecallRequest)
def recall(
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="The turn's text.")],
    session: Annotated[str, typer.Option("--session", "-s", metavar="ID", help="Session id.")],
    workflow: Workflow = None,
    agent: Agent = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Memories at most.")] = 20,
    scope: Scope = "both",
    workspace: WorkspaceOpt = None,
    as_of: AsOf = None,
    include_superseded: IncludeSuperseded = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """What an agent should have in mind before a model turn (pre-turn recall)."""
    at = instant(as_of)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow, agent_id=agent, session_id=session).recall(
            message,
            limit=limit,
            scope=read_scope(scope),
            workspace=workspace,
            as_of=at,
            include_superseded=include_superseded,
        ),
        as_json=as_json,
    )
    if as_json:
        return
    table = Table(title=f"turn {reply.turn}: {len(reply.results)} recalled", title_justify="left")
    for name in ("path", "score", "id", "type", "content"):
        table.add_column(name)
    for m in reply.results:
        content = shown(marks(m) + short(m.content, 60))
        table.add_row(shown(m.path), f"{m.score:.3f}", shown(m.id), shown(m.type), content)
    out.print(table)
    left = reply.left_out_recalled + reply.left_out_similar
    if left:
        out.print(
            f"left out: {reply.left_out_recalled} recalled lately,"
            f" {reply.left_out_similar} too similar to one given"
        )


@app.command(rich_help_panel="Read")
@sends(HistoryRequest)
def history(
    id: Id,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """What happened to one memory, oldest first."""
    reply = ask(nats_url, namespace, lambda bus: bus.agent().history(id), as_json=as_json)
    if as_json:
        return
    table = Table(title=f"history of {shown(reply.id)}", title_justify="left")
    for name in ("at", "event", "agent", "session", "changes"):
        table.add_column(name)
    for e in reply.entries:
        changes = "; ".join(f"{k}: {c.old!r} → {c.new!r}" for k, c in e.changes.items())
        who, session = shown(e.agent_id or "-"), shown(e.session_id or "-")
        table.add_row(when(e.at), shown(e.event), who, session, shown(changes))
    out.print(table)


@app.command(rich_help_panel="Read")
@sends(TimelineRequest)
def timeline(
    id: Annotated[str, typer.Argument(metavar="ID", help="The anchor memory's id.")],
    before: Annotated[int, typer.Option(metavar="N", help="Memories before it.")] = 5,
    after: Annotated[int, typer.Option(metavar="N", help="Memories after it.")] = 5,
    workflow: Workflow = None,
    type: Types = None,
    scope: Scope = "both",
    workspace: WorkspaceOpt = None,
    as_of: AsOf = None,
    include_superseded: IncludeSuperseded = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """The memories just before and after one, oldest first (the anchor marked)."""
    at = instant(as_of)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).timeline(
            id,
            before=before,
            after=after,
            scope=read_scope(scope),
            types=type,
            mode="full",
            as_of=at,
            include_superseded=include_superseded,
            workspace=workspace,
        ),
        as_json=as_json,
    )
    if as_json:
        return
    table = Table(title=f"timeline around {shown(id)}", title_justify="left")
    for name in ("", "created", "id", "type", "content"):
        table.add_column(name)
    for i, m in enumerate(reply.memories):
        mark = "▶" if i == reply.anchor_index else ""
        style = "bold" if i == reply.anchor_index else None
        content = shown(marks(m) + short(m.content, 60))
        table.add_row(mark, when(m.created_at), shown(m.id), shown(m.type), content, style=style)
    out.print(table)


@app.command(rich_help_panel="Read")
@sends(PeopleRequest)
def people(
    query: Annotated[
        str | None, typer.Argument(metavar="[NAME]", help="Part of a name (any case).")
    ] = None,
    workflow: Workflow = None,
    scope: Scope = "both",
    limit: Annotated[int, typer.Option(metavar="N", help="People at most.")] = 20,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Who the memories name, most recently mentioned first."""
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).people(
            query, scope=read_scope(scope), limit=limit
        ),
        as_json=as_json,
    )
    if as_json:
        return
    table = Table(title=f"{len(reply.people)} people", title_justify="left")
    for name in ("name", "mentions", "last mentioned", "memories"):
        table.add_column(name)
    for p in reply.people:
        ids = shown(", ".join(p.memory_ids))
        table.add_row(shown(p.name), str(p.mention_count), when(p.last_mentioned_at), ids)
    out.print(table)
