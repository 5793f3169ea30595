"""The words of a search query: lower-cased, common function words left out."""

from __future__ import annotations

import re

_WORD_RE = re.compile(r"\w+", re.UNICODE)

# Common English function words: they match nearly every memory and only add noise to BM25.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def query_terms(text: str) -> list[str]:
    """Lower-cased words of a query, stopwords removed (unless that leaves none), first
    occurrence kept."""
    words = _WORD_RE.findall(text.lower())
    kept = [w for w in words if w not in STOPWORDS] or words
    return list(dict.fromkeys(kept))
