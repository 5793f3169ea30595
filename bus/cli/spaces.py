"""`membus workspace ...` and `membus state ...`: a project's named containers, and the
immutable save points a later session loads to resume."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from bus.cli.base import (
    DEFAULT_NS,
    DEFAULT_URL,
    Agent,
    AsJson,
    Namespace,
    NatsUrl,
    TagsOpt,
    app,
    ask,
    json_object,
    out,
    sends,
    shown,
    when,
)
from bus.client import MemoryBus
from contracts.messages import (
    ArchiveStateRequest,
    ArchiveWorkspaceRequest,
    CreateStateRequest,
    CreateWorkspaceRequest,
    ListStatesRequest,
    ListWorkspacesRequest,
    LoadStateRequest,
    LoadWorkspaceRequest,
    OkReply,
    UpdateWorkspaceRequest,
)

workspace_app = typer.Typer(
    name="workspace",
    help="Workspaces: named containers of a project's memories and states.",
    no_args_is_help=True,
)
state_app = typer.Typer(
    name="state",
    help="States: immutable, named save points of a workspace (task, files, next steps).",
    no_args_is_help=True,
)
app.add_typer(workspace_app, rich_help_panel="Workspaces")
app.add_typer(state_app, rich_help_panel="Workspaces")

Name = Annotated[str, typer.Argument(metavar="NAME", help="The workspace's name.")]
InWorkspace = Annotated[str, typer.Argument(metavar="WORKSPACE", help="The workspace.")]
StateName = Annotated[str, typer.Argument(metavar="NAME", help="The state's name.")]
Archived = Annotated[bool, typer.Option("--archived", help="Archived ones too.")]
Repeated = list[str] | None


def _items(data: list[Any], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("name")
    table.add_column("description")
    for item in data:
        table.add_row(shown(item.name), shown(item.description or ""))
    return table


def _fields(rows: dict[str, Any], title: str) -> Table:
    table = Table(show_header=False, title=title, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in rows.items():
        if value in (None, [], {}, ""):
            continue
        if isinstance(value, list):
            value = "\n".join(f"- {v}" for v in value)
        elif isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False)
        table.add_row(name, shown(value))
    return table


def _preferences(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return json_object(value, "the preferences", "--preferences")


Preferences = Annotated[
    str | None, typer.Option(metavar="JSON", help="Preferences, a JSON object.")
]


@workspace_app.command("create")
@sends(CreateWorkspaceRequest)
def workspace_create(
    name: Name,
    description: Annotated[str, typer.Option(metavar="TEXT", help="What it is.")],
    root_folder: Annotated[str, typer.Option(metavar="PATH", help="Its folder.")],
    purpose: Annotated[str, typer.Option(metavar="TEXT", help="What it is for.")],
    workflow: Annotated[
        Repeated, typer.Option("--workflow", "-w", metavar="WF", help="A workflow (repeat).")
    ] = None,
    key_file: Annotated[Repeated, typer.Option(metavar="PATH", help="A key file (repeat).")] = None,
    preferences: Preferences = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Create a workspace (its name is unique in the namespace)."""
    prefs = _preferences(preferences)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.create_workspace(
            name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=workflow or (),
            key_files=key_file or (),
            preferences=prefs,
        ),
        as_json=as_json,
    )
    if not as_json:
        out.print(f"created workspace {shown(name)}")
        _say_redacted(reply)


@workspace_app.command("list")
@sends(ListWorkspacesRequest)
def workspace_list(
    archived: Archived = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """The workspaces, oldest first."""
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.list_workspaces(include_archived=archived),
        as_json=as_json,
    )
    if not as_json:
        out.print(_items(reply.data, f"{len(reply.data)} workspaces"))


