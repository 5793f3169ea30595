"""What a search query says beyond its words, found without a model: the people it names
and the time it is about. Pure functions; `search` turns them into ranking signals over
the candidates' `related_people`, tags and times (docs/protocol.md, "Query signals").

Names: a capitalised word that does not start a sentence and is not a question word,
pronoun, month or weekday ("When did Caroline go ..."), and any word, wherever it stands,
that is a name the candidates carry ("Caroline's ..." first in the question). Times: years
("in 2022"), months with or without a year or day ("in June", "May 2023", "October 13,
2023"), ISO dates, and expressions relative to now ("yesterday", "last week", "last May",
"3 days ago", "on Monday"). A month without a year matches that month of any year: nothing
says which year "in June" means, and the newest June before now is often the wrong one
(a past conversation imported today).
"""

from __future__ import annotations

import calendar
import functools
import itertools
import re
from collections.abc import Collection, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from handlers.settings import RankWeights
    from handlers.store.record import Candidate

DAY_MS = 24 * 3600 * 1000

_TOKEN_RE = re.compile(r"[^\W\d_][\w'’.-]*", re.UNICODE)
# Ends a sentence: the next word is capitalised for that reason alone.
_SENTENCE_END = re.compile(r"[.!?:;\"“”(]\s*$")

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTHS.pop("may", None)
MONTHS["may"] = 5
WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}

# Capitalised words that are not names: question and function words, pronouns, calendar.
_NOT_NAMES = (
    frozenset(
        """
    a an and are as at be but by can could did do does for from had has have he her his how i
    if in is it its me my no not of on or our she so that the their them then there these they
    this those to was we were what when where which who whom whose why will with would you
    your yes ok okay please tell list show find give describe summarise summarize mr mrs ms dr
    today yesterday tomorrow last next this after before during since until ago
    """.split()  # noqa: SIM905 - a word list reads better as text
    )
    | frozenset(MONTHS)
    | frozenset(WEEKDAYS)
)


def name_key(name: str) -> str:
    """How names compare: lower-cased, without a possessive or surrounding punctuation."""
    name = name.strip(" .,-'’").lower()
    for suffix in ("'s", "’s"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def name_parts(names: Iterable[str]) -> set[str]:
    """Each name and each of its words, as `name_key`s ("Dana Smith": dana smith, dana,
    smith), so that a question's first name matches a stored full name."""
    out: set[str] = set()
    for name in names:
        key = name_key(name)
        if not key:
            continue
        out.add(key)
        out.update(w for w in (name_key(p) for p in key.split()) if len(w) > 1)
    return out


def query_names(
    query: str, people: Collection[str] = (), speakers: Collection[str] = ()
) -> set[str]:
    """The people a query names, as `name_key`s: capitalised words not at a sentence's
    start that are no question word, pronoun or date word; any word that is one of the
    candidates' `people` (`name_parts`), in any case; and any capitalised word, wherever it
    stands, that is one of their `speakers` (name parts of tags, which also hold topics:
    "work" in a question is no name, "Dana" is)."""
    found: set[str] = set()
    for m in _TOKEN_RE.finditer(query):
        word = m.group(0).rstrip(".-")
        key = name_key(word)
        if len(key) < 2:
            continue
        capital = word[0].isupper() and not word.isupper()
        if key in people or (capital and key in speakers):
            found.add(key)
            continue
        if key in _NOT_NAMES or not capital:
            continue
        before = query[: m.start()]
        if before.strip() and not _SENTENCE_END.search(before):
            found.add(key)
    return found


def known_names(wanted: set[str], known: Collection[str]) -> set[str]:
    """The query's names, with the known names that one of at least 3 letters begins (a
    short form: "Mel" for Melanie) added."""
    short = [w for w in wanted if len(w) >= 3 and w not in known]
    if not short:
        return wanted
    return wanted | {k for k in known for w in short if k.startswith(w)}


def tag_names(tags: Iterable[str]) -> set[str]:
    """A memory's tags read as names (a speaker's tag, as an import of a conversation stores
    it: "dana_smith" gives dana smith, dana, smith)."""
    return name_parts(t.replace("_", " ") for t in tags)


class Window(NamedTuple):
    """The time a query is about: [start, end) in epoch ms, or, with `month` set, that month
    of any year (start and end then 0)."""

    start: int
    end: int
    month: int = 0


def _ms(d: datetime) -> int:
    return int(d.timestamp() * 1000)


def _month_window(year: int, month: int, day: int | None = None) -> Window | None:
    """That day, or that month, of that year; None for a date the calendar does not hold
    (a day past the month's end, year 0, the last day or month of year 9999, whose end
    `datetime` cannot hold)."""
    try:
        if day is not None:
            start = datetime(year, month, day, tzinfo=UTC)
            return Window(_ms(start), _ms(start + timedelta(days=1)))
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    return Window(_ms(start), _ms(end))


def _days_back(today: datetime, days: int, width: int) -> Window | None:
    """The `width` days either side of `days` before `today`; None past the calendar's
    start ("3000 years ago")."""
    try:
        centre = today - timedelta(days=days)
        return Window(_ms(centre - timedelta(days=width)), _ms(centre + timedelta(days=width + 1)))
    except (ValueError, OverflowError):
        return None


_MONTH_WORDS = "|".join(sorted(MONTHS, key=len, reverse=True))
_ISO_RE = re.compile(r"\b(\d{4})-(\d{2})(?:-(\d{2}))?\b")
# "October 13, 2023", "13 October 2023", "May 2023", "in June", "last May".
_DAY_MONTH_RE = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_WORDS})\b\.?", re.I
)
_MONTH_RE = re.compile(
    rf"\b(last\s+|this\s+|next\s+)?({_MONTH_WORDS})\b\.?(?:\s+(\d{{1,2}})(?:st|nd|rd|th)?\b)?"
    rf"(?:,?\s+(\d{{4}})\b)?",
    re.I,
)
_YEAR_RE = re.compile(r"\b(?:in|during|of|since|from|year)\s+(\d{4})\b|\b(19\d\d|20\d\d)\b", re.I)
_AGO_RE = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b", re.I
)
_RELATIVE_RE = re.compile(
    r"\b(yesterday|today|tonight|this morning|last night|(?:last|this|past)\s+"
    r"(?:week|month|year|weekend))\b",
    re.I,
)
_WEEKDAY_RE = re.compile(r"\b(?:on\s+|last\s+)(" + "|".join(WEEKDAYS) + r")\b", re.I)
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


