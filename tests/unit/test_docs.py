"""docs/protocol.md's message tables match the contracts they are generated from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

GEN = Path(__file__).resolve().parents[2] / "docs" / "gen_protocol.py"


def test_protocol_reference_tables_are_generated_from_the_current_contracts() -> None:
    spec = importlib.util.spec_from_file_location("gen_protocol", GEN)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)

    text = gen.DOC.read_text(encoding="utf-8")

    assert gen.BEGIN in text and gen.END in text
    assert gen.updated(text) == text, "run: python docs/gen_protocol.py"
    assert "#### `AddRequest`" in text