@workspace_app.command("show")
@sends(LoadWorkspaceRequest)
def workspace_show(
    name: Name,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """One workspace whole."""
    ws = ask(nats_url, namespace, lambda bus: bus.load_workspace(name), as_json=as_json)
    if as_json:
        return
    rows = {
        "description": ws.description,
        "root folder": ws.root_folder,
        "purpose": ws.purpose,
        "workflows": ws.workflows,
        "key files": ws.key_files,
        "preferences": ws.preferences,
        "archived": "yes" if ws.is_archived else "",
        "created / updated": f"{when(ws.created_at)} / {when(ws.updated_at)}",
    }
    out.print(_fields(rows, f"workspace {shown(ws.name)}"))


@workspace_app.command("update")
@sends(UpdateWorkspaceRequest)
def workspace_update(
    name: Name,
    description: Annotated[str | None, typer.Option(metavar="TEXT", help="What it is.")] = None,
    root_folder: Annotated[str | None, typer.Option(metavar="PATH", help="Its folder.")] = None,
    purpose: Annotated[str | None, typer.Option(metavar="TEXT", help="What it is for.")] = None,
    workflow: Annotated[
        Repeated,
        typer.Option("--workflow", "-w", metavar="WF", help="The workflows (repeat; replace)."),
    ] = None,
    key_file: Annotated[
        Repeated, typer.Option(metavar="PATH", help="The key files (repeat; replace).")
    ] = None,
    preferences: Preferences = None,
    restore: Annotated[bool, typer.Option("--restore", help="Bring an archived one back.")] = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Change a workspace's fields (those given), or restore an archived one."""
    prefs = _preferences(preferences)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.update_workspace(
            name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=workflow,
            key_files=key_file,
            preferences=prefs,
            is_archived=False if restore else None,
        ),
        as_json=as_json,
    )
    if not as_json:
        out.print(f"updated workspace {shown(name)}")
        _say_redacted(reply)


@workspace_app.command("archive")
@sends(ArchiveWorkspaceRequest)
def workspace_archive(
    name: Name,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Hide a workspace from `workspace list` (its memories and states stay)."""
    ask(nats_url, namespace, lambda bus: bus.archive_workspace(name), as_json=as_json)
    if not as_json:
        out.print(f"archived workspace {shown(name)} (membus workspace update --restore undoes)")


@state_app.command("save")
@sends(CreateStateRequest)
def state_save(
    workspace: InWorkspace,
    name: StateName,
    task: Annotated[str, typer.Option("--task", metavar="TEXT", help="The active task.")],
    context: Annotated[
        str, typer.Option("--context", metavar="TEXT", help="Where the conversation stands.")
    ],
    file: Annotated[
        Repeated, typer.Option("--file", metavar="PATH", help="An active file (repeat).")
    ] = None,
    next_step: Annotated[
        Repeated, typer.Option("--next-step", metavar="TEXT", help="A next step (repeat).")
    ] = None,
    description: Annotated[str | None, typer.Option(metavar="TEXT", help="A summary.")] = None,
    tag: TagsOpt = None,
    agent: Agent = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Save a state: immutable, its name unique in the workspace for good."""

    async def send(bus: MemoryBus) -> OkReply:
        return await bus.agent(agent_id=agent, workspace=workspace).create_state(
            name,
            conversation_context=context,
            active_task=task,
            active_files=file or (),
            next_steps=next_step or (),
            description=description,
            tags=tag or (),
        )

    reply = ask(nats_url, namespace, send, as_json=as_json)
    if not as_json:
        out.print(f"saved state {shown(name)} in {shown(workspace)}")
        _say_redacted(reply)


def _say_redacted(reply: OkReply) -> None:
    if reply.redacted:
        out.print(f"redacted before storing: {shown(', '.join(reply.redacted))}")


@state_app.command("load")
@sends(LoadStateRequest)
def state_load(
    workspace: InWorkspace,
    name: StateName,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """A state whole, to resume from."""
    st = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workspace=workspace).load_state(name),
        as_json=as_json,
    )
    if as_json:
        return
    rows = {
        "task": st.active_task,
        "context": st.conversation_context,
        "files": st.active_files,
        "next steps": st.next_steps,
        "description": st.description,
        "tags": st.tags,
        "memory id": st.id,
        "saved": f"{when(st.created_at)} by {st.agent_id or '-'}",
        "archived": "yes" if st.is_archived else "",
    }
    out.print(_fields(rows, f"state {shown(st.name)} of {shown(st.workspace)}"))


@state_app.command("list")
@sends(ListStatesRequest)
def state_list(
    workspace: InWorkspace,
    archived: Archived = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """A workspace's states, oldest first."""
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workspace=workspace).list_states(include_archived=archived),
        as_json=as_json,
    )
    if not as_json:
        out.print(_items(reply.data, f"{len(reply.data)} states of {shown(workspace)}"))


@state_app.command("archive")
@sends(ArchiveStateRequest)
def state_archive(
    workspace: InWorkspace,
    name: StateName,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Hide a state from `state list`; it stays loadable and its name stays taken."""
    ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workspace=workspace).archive_state(name),
        as_json=as_json,
    )
    if not as_json:
        out.print(f"archived state {shown(name)} of {shown(workspace)}")
