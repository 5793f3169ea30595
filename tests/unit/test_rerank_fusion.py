"""The second opinion's pure parts: z-score fusion, the benchmark's cross-validation split,
its settings, and the e5 model's prefixes (the `e5` extra, which `make test` installs)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from handlers.embed.e5 import E5Model, e5_missing
from handlers.ops.rerank import fused_order, zscores
from handlers.settings import SettingsError, load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from locomo import Asked, Stage, cv_folds, first_hit, recall_mrr, tune


def test_zscores_centre_and_scale_and_flat_values_give_zeros() -> None:
    z = zscores([1.0, 2.0, 3.0])
    assert z.mean() == pytest.approx(0.0)
    assert z.std() == pytest.approx(1.0)
    assert list(zscores([0.5, 0.5, 0.5])) == [0.0, 0.0, 0.0]
    assert zscores([]).size == 0


def test_weight_zero_keeps_the_first_order_and_a_large_one_follows_the_second() -> None:
    first = [0.9, 0.8, 0.7, 0.6]
    second = [0.1, 0.2, 0.9, 0.3]
    assert fused_order(first, second, 0.0) == [0, 1, 2, 3]
    assert fused_order(first, second, 100.0) == [2, 3, 1, 0]


def test_fusion_adds_the_z_scores_so_a_scale_does_not_matter() -> None:
    first = [0.9, 0.5, 0.4]
    second = [0.80, 0.81, 0.95]
    # z(first) = [1.39, -0.46, -0.93]; z(second) = [-0.78, -0.63, 1.41]: sums 0.61, -1.09, 0.48.
    assert fused_order(first, second, 1.0) == [0, 2, 1]
    assert fused_order(first, [10 * s for s in second], 1.0) == [0, 2, 1]


def test_equal_fused_scores_keep_the_first_stage_order() -> None:
    assert fused_order([1.0, 1.0, 1.0], [0.3, 0.3, 0.3], 1.0) == [0, 1, 2]


def test_each_conversation_is_scored_once_by_weights_tuned_on_the_others() -> None:
    folds = cv_folds(["c", "a", "b", "a", "c"])
    assert [test for _, test in folds] == ["a", "b", "c"]
    for train, test in folds:
        assert test not in train
        assert sorted([*train, test]) == ["a", "b", "c"]


def test_hits_count_the_first_memory_citing_an_evidence_turn_within_ten() -> None:
    dias = [["D1:1"], ["D2:3", "D2:4"], ["D2:4"]] + [["D9:9"]] * 10
    assert first_hit(dias, {"D2:4"}) == 2
    assert first_hit(dias, {"D7:7"}) is None
    assert first_hit([["D0:0"]] * 10 + [["D1:1"]], {"D1:1"}) is None
    assert recall_mrr([1, None, 2, None]) == (0.5, 0.375)


def test_tuning_picks_the_weight_that_ranks_the_training_questions_best() -> None:
    def ask(dias: list[list[str]]) -> Asked:
        return Asked("c", "q", {"D1:1"}, 1, True, dias=dias)

    # Weight 1 reverses the candidates: the evidence is last in the first stage's order.
    stage = Stage(
        {},
        "MEMBUS_X",
        [0.0, 1.0, 2.0],
        lambda asked: None,
        lambda a, w: list(range(len(a.dias)))[:: -1 if w == 1.0 else 1],
    )
    assert tune(stage, [ask([["D0:0"], ["D1:1"]]), ask([["D0:0"]] * 3 + [["D1:1"]])]) == 1.0
    # Nothing to gain: the first weight tried.
    assert tune(stage, [ask([["D1:1"], ["D1:1"]])]) == 0.0


def test_rerank_settings_and_a_clear_error_for_a_bad_value() -> None:
    s = load_settings({"MEMBUS_RERANK": "e5", "MEMBUS_RERANK_WEIGHT": "0.5"})
    assert (s.rerank, s.rerank_depth, s.rerank_weight) == ("e5", 30, 0.5)
    assert load_settings({}).rerank == "off"
    with pytest.raises(SettingsError, match="MEMBUS_RERANK="):
        load_settings({"MEMBUS_RERANK": "cohere"})


def test_e5_prefixes_queries_and_passages_and_batches_like_single_texts() -> None:
    assert e5_missing() is None, "make test installs the e5 extra"
    model = E5Model()
    texts = ["Melanie painted a lake sunrise last year.", "Caroline went to a support group."]
    passages = model.passages(texts)
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    assert np.allclose(passages[1], model.passages([texts[1]])[0], atol=1e-6)
    query = model.queries(["When did Melanie paint a sunrise?"])[0]
    # The prefix changes the vector: a query is not embedded as a passage.
    assert float(np.dot(query, model.passages(["When did Melanie paint a sunrise?"])[0])) < 0.999
    assert float(passages[0] @ query) > float(passages[1] @ query)
    # A NUL byte would end the engine's C string early.
    assert not np.allclose(model.passages(["a\x00b c d"])[0], model.passages(["a"])[0])