# What every time expression holds one of: a digit, a month, a weekday or a relative word.
_ANY_TIME = re.compile(
    rf"\d|\b(?:{_MONTH_WORDS}|{'|'.join(WEEKDAYS)}|yesterday|today|tonight|morning|night"
    r"|week|weekend|month|year|ago)\b",
    re.I,
)
# "before May 2023", "after 2021", "since last June": the time up to or from the one named.
_BOUND_RE = re.compile(r"\b(before|after|since|until|till|prior\s+to|by)\s+", re.I)
# The open end of "after 2021": far enough that every memory's time is before it.
FAR_FUTURE_MS = 253_402_300_799_000  # 9999-12-31


# A time right after a bound ("before August 3, 2023") is this short; the bounds looked at
# are the first few. Both keep a hostile query (4,096 characters of "before May 3") linear.
_AFTER_BOUND_CHARS = 48
_BEFORE_BOUND_CHARS = 32
_BOUNDS_READ = 8


@functools.lru_cache(maxsize=256)  # a search asks twice: which fields to read, then boosts
def time_window(query: str, now_ms: int) -> Window | None:
    """The time a query is about, or None when it names none. The most specific expression
    wins: a date, then a month, then a year, then an expression relative to now. Right
    after "before", "until", "by" or "prior to", the window is everything up to that time;
    after "after" or "since", everything from it ("since" from its start, "after" from its
    end). A month of any year has no such side ("before June" gives None)."""
    if not _ANY_TIME.search(query):
        return None  # most queries: one scan instead of each expression's
    named = _named_window(query, now_ms)
    if named is None:
        return None
    for m in itertools.islice(_BOUND_RE.finditer(query), _BOUNDS_READ):
        rest = query[m.end() : m.end() + _AFTER_BOUND_CHARS]
        if not _DATE_START.match(rest) or _named_window(rest, now_ms) != named:
            continue  # "hosted by Nate in June 2022": the bound is not the time's
        if named.month:
            return None
        word = m.group(1).lower()
        if span := _span_before(query[max(0, m.start() - _BEFORE_BOUND_CHARS) : m.start()]):
            # "the week before August 3, 2023", "two weeks after": near that time.
            if word in ("after", "since"):
                return Window(named.end, named.end + span)
            return Window(named.start - span, named.start)
        if word == "after":
            return Window(named.end, FAR_FUTURE_MS)
        if word == "since":
            return Window(named.start, FAR_FUTURE_MS)
        return Window(0, named.start)
    return named


