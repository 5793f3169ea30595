"""Marks shared by every test directory: what a test needs beyond this process.

`processes`: the test starts or drives processes of its own (handler processes, servers of
its own, a browser, the installed scripts). `make check` leaves these and `minilm` out.
Tests that take the session's handlers or a browser, or run over NATS, get it from their
fixtures here; modules that start processes in their bodies say so themselves.
"""

from __future__ import annotations

import pytest

# Fixtures that start processes: handlers (two handler processes), browser (Chromium).
_PROCESS_FIXTURES = frozenset({"handlers", "browser", "page"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        over_nats = callspec is not None and callspec.params.get("transport") == "nats"
        if fixtures & _PROCESS_FIXTURES or over_nats:
            item.add_marker(pytest.mark.processes)
