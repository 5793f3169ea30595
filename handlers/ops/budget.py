"""Token budgets (`max_tokens` on search and list): stop before an agent's context fills."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def estimate_tokens(text: str) -> int:
    """The token estimate of PROTOCOL's `max_tokens`: one token per 4 characters, rounded up."""
    return (len(text) + 3) // 4


def fits_budget(text: str, spent: int, budget: int | None) -> tuple[bool, int]:
    """Whether `text` still fits in the budget after `spent` tokens, and the new total."""
    total = spent + estimate_tokens(text)
    return budget is None or total <= budget, total


def within(budget: int | None, items: list[T], text: Callable[[T], str]) -> list[T]:
    """The leading items whose estimated tokens fit the budget (always at least one)."""
    spent = 0
    for i, item in enumerate(items):
        fits, spent = fits_budget(text(item), spent, budget)
        if not fits and i > 0:
            return items[:i]
    return items