_DATE_START = re.compile(
    rf"(?:the\s+)?(?:\d|(?:last|this|next|yesterday|today)\b|(?:{_MONTH_WORDS})\b)", re.I
)
_SPAN_RE = re.compile(
    r"\b(?:(\d+|a|an|one|two|three|four|five|six)\s+)?(day|week|weekend|month|year)s?\s*$|"
    r"\b(" + "|".join(WEEKDAYS) + r")\s*$",
    re.I,
)


def _span_before(text: str) -> int:
    """The span (ms) that the words before a bound give ("the week", "two weeks", "the
    Sunday", "last weekend"), or 0."""
    m = _SPAN_RE.search(text)
    if m is None:
        return 0
    if m.group(3):  # a weekday: within the week
        return 7 * DAY_MS
    n = _NUMBERS.get((m.group(1) or "one").lower()) or int(m.group(1))
    unit = m.group(2).lower()
    return n * {"day": 1, "week": 7, "weekend": 7, "month": 31, "year": 366}[unit] * DAY_MS


def _named_window(query: str, now_ms: int) -> Window | None:
    """The first time named in `query`, by the order of `time_window`."""
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    if m := _ISO_RE.search(query):
        year, month = int(m.group(1)), int(m.group(2))
        day = int(m.group(3)) if m.group(3) else None
        if (window := _month_window(year, month, day)) is not None:
            return window
    if m := _DAY_MONTH_RE.search(query):
        month = MONTHS[m.group(2).lower()]
        year_m = re.compile(r"\s*,?\s*(\d{4})\b").match(query, m.end())
        day = int(m.group(1))
        if year_m and (window := _month_window(int(year_m.group(1)), month, day)) is not None:
            return window
    for m in _MONTH_RE.finditer(query):
        word = m.group(2).lower()
        if word == "may" and not (m.group(1) or m.group(4) or _after_preposition(query, m)):
            continue  # the verb: "may I ...", "she may have"
        month = MONTHS[word]
        rel = (m.group(1) or "").strip().lower()
        day = int(m.group(3)) if m.group(3) else None
        if m.group(4):
            year = int(m.group(4))
        elif rel == "last":
            year = now.year if month < now.month else now.year - 1
        elif rel in ("this", "next"):
            year = now.year if rel == "this" or month > now.month else now.year + 1
        else:
            return Window(0, 0, month)  # that month of any year
        if (window := _month_window(year, month, day)) is None:
            window = _month_window(year, month)  # "February 30, 2024": the month
        if window is not None:
            return window
        continue  # a year the calendar does not hold ("May 0000")
    if m := _YEAR_RE.search(query):
        year = int(m.group(1) or m.group(2))
        if 1900 <= year <= 2200:
            return Window(
                _ms(datetime(year, 1, 1, tzinfo=UTC)), _ms(datetime(year + 1, 1, 1, tzinfo=UTC))
            )
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if m := _AGO_RE.search(query):
        n = _NUMBERS.get(m.group(1).lower()) or int(m.group(1))
        days = n * _UNIT_DAYS[m.group(2).lower()]
        width = max(1, _UNIT_DAYS[m.group(2).lower()] // 2)
        if (window := _days_back(today, days, width)) is not None:
            return window
    if m := _RELATIVE_RE.search(query):
        words = " ".join(m.group(1).lower().split())
        if words in ("today", "tonight", "this morning"):
            return Window(_ms(today), _ms(today + timedelta(days=1)))
        if words in ("yesterday", "last night"):
            return Window(_ms(today - timedelta(days=1)), _ms(today))
        unit = words.split()[1]
        days = {"week": 7, "weekend": 3, "month": 31, "year": 366}[unit]
        if words.startswith("this"):
            return Window(_ms(today - timedelta(days=days)), _ms(today + timedelta(days=1)))
        return Window(_ms(today - timedelta(days=2 * days)), _ms(today + timedelta(days=1)))
    if m := _WEEKDAY_RE.search(query):
        back = (now.weekday() - WEEKDAYS[m.group(1).lower()]) % 7 or 7
        that = today - timedelta(days=back)
        return Window(_ms(that), _ms(that + timedelta(days=1)))
    return None


_PREPOSITION_RE = re.compile(r"\b(in|of|since|during|until|by|early|late|mid|around)\s+$", re.I)


def _after_preposition(query: str, m: re.Match[str]) -> bool:
    """Whether a preposition stands right before the match (only the few characters before
    it are read: a search from the start per match made a query of many "May"s quadratic)."""
    return bool(_PREPOSITION_RE.search(query[max(0, m.start() - _BEFORE_BOUND_CHARS) : m.start()]))


def time_match(window: Window, start_ms: int, end_ms: int | None) -> float:
    """How well a memory's time ([start, end), end None: an instant at start) fits the
    query's window: 1 inside or overlapping, falling linearly to 0 at as far again as the
    window is long (at least a week, at most a year) outside it; a memory told of an event
    a little after it happened still fits. For a month of any year: 1 in that month, less
    in the month before or after."""
    if window.month:
        month = datetime.fromtimestamp(start_ms / 1000, UTC).month
        gap = min((month - window.month) % 12, (window.month - month) % 12)
        return 1.0 if gap == 0 else 0.5 if gap == 1 else 0.0
    end = start_ms + 1 if end_ms is None else end_ms
    if end > window.start and start_ms < window.end:
        return 1.0
    gap = window.start - end if end <= window.start else start_ms - window.end
    # An open window ("before 2023") slopes over a year at most.
    slack = min(max(window.end - window.start, 7 * DAY_MS), 366 * DAY_MS)
    return max(0.0, 1.0 - gap / slack)


NAME_FIELDS = ("tags", "related_people", "content")
TIME_FIELDS = ("valid_from", "valid_until")


def fields_needed(query: str, now_ms: int, weights: RankWeights) -> tuple[str, ...]:
    """The candidates' fields `boost` reads for this query: none unless a signal is on and
    the query holds what it looks for (a capitalised word that could be a name; a time).
    Returning them makes Redis read each candidate's hash (none is sortable), so a query
    without either costs nothing more."""
    fields: tuple[str, ...] = ()
    if weights.names > 0 and _may_name(query):
        fields += NAME_FIELDS
    if weights.times > 0 and time_window(query, now_ms) is not None:
        fields += TIME_FIELDS
    return fields


def _may_name(query: str) -> bool:
    """Whether the query has a word that could be a name: a capitalised one that is no
    question word, pronoun or date word (where it stands is for `query_names` to weigh).
    A query in lower case only reads no name fields: most queries an agent writes."""
    for m in _TOKEN_RE.finditer(query):
        word = m.group(0)
        if word[0].isupper() and not word.isupper() and name_key(word) not in _NOT_NAMES:
            return True
    return False


def boost(query: str, now_ms: int, weights: RankWeights, candidates: Iterable[Candidate]) -> None:
    """Set each candidate's `boost`: `weights.names` if it carries a person the query names
    (its people, or a speaker's tag) whom its content does not name (where the content
    names them, both arms of the search see the name already: counting it again only pushes
    the other memories of that person up), plus `weights.times` times how well its time
    fits the time the query names. Candidates read with the signal fields (`SIGNAL_FIELDS`)."""
    pool = list({id(c): c for c in candidates}.values())
    names: dict[int, set[str]] = {}
    wanted: set[str] = set()
    if weights.names > 0:
        people: set[str] = set()
        speakers: set[str] = set()
        for c in pool:
            mine, tagged = name_parts(c.related_people), tag_names(c.tags)
            names[id(c)] = mine | tagged
            people |= mine
            speakers |= tagged
        wanted = known_names(query_names(query, people, speakers), people | speakers)
    said = _words_re(wanted) if wanted else None
    window = time_window(query, now_ms) if weights.times > 0 else None
    for c in pool:
        total = 0.0
        named = wanted & names[id(c)] if said is not None else set()
        if named and said is not None and not named & _said(said, c.content):
            total += weights.names
        if window is not None:
            start = c.valid_from if c.valid_from is not None else c.created_at
            total += weights.times * time_match(window, start, c.valid_until)
        c.boost = total


def _words_re(names: Iterable[str]) -> re.Pattern[str]:
    """Any of `names` as whole words, in any case."""
    words = sorted(names, key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.I)


def _said(pattern: re.Pattern[str], content: str) -> set[str]:
    return {m.group(1).lower() for m in pattern.finditer(content)}
