"""The query signals' parsing: the people a search query names and the time it is about
(handlers.ops.query_signals), and the boosts they give candidates."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from handlers.ops.query_signals import (
    DAY_MS,
    FAR_FUTURE_MS,
    NAME_FIELDS,
    TIME_FIELDS,
    Window,
    boost,
    fields_needed,
    known_names,
    name_parts,
    query_names,
    tag_names,
    time_match,
    time_window,
)
from handlers.settings import RankWeights, SettingsError, load_settings
from handlers.store.record import Candidate

# Saturday 28 November 2026, noon UTC.
NOW = int(datetime(2026, 11, 28, 12, tzinfo=UTC).timestamp() * 1000)


def ms(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("When did Caroline go to the support group?", {"caroline"}),
        ("What painting did Melanie show to Caroline?", {"melanie", "caroline"}),
        ("What did Melanie's kids paint?", {"melanie"}),
        # Sentence starts, question words, months, weekdays and acronyms are no names.
        ("What did we decide in May?", set()),
        ("Where is the LGBTQ centre? Which city?", set()),
        ("On Monday, what happened?", set()),
        ("Tell me about the deploy", set()),
        ("deploy key ABC-123 rotated", set()),
    ],
)
def test_names_from_capitals_not_at_a_sentence_start(query: str, names: set[str]) -> None:
    assert query_names(query) == names


def test_known_people_match_in_any_case_and_at_the_start() -> None:
    assert query_names("dana's favourite food?", people={"dana"}) == {"dana"}
    assert query_names("Dana likes what?", people={"dana"}) == {"dana"}


def test_speaker_tags_match_only_capitalised() -> None:
    # Tags hold topics too: "work" in a question is not the speaker "work".
    assert query_names("Work on what?", speakers={"work"}) == {"work"}
    assert query_names("what about work?", speakers={"work"}) == set()
    assert query_names("Caroline said what?", speakers={"caroline"}) == {"caroline"}


def test_name_parts_and_tags_give_first_and_last_names() -> None:
    assert name_parts(["Dana Smith"]) == {"dana smith", "dana", "smith"}
    assert tag_names(["dana_smith", "work"]) == {"dana smith", "dana", "smith", "work"}


def test_a_short_form_reaches_the_known_name_it_begins() -> None:
    assert known_names({"mel"}, {"melanie", "caroline"}) == {"mel", "melanie"}
    # Under 3 letters is no short form.
    assert known_names({"ca"}, {"caroline"}) == {"ca"}


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("What did she paint on October 13, 2023?", Window(ms(2023, 10, 13), ms(2023, 10, 14))),
        ("What happened on 13 October 2023?", Window(ms(2023, 10, 13), ms(2023, 10, 14))),
        ("What setback came in October 2023?", Window(ms(2023, 10, 1), ms(2023, 11, 1))),
        ("the release of 2024-03-05", Window(ms(2024, 3, 5), ms(2024, 3, 6))),
        ("the plan for 2024-03", Window(ms(2024, 3, 1), ms(2024, 4, 1))),
        ("How often at the beach in 2023?", Window(ms(2023, 1, 1), ms(2024, 1, 1))),
        # A month alone: that month of any year.
        ("When did Melanie go camping in June?", Window(0, 0, 6)),
        # Relative to now (28 November 2026).
        ("What did we agree last May?", Window(ms(2026, 5, 1), ms(2026, 6, 1))),
        ("What did we agree last December?", Window(ms(2025, 12, 1), ms(2026, 1, 1))),
        ("What broke yesterday?", Window(ms(2026, 11, 27), ms(2026, 11, 28))),
        ("what did I say today", Window(ms(2026, 11, 28), ms(2026, 11, 29))),
        ("the call on Monday", Window(ms(2026, 11, 23), ms(2026, 11, 24))),
        ("the call last Saturday", Window(ms(2026, 11, 21), ms(2026, 11, 22))),
        ("the outage 3 days ago", Window(ms(2026, 11, 24), ms(2026, 11, 27))),
        # Up to, or from, the time named.
        ("What did she do before May 2023?", Window(0, ms(2023, 5, 1))),
        ("where did they live prior to 2020", Window(0, ms(2020, 1, 1))),
        ("What changed after October 2023?", Window(ms(2023, 11, 1), FAR_FUTURE_MS)),
        ("what happened since 2024-03-05", Window(ms(2024, 3, 5), FAR_FUTURE_MS)),
        # A span before the bound: near the time named, on that side.
        (
            "What did John do the week before August 3, 2023?",
            Window(ms(2023, 7, 27), ms(2023, 8, 3)),
        ),
        (
            "the puppy she got two weeks before August 11, 2023",
            Window(ms(2023, 7, 28), ms(2023, 8, 11)),
        ),
        ("on the Sunday before October 25, 2022", Window(ms(2022, 10, 18), ms(2022, 10, 25))),
        ("the day after 2024-03-05", Window(ms(2024, 3, 6), ms(2024, 3, 7))),
        # "by" that is no bound of the time.
        ("the party hosted by Nate in June 2022", Window(ms(2022, 6, 1), ms(2022, 7, 1))),
    ],
)
def test_time_windows(query: str, window: Window) -> None:
    assert time_window(query, NOW) == window


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what Dana likes?",  # the verb
        "Which deploy key did we rotate?",
        "port 8080 is open",  # no year
        "When did Caroline go to the support group?",  # asks for a time, names none
        "What did Melanie do after the road trip?",  # relative to an event: not read
        "What did we plan before June?",  # a month of any year has no before
    ],
)
def test_no_time_named(query: str) -> None:
    assert time_window(query, NOW) is None


def test_a_long_query_reads_the_same_time_as_its_first_expression() -> None:
    # Only a few bounds are looked at, and only the words near each (a hostile query of
    # thousands of them stays linear): the answers are those of the first expression.
    first = time_window("What did she do before May 3, 2023?", NOW)
    assert first == Window(0, ms(2023, 5, 3))
    assert time_window(("before May 3, 2023 " * 300)[:4096], NOW) == first
    assert time_window(("May " * 1000) + "in 2022", NOW) == Window(ms(2022, 1, 1), ms(2023, 1, 1))
    assert time_window("the week " * 400 + "before August 3, 2023", NOW) == Window(
        ms(2023, 7, 27), ms(2023, 8, 3)
    )


def test_time_match_inside_near_and_far() -> None:
    october = Window(ms(2023, 10, 1), ms(2023, 11, 1))
    assert time_match(october, ms(2023, 10, 15), None) == 1.0
    # A window that overlaps counts fully; one ending at the start does not overlap.
    assert time_match(october, ms(2023, 9, 1), ms(2023, 10, 2)) == 1.0
    # Told a little after: a 31-day window gives a 31-day slope.
    assert time_match(october, ms(2023, 11, 16), None) == pytest.approx(1 - 15 / 31)
    assert time_match(october, ms(2024, 3, 1), None) == 0.0
    # A day's window still slopes over a week.
    day = Window(ms(2023, 10, 13), ms(2023, 10, 14))
    assert time_match(day, ms(2023, 10, 14) + 3 * DAY_MS + 1, None) == pytest.approx(4 / 7, 0.01)


def test_time_match_of_an_open_window_slopes_over_a_year_at_most() -> None:
    before = Window(0, ms(2023, 5, 1))
    assert time_match(before, ms(2019, 1, 1), None) == 1.0
    assert time_match(before, ms(2023, 11, 1), None) == pytest.approx(1 - 184 / 366)
    assert time_match(before, ms(2024, 6, 1), None) == 0.0


def test_time_match_of_a_month_of_any_year() -> None:
    june = Window(0, 0, 6)
    assert time_match(june, ms(2019, 6, 30), None) == 1.0
    assert time_match(june, ms(2023, 7, 2), None) == 0.5
    assert time_match(june, ms(2023, 1, 2), None) == 0.0


# --------------------------------------------------------------------------- boosts


def candidate(cid: str, **fields: object) -> Candidate:
    return Candidate(id=cid, importance=0.5, created_at=NOW, expires_at=NOW * 2, **fields)  # type: ignore[arg-type]


def test_boost_adds_the_weights_of_the_signals_that_fit() -> None:
    caroline = candidate("a", tags=("caroline",), valid_from=ms(2023, 10, 13, 9))
    melanie = candidate("b", related_people=["Melanie"], valid_from=ms(2023, 5, 8))
    other = candidate("c")
    weights = RankWeights(names=0.1, times=0.05)
    boost("What did Caroline paint on October 13, 2023?", NOW, weights, [caroline, melanie, other])
    assert caroline.boost == pytest.approx(0.15)
    assert melanie.boost == 0.0
    assert other.boost == 0.0
    boost("What did Mel paint?", NOW, weights, [caroline, melanie, other])
    assert (caroline.boost, melanie.boost) == (0.0, pytest.approx(0.1))


def test_a_name_the_content_says_already_is_not_counted_again() -> None:
    said = candidate("a", tags=("caroline",), content="Caroline went to a pottery class")
    unsaid = candidate("b", related_people=["Caroline"], content="went to a pottery class")
    other = candidate("c", related_people=["Melanie"], content="Caroline's friend paints")
    boost("What class did Caroline take?", NOW, RankWeights(names=0.1), [said, unsaid, other])
    assert (said.boost, unsaid.boost, other.boost) == (0.0, 0.1, 0.0)


def test_boost_is_nothing_when_off() -> None:
    caroline = candidate("a", tags=("caroline",), valid_from=ms(2023, 10, 13))
    boost("What did Caroline paint on October 13, 2023?", NOW, RankWeights(times=0), [caroline])
    assert caroline.boost == 0.0


def test_fields_are_read_only_for_a_signal_that_is_on_and_has_something_to_match() -> None:
    times = RankWeights(times=0.2)
    assert fields_needed("What happened in October 2023?", NOW, times) == TIME_FIELDS
    assert fields_needed("What happened at the offsite?", NOW, times) == ()
    off = RankWeights(times=0.0)
    assert fields_needed("What happened in October 2023?", NOW, off) == ()
    both = RankWeights(names=0.1, times=0.2)
    assert fields_needed("Dana in May 2023", NOW, both) == NAME_FIELDS + TIME_FIELDS
    # Names are looked for only in a query with a capitalised word that could be one.
    assert fields_needed("What did we decide in May?", NOW, both) == TIME_FIELDS
    assert fields_needed("what does dana like", NOW, both) == ()


def test_the_signals_weights_come_from_their_variables() -> None:
    settings = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_RANK_TIMES": "0"})
    assert (settings.weights.times, settings.weights.names) == (0.0, 0.0)
    settings = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_RANK_NAMES": "0.05"})
    assert (settings.weights.times, settings.weights.names) == (0.2, 0.05)
    with pytest.raises(SettingsError, match="MEMBUS_RANK_NAMES='-1'"):
        load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_RANK_NAMES": "-1"})


@pytest.mark.parametrize(
    "query",
    [
        "after 9999-12-31",  # the day after the calendar's last
        "since 9999-12",
        "what happened on 0000-01-01",  # year 0
        "in December 9999",
        "May 0000",
        "December 31, 9999",
        "1 January 0000",
        "3000 years ago",  # before year 1
        "99999999999999999999 days ago",  # more days than a timedelta holds
    ],
)
def test_a_date_the_calendar_cannot_hold_names_no_time(query: str) -> None:
    # These raised OverflowError / ValueError, an internal error on every search and recall.
    assert time_window(query, NOW) is None


def test_a_date_out_of_range_gives_way_to_the_next_expression() -> None:
    assert time_window("not 9999-12-31 but June 2022", NOW) == Window(
        ms(2022, 6, 1), ms(2022, 7, 1)
    )
