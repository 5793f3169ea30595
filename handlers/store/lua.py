"""How the store's Lua is written. Each room of the store keeps its own scripts, and the
fragments (Lua local functions) that other rooms' scripts call: `retally` of the tallies,
`pooled` of placement, `follow` of the writes, `keep_alive` of the reads. Scripts name
record fields as `$field` (the protocol's name), replaced by the field's storage name from
`record.Record`, so a renamed field changes in one place."""

from __future__ import annotations

from string import Template

import msgspec

from handlers.store.record import OPEN_UNTIL_MS, PERMANENT_MS, Record

_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Record)}


def fragment(source: str, **constants: object) -> str:
    """Lua that scripts include (`lua`), with the given constants (`$name`) filled in now and
    record field names left for the script."""
    return Template(source).safe_substitute(
        constants, permanent=PERMANENT_MS, open_until=OPEN_UNTIL_MS
    )


def lua(*parts: str) -> str:
    """A script: its fragments, each once and in order (a Lua local function must come
    before its callers), then its own source; record field names filled in. A placeholder
    left unfilled fails at import."""
    return Template("".join(dict.fromkeys(parts))).substitute(
        _NAMES, permanent=PERMANENT_MS, open_until=OPEN_UNTIL_MS
    )
