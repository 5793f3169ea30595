"""The operations of a whole namespace, not of an agent (full trust): its workspaces, and
the export and import of every memory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from bus.build import build as _build
from bus.build import opt_list as _opt_list
from bus.connection import Connection
from contracts import limits
from contracts.messages import (
    ArchiveWorkspaceRequest,
    Context,
    CreateWorkspaceRequest,
    ExportedMemory,
    ExportReply,
    ExportRequest,
    ImportedMemory,
    ImportReply,
    ImportRequest,
    ListDataReply,
    ListWorkspacesRequest,
    LoadWorkspaceRequest,
    OkReply,
    UpdateWorkspaceRequest,
    Workspace,
    WorkspaceReply,
)


class NamespaceOperations(Connection):
    """`MemoryBus`'s operations on the namespace: workspaces, export, import."""

    # Workspaces belong to the namespace, not to an agent.

    async def create_workspace(
        self,
        name: str,
        *,
        description: str,
        root_folder: str,
        purpose: str,
        workflows: Sequence[str] = (),
        key_files: Sequence[str] = (),
        preferences: dict[str, Any] | None = None,
        context: Context | None = None,
    ) -> OkReply:
        """Create a workspace; its name is unique in the namespace (else `Conflict`). The
        reply's `redacted` names the kinds of secret redacted from its texts, if any."""
        req = _build(
            CreateWorkspaceRequest,
            name=name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=list(workflows),
            key_files=list(key_files),
            preferences=preferences or {},
            context=context,
        )
        return await self.request("create_workspace", req, OkReply)

    async def list_workspaces(
        self, *, include_archived: bool = False, context: Context | None = None
    ) -> ListDataReply:
        """`reply.data`: `{name, description}` of each workspace, oldest first."""
        req = ListWorkspacesRequest(include_archived=include_archived, context=context)
        return await self.request("list_workspaces", req, ListDataReply)

    async def load_workspace(self, name: str, *, context: Context | None = None) -> Workspace:
        req = _build(LoadWorkspaceRequest, name=name, context=context)
        return (await self.request("load_workspace", req, WorkspaceReply)).data

    async def update_workspace(
        self,
        name: str,
        *,
        description: str | None = None,
        root_folder: str | None = None,
        purpose: str | None = None,
        workflows: Sequence[str] | None = None,
        key_files: Sequence[str] | None = None,
        preferences: dict[str, Any] | None = None,
        is_archived: bool | None = None,
        context: Context | None = None,
    ) -> OkReply:
        """Change a workspace's fields; `is_archived=False` restores an archived one. The
        reply's `redacted` names the kinds of secret redacted from its texts, if any."""
        req = _build(
            UpdateWorkspaceRequest,
            name=name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=_opt_list(workflows),
            key_files=_opt_list(key_files),
            preferences=preferences,
            is_archived=is_archived,
            context=context,
        )
        return await self.request("update_workspace", req, OkReply)

    async def archive_workspace(self, name: str, *, context: Context | None = None) -> None:
        """Hide a workspace from `list_workspaces` (its memories stay)."""
        req = _build(ArchiveWorkspaceRequest, name=name, context=context)
        await self.request("archive_workspace", req, OkReply)

    # Export and import: the whole namespace, every store (full trust).

    async def export_page(
        self,
        cursor: str = "0",
        *,
        ids: Sequence[str] | None = None,
        limit: int = 200,
        embeddings: bool = False,
    ) -> ExportReply:
        """One page of `export` (see `export` for the loop over pages)."""
        req = _build(
            ExportRequest, cursor=cursor, ids=_opt_list(ids), limit=limit, embeddings=embeddings
        )
        return await self.request("export", req, ExportReply)

    async def export(
        self, *, limit: int = 200, embeddings: bool = False
    ) -> AsyncIterator[list[ExportedMemory]]:
        """Every live memory of the namespace, whole, a page at a time (each memory once)."""
        seen: set[str] = set()
        cursor: str | None = "0"
        while cursor is not None:
            page = await self.export_page(cursor, limit=limit, embeddings=embeddings)
            cursor = page.cursor
            pending = page.pending
            while True:
                fresh = [m for m in page.memories if m.id not in seen]
                seen.update(m.id for m in fresh)
                if fresh:
                    yield fresh
                if not pending:
                    break
                # What did not fit that page, at most MAX_IDS a request (and again what of
                # those does not fit the next).
                ask, pending = pending[: limits.MAX_IDS], pending[limits.MAX_IDS :]
                page = await self.export_page(ids=ask, embeddings=embeddings)
                pending = page.pending + pending

    async def import_memories(self, memories: Sequence[ImportedMemory]) -> ImportReply:
        """Write exported memories back as they were (ids, times, expiry, counters); one
        whose id exists is left alone, so importing twice changes nothing. At most 100 a
        call, within the 256 KiB request limit. Through JetStream:
        `bus.durable("import", ImportRequest(memories=...), request_id)`."""
        return await self.request(
            "import", _build(ImportRequest, memories=list(memories)), ImportReply
        )
