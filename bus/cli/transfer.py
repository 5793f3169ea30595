"""Moving a namespace: `membus export` writes every live memory as JSON lines, `membus
import` writes them back (same ids, times and TTLs; twice is the same as once)."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bus.cli.base import (
    DEFAULT_NS,
    DEFAULT_URL,
    Namespace,
    NatsUrl,
    app,
    connected,
    err,
    json_text,
    run,
    sends,
    shown,
)
from bus.client import MemoryBus
from bus.errors import BusError
from contracts import limits
from contracts.messages import ExportRequest, ImportedMemory, ImportRequest, RejectedEvent
from contracts.subjects import DURABLE_STREAM, rejected_subject
from contracts.types import STATE_TYPE

# Import batches stay well under the 256 KiB request limit.
IMPORT_BATCH_BYTES = 192 * 1024


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )


@app.command(rich_help_panel="Move", name="export")
@sends(ExportRequest)
def export_(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default: standard output).")
    ] = None,
    embeddings: Annotated[
        bool, typer.Option(help="Include vectors (import then needs no embedder).")
    ] = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
) -> None:
    """Write every live memory of the namespace as JSON lines (`membus export > file.jsonl`)."""

    async def work() -> int:
        async with connected(nats_url, namespace, timeout=30.0) as bus:
            total = (await bus.agent().describe()).total
            sink = output.open("wb") if output else sys.stdout.buffer
            written = 0
            try:
                with _progress() as bar:
                    task = bar.add_task(f"export {namespace}", total=total)
                    async for page in bus.export(embeddings=embeddings):
                        lines = (json_text(msgspec.json.encode(m)) + "\n" for m in page)
                        sink.write("".join(lines).encode())
                        written += len(page)
                        bar.update(task, completed=written, total=max(total, written))
                sink.flush()
            finally:
                if output:
                    sink.close()
            return written

    written = run(work)
    err.print(f"exported {written} memories of {namespace}")


def _batches(memories: list[ImportedMemory]) -> list[list[ImportedMemory]]:
    """Import requests under the request size limit and the per-request count."""
    batches: list[list[ImportedMemory]] = [[]]
    size = 0
    for m in memories:
        n = len(msgspec.json.encode(m))
        full = len(batches[-1]) >= limits.MAX_IMPORT or size + n > IMPORT_BATCH_BYTES
        if batches[-1] and full:
            batches.append([])
            size = 0
        batches[-1].append(m)
        size += n
    return [b for b in batches if b]


def _refusal(m: ImportedMemory) -> str | None:
    """Why the service would refuse this memory, of what it checks beyond the contract's
    types: the import is sent in several requests, so a memory that one of them would refuse
    must stop it before the first is sent, not after."""
    texts: dict[str, list[str | None]] = {
        "content": [m.content],
        "title": [m.title],
        "narrative": [m.narrative],
        "facts": list(m.facts),
    }
    for name, values in texts.items():
        if any(v is not None and "\x00" in v for v in values):
            return f"`{name}` contains a NUL character (\\u0000)"
    for name, text, cap in (
        ("content", m.content, limits.MAX_CONTENT_BYTES),
        ("narrative", m.narrative, limits.MAX_NARRATIVE_BYTES),
    ):
        if text is not None and len(text.encode()) > cap:
            return f"`{name}` is {len(text.encode())} bytes; the limit is {cap}"
    if m.metadata:
        if (size := len(msgspec.json.encode(m.metadata))) > limits.MAX_METADATA_BYTES:
            return f"`metadata` is {size} bytes of JSON; the limit is {limits.MAX_METADATA_BYTES}"
        if limits.nesting(m.metadata) > limits.MAX_METADATA_NESTING:
            return f"`metadata` nests more than {limits.MAX_METADATA_NESTING} levels deep"
    if m.type == STATE_TYPE and m.workspace is None:
        return "a state without a `workspace`"
    return None


def read_export(path: Path) -> list[ImportedMemory]:
    """The memories of an export file; a bad line stops the import before anything is sent:
    one that is no memory, one the service would refuse, or an id named twice (one request
    holding both would be refused after the earlier ones were written)."""
    decoder = msgspec.json.Decoder(ImportedMemory)
    found: list[ImportedMemory] = []
    seen: dict[str, int] = {}
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                memory = decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                raise BusError(f"{path}:{number}: not a memory of an export ({exc})") from None
            if (why := _refusal(memory)) is not None:
                raise BusError(
                    f"{path}:{number}: memory {memory.id!r} would be refused ({why});"
                    " nothing was imported. Fix or remove the line and import again."
                )
            if (first := seen.setdefault(memory.id, number)) != number:
                raise BusError(
                    f"{path}:{number}: id {memory.id!r} is on line {first} too; nothing was"
                    " imported. Keep one line per memory and import again."
                )
            found.append(memory)
    return found


async def _has_stream(bus: MemoryBus) -> bool:
    try:
        await bus.nc.jetstream().stream_info(DURABLE_STREAM)
        return True
    except Exception:  # no JetStream, or no stream: request/reply then
        return False


async def _readable(bus: MemoryBus, ids: list[str]) -> set[str]:
    """Which of these memories are live now (read without counting an access)."""
    found: set[str] = set()
    for start in range(0, len(ids), limits.MAX_IDS):
        page = await bus.export_page(ids=ids[start : start + limits.MAX_IDS])
        found.update(m.id for m in page.memories)
        found.update(page.pending)
    return found


async def _applied(bus: MemoryBus, ids: list[str], timeout_s: float) -> list[str]:
    """Wait until these memories are readable (a durable import is applied shortly after
    JetStream has it); the ids still missing at the deadline."""
    deadline = time.monotonic() + timeout_s
    missing = ids
    while missing and time.monotonic() < deadline:
        found = await _readable(bus, missing)
        missing = [mid for mid in missing if mid not in found]
        if missing:
            await asyncio.sleep(0.2)
    return missing


@app.command(rich_help_panel="Move", name="import")
@sends(ImportRequest)
def import_(
    file: Annotated[Path, typer.Argument(help="A file written by `membus export`.")],
    durable: Annotated[
        bool | None,
        typer.Option(help="Through JetStream (default: when the bus has its stream)."),
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
) -> None:
    """Write an export back: same ids, times and TTLs. Running it twice changes nothing."""

    async def work() -> tuple[int, int, int, bool]:
        memories = read_export(file)
        batches = _batches(memories)
        created = existing = 0
        now = datetime.now().astimezone()
        live = [m.id for m in memories if m.expires_at is None or m.expires_at > now]
        async with connected(nats_url, namespace, timeout=30.0) as bus:
            use_stream = await _has_stream(bus) if durable is None else durable
            if use_stream:  # JetStream's ack says nothing of them: count them before
                existing = len(await _readable(bus, live))
                created = len(live) - existing
            rejected: list[RejectedEvent] = []
            sub = None
            if use_stream:

                async def on_rejected(msg: Any) -> None:
                    rejected.append(msgspec.json.decode(msg.data, type=RejectedEvent))

                sub = await bus.nc.subscribe(rejected_subject(namespace, "import"), cb=on_rejected)
            with _progress() as bar:
                task = bar.add_task(f"import {namespace}", total=len(memories))
                for batch in batches:
                    if use_stream:
                        # The same batch always has the same id: JetStream drops a repeat.
                        digest = hashlib.sha256(msgspec.json.encode(batch)).hexdigest()[:32]
                        await bus.durable("import", ImportRequest(memories=batch), digest)
                    else:
                        reply = await bus.import_memories(batch)
                        created += len(reply.created)
                        existing += len(reply.existing)
                    bar.advance(task, len(batch))
                if use_stream:
                    bar.update(task, description="applying")
                    missing = await _applied(bus, live, timeout_s=60.0)
                    if sub is not None:
                        await sub.unsubscribe()
                    if rejected:
                        raise BusError(f"the bus rejected part of the import: {rejected[0].error}")
                    if missing:
                        raise BusError(
                            f"{len(missing)} memories were accepted but not applied within 60 s"
                            f" (first: {missing[0]}); check the handlers, then import again"
                            " (what is there already is left alone)."
                        )
        return created, existing, len(memories), use_stream

    created, existing, total, durable_used = run(work)
    expired = total - created - existing
    how = " through JetStream" if durable_used else ""
    err.print(
        f"{created} imported into {shown(namespace)}{how}, {existing} already there"
        + (f", {expired} expired (left out)" if expired else "")
        + f" ({total} in the file)",
        soft_wrap=True,
    )
