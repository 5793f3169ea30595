"""bench/locomo.py's own parts: reading a conversation with its sessions' dates, the stores'
rewrites, and the alpha stage's offline order (it keeps what the query signals added)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from locomo import STAGES, Asked, load, session_date, unnamed


def test_session_dates_read_as_utc_and_an_unreadable_one_is_none() -> None:
    assert session_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert session_date("10:37 am on 27 Jun, 2023") == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)
    assert session_date("sometime in May") is None
    assert session_date(None) is None


def test_load_gives_each_observation_its_session_and_date(tmp_path: Path) -> None:
    conv = {
        "conversation": {
            "session_2_date_time": "7:55 pm on 9 June, 2023",
            "session_2_observation": {
                "Caroline": [["Caroline went to a support group.", "D2:3"]],
                "Mel": [["Mel paints.", ["D2:5", "D2:6"]]],
            },
        },
        "qa": [
            {"question": "When?", "evidence": ["D2:3"], "category": 2},
            {"question": "Unanswerable", "evidence": [], "category": 5},
        ],
    }
    path = tmp_path / "conv-1.json"
    path.write_text(json.dumps(conv))
    facts, questions = load(path)
    assert [(f.speaker, f.dia, f.session) for f in facts] == [
        ("Caroline", ["D2:3"], 2),
        ("Mel", ["D2:5", "D2:6"], 2),
    ]
    assert {f.date for f in facts} == {datetime(2023, 6, 9, 19, 55, tzinfo=UTC)}
    assert questions == [("When?", {"D2:3"}, 2)]  # category 5 left out


def test_the_anon_store_takes_the_speakers_name_out_of_the_content() -> None:
    said = "Caroline's friends met Caroline; Carolines is another word."
    assert unnamed(said, "Caroline") == "their friends met they; Carolines is another word."


def test_alpha_order_redoes_the_fusion_and_keeps_the_boost() -> None:
    # Candidate 0: the better cosine; candidate 1: the better BM25 and a time boost.
    a = Asked("c", "q", set(), 1, True, similarity=[0.9, 0.5], text=[0.0, 1.0])
    w = 0.7  # the default similarity weight
    plain = [w * 0.8 * 0.9, w * (0.8 * 0.5 + 0.2)]  # scores at the default alpha, 0.8
    a.scores = list(plain)
    order = STAGES["alpha"].order
    assert order is not None
    assert order(a, 0.8) == [0, 1]  # 0.504 against 0.42
    assert order(a, 0.5) == [1, 0]  # BM25 counts for more
    a.scores = [plain[0], plain[1] + 0.3]  # the time signal lifts candidate 1
    assert order(a, 0.8) == [1, 0]
    assert order(a, 1.0) == [1, 0]  # 0.63 against 0.7 * 0.5 + 0.3: the boost stays
    a.scores = [plain[0], plain[1] + 0.2]
    assert order(a, 1.0) == [0, 1]  # 0.63 against 0.7 * 0.5 + 0.2
