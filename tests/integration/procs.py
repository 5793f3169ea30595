"""Processes as Linux's /proc shows them, for the tests that check nothing outlives a stop."""

from __future__ import annotations

from pathlib import Path


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state, parent, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> set[int]:
    """Every process descended from `pid`."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(entry.name)[1])
            except (OSError, IndexError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
