"""Scope rules (where `add` stores, what a read covers) and the search ranking."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.types import DEFAULT_TYPES
from handlers.ops import ranking
from handlers.ops.ranking import DAY_MS, overfetch, recency, score, similarity
from handlers.ops.scoping import read_scope, storage_workflow
from handlers.settings import RankWeights
from handlers.store.filters import read_filter
from handlers.store.record import workspace_tag

GENERAL_TYPE = DEFAULT_TYPES["user_pref"]
WORKFLOW_TYPE = DEFAULT_TYPES["context"]
NOW = 1_750_000_000_000

# --------------------------------------------------------------------------- storage scope


def test_general_type_without_scope_is_stored_as_general() -> None:
    assert storage_workflow(GENERAL_TYPE, None, "wf_1") is None


def test_workflow_type_without_scope_keeps_the_request_workflow() -> None:
    assert storage_workflow(WORKFLOW_TYPE, None, "wf_1") == "wf_1"


def test_scope_general_forces_general_for_a_workflow_type() -> None:
    assert storage_workflow(WORKFLOW_TYPE, "general", "wf_1") is None


def test_scope_workflow_forces_the_workflow_for_a_general_type() -> None:
    assert storage_workflow(GENERAL_TYPE, "workflow", "wf_1") == "wf_1"


@pytest.mark.parametrize("scope", [None, "workflow", "general"])
@pytest.mark.parametrize("type_cfg", [GENERAL_TYPE, WORKFLOW_TYPE], ids=["general", "workflow"])
def test_without_workflow_id_every_memory_is_stored_as_general(scope, type_cfg) -> None:
    assert storage_workflow(type_cfg, scope, None) is None


# --------------------------------------------------------------------------- read scope


def test_read_scope_both_with_workflow_covers_workflow_and_general() -> None:
    rs = read_scope("both", "wf_1")
    assert (rs.workflow_id, rs.general, rs.applied) == ("wf_1", True, "both")


def test_read_scope_workflow_with_workflow_covers_only_that_workflow() -> None:
    rs = read_scope("workflow", "wf_1")
    assert (rs.workflow_id, rs.general, rs.applied) == ("wf_1", False, "workflow")


def test_read_scope_general_ignores_the_workflow_id() -> None:
    rs = read_scope("general", "wf_1")
    assert (rs.workflow_id, rs.general, rs.applied) == (None, True, "general")


@pytest.mark.parametrize("scope", ["both", "workflow", "general"])
def test_read_scope_without_workflow_id_means_general_only(scope: str) -> None:
    rs = read_scope(scope, None)
    assert (rs.workflow_id, rs.general, rs.applied) == (None, True, "general")


# --------------------------------------------------------------------------- ranking


@pytest.mark.parametrize(
    ("distance", "expected"),
    [(0.0, 1.0), (0.25, 0.75), (1.0, 0.0), (1.5, 0.0), (2.0, 0.0), (-0.1, 1.0)],
)
def test_similarity_is_one_minus_distance_clamped_to_unit_interval(distance, expected) -> None:
    assert similarity(distance) == pytest.approx(expected)
    assert 0.0 <= similarity(distance) <= 1.0


def test_recency_is_one_for_a_memory_created_now() -> None:
    assert recency(NOW, NOW, 30) == 1.0


def test_recency_is_half_at_15_days() -> None:
    assert recency(NOW - 15 * DAY_MS, NOW, 30) == pytest.approx(0.5)


@pytest.mark.parametrize("days", [30, 31, 365])
def test_recency_is_zero_at_30_days_and_older(days: int) -> None:
    assert recency(NOW - days * DAY_MS, NOW, 30) == 0.0


def test_recency_of_a_memory_from_the_future_is_one() -> None:
    assert recency(NOW + DAY_MS, NOW, 30) == 1.0


def test_default_weights_are_the_protocol_weights() -> None:
    w = RankWeights()
    assert (w.similarity, w.importance, w.recency, w.recency_days) == (0.70, 0.15, 0.15, 30.0)


def test_score_is_the_weighted_sum() -> None:
    w = RankWeights()
    got = score(0.8, 0.6, NOW - 15 * DAY_MS, NOW, w)
    assert got == pytest.approx(0.70 * 0.8 + 0.15 * 0.6 + 0.15 * 0.5)


def test_score_uses_the_given_weights() -> None:
    w = RankWeights(similarity=0.0, importance=1.0, recency=0.0)
    assert score(0.9, 0.25, NOW, NOW, w) == pytest.approx(0.25)
    w = RankWeights(similarity=0.0, importance=0.0, recency=1.0, recency_days=10)
    assert score(0.9, 0.25, NOW - 5 * DAY_MS, NOW, w) == pytest.approx(0.5)


def test_score_of_a_perfect_fresh_important_memory_is_one() -> None:
    assert score(1.0, 1.0, NOW, NOW, RankWeights()) == pytest.approx(1.0)


def test_important_old_memory_outranks_unimportant_new_one_at_equal_similarity() -> None:
    w = RankWeights()
    # identity (1.0) from 20 days ago vs observation (0.3) from now:
    # 0.15*1.0 + 0.15*(1/3) = 0.2 versus 0.15*0.3 + 0.15*1.0 = 0.195.
    old_important = score(0.5, 1.0, NOW - 20 * DAY_MS, NOW, w)
    new_minor = score(0.5, 0.3, NOW, NOW, w)
    assert old_important > new_minor
    # At 25 days the old one's recency has fallen too far and the order flips.
    older_important = score(0.5, 1.0, NOW - 25 * DAY_MS, NOW, w)
    assert older_important < new_minor


def test_similarity_dominates_importance_and_recency() -> None:
    w = RankWeights()
    relevant = score(0.9, 0.0, NOW - 30 * DAY_MS, NOW, w)
    irrelevant = score(0.4, 1.0, NOW, NOW, w)
    assert relevant > irrelevant


@pytest.mark.parametrize(("limit", "expected"), [(1, 50), (10, 50), (11, 55), (100, 500)])
def test_overfetch_is_max_of_five_times_limit_and_50(limit: int, expected: int) -> None:
    assert overfetch(limit) == expected


def test_query_terms_drop_stopwords_but_never_every_word() -> None:
    from handlers.ops.terms import query_terms

    assert query_terms("When did Caroline go to the LGBTQ support group?") == [
        "caroline",
        "go",
        "lgbtq",
        "support",
        "group",
    ]
    assert query_terms("what is it") == ["what", "is", "it"]
    assert query_terms("Tea, tea and TEA") == ["tea"]


def test_linear_fusion_and_rrf() -> None:
    from handlers.ops.ranking import fuse_linear, rrf

    assert fuse_linear(0.5, 1.0, 0.9) == pytest.approx(0.55)
    assert rrf([1, 1]) == pytest.approx(2 / 61)
    assert rrf([None, 3]) == pytest.approx(1 / 63)


def test_hybrid_policy_batches_only_broad_filters() -> None:
    from handlers.store.policy import broad

    assert broad(5000, 10_000) is True
    assert broad(10, 10_000) is False
    assert broad(1000, 1200) is False  # too few to amortise batches
    assert broad(2000, 1_000_000) is False  # a 0.2% slice: batches would crawl


async def test_hybrid_policy_counts_each_filter_once_per_interval() -> None:
    from handlers.store.policy import HybridPolicy

    calls: list[str] = []

    async def count(where: str) -> int:
        calls.append(where)
        return 10_000 if where == "*" else 6000

    policy = HybridPolicy()
    first = await policy.choose("ns", "@wf:{a}", count)
    second = await policy.choose("ns", "@wf:{a}", count)

    assert first == second == "BATCHES"
    assert calls == ["@wf:{a}", "*"]


def test_text_terms_keep_indexed_words_only_and_cap_their_number() -> None:
    from handlers.ops.terms import query_terms
    from handlers.store.text import MAX_TEXT_TERMS, text_terms

    # RediSearch's index has no stopwords, so such a term would match nothing of its own.
    assert text_terms(query_terms("what is it")) == ["what"]
    assert text_terms(["_", "__init__", "x_1"]) == ["__init__", "x_1"]
    many = [f"w{i}" for i in range(100)]
    assert text_terms(many) == many[:MAX_TEXT_TERMS]


def test_text_match_intersects_each_form_with_the_filter_on_its_own() -> None:
    from redisvl.query.filter import Tag

    from handlers.store.text import text_match

    query = text_match(["zebra", "+zebr", "quokka"], Tag("general") == "1")

    # The filter as a double negation, which adds nothing to BM25 (a lone tag at weight 0
    # did); the general memories as those outside any workflow (the shorter tag list).
    assert query == (
        "(@content|tagtext:zebra -(-(-@general:{0})))"
        " | (@content|tagtext:\\+zebr -(-(-@general:{0})))"
        " | (@content|tagtext:quokka -(-(-@general:{0})))"
    )
    scoped = text_match(["zebra"], (Tag("wf") == "w1") | (Tag("general") == "1"))
    assert scoped == "(@content|tagtext:zebra -(-((@wf:{w1} | -@general:{0}))))"


def test_a_words_forms_are_read_from_ft_explain() -> None:
    from handlers.store.text import word_forms

    explained = (
        "@content:UNION {\n  @content:migration\n  @content:+migrat(expanded)\n"
        "  @content:migrat(expanded)\n}\n"
    )
    # `migration` is indexed under `+migrat` wherever it occurs: that form finds it.
    assert word_forms(explained, "migration") == ["+migrat", "migrat"]
    assert word_forms("@content:run\n", "run") == ["run"]
    # `run` is its own stem: memories holding it are not under `+run` (only `running`...).
    run = "@content:UNION {\n  @content:run\n  @content:+run(expanded)\n}\n"
    assert word_forms(run, "run") == ["run", "+run"]
    assert word_forms("", "odd") == ["odd"]  # nothing recognised: the word as it is


def test_text_match_puts_every_condition_in_each_clause_and_nothing_around_the_or() -> None:
    # An intersection around the OR makes RediSearch score one term per memory: the
    # not-superseded negation and a pool's range go into each clause, beside the filter.
    from redisvl.query.filter import Tag

    from handlers.store.text import text_match

    pool = "-@pool:[-inf (3] -@pool:[(3 +inf]"
    query = text_match(["zebra", "quokka"], Tag("general") == "1", current=True, pool=pool)

    rest = f"-(-(-@general:{{0}})) {pool} (-@superseded:{{1}})"
    assert query == f"(@content|tagtext:zebra {rest}) | (@content|tagtext:quokka {rest})"


def test_a_workspace_without_a_workflow_covers_all_of_its_memories() -> None:
    rs = read_scope("general", None, "Project Alpha")
    assert (rs.workflow_id, rs.general, rs.workspace, rs.applied) == (
        None,
        False,
        "Project Alpha",
        "both",
    )
    where = str(read_filter(None, rs))
    assert where == f"@wsh:{{{workspace_tag('Project Alpha')}}}"


@pytest.mark.parametrize(
    ("scope", "inner"),
    [
        ("both", "(@wf:{wf\\_1} | @general:{1})"),
        ("workflow", "@wf:{wf\\_1}"),
        ("general", "@general:{1}"),
    ],
)
def test_with_a_workflow_the_scope_rules_apply_within_the_workspace(scope, inner) -> None:
    where = str(read_filter(None, read_scope(scope, "wf_1", "Alpha")))
    assert where == f"(@wsh:{{{workspace_tag('Alpha')}}} {inner})"


def test_workspace_tags_are_exact_and_need_no_escaping() -> None:
    names = ["Alpha", "alpha", "Project Alpha", "a,b|c {x} @y", "Ünïcødé ✓"]
    tags = [workspace_tag(n) for n in names]
    assert len(set(tags)) == len(names)
    assert all(t.isalnum() and t == t.lower() for t in tags)


def _mmr_reference(scores: list[float], vectors: list[np.ndarray | None], w: float) -> list[int]:
    """The plain greedy MMR that `mmr_order` vectorises (the handler's former code)."""
    left = list(range(len(scores)))
    chosen: list[np.ndarray] = []
    order = []
    while left:

        def value(i: int) -> float:
            vec = vectors[i]
            if vec is None or not chosen:
                return w * scores[i]
            return w * scores[i] - (1 - w) * max(float(np.dot(vec, c)) for c in chosen)

        best = max(left, key=value)
        order.append(best)
        left.remove(best)
        if vectors[best] is not None:
            chosen.append(vectors[best])
    return order


@pytest.mark.parametrize("seed", range(40))
def test_mmr_order_matches_the_plain_greedy_algorithm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 60)), int(rng.integers(2, 16))
    weight = float(rng.choice([0.0, 0.3, 0.7, 1.0]))
    # Coarse scores and near-duplicate vectors, so ties and redundancy both decide.
    scores = sorted(np.round(rng.random(n), 1).tolist(), reverse=True)
    base = rng.normal(size=(4, dim))
    vectors: list[np.ndarray | None] = []
    for _ in range(n):
        if rng.random() < 0.15:
            vectors.append(None)
            continue
        v = base[rng.integers(4)] + 0.1 * rng.normal(size=dim)
        vectors.append((v / np.linalg.norm(v)).astype(np.float32))
    matrix = np.zeros((n, dim), np.float32)
    for i, v in enumerate(vectors):
        if v is not None:
            matrix[i] = v
    got = ranking.mmr_order(np.array(scores), matrix, weight)
    assert got == _mmr_reference(scores, vectors, weight)


def test_mmr_order_pushes_a_near_duplicate_below_a_distinct_memory() -> None:
    a = np.array([1.0, 0.0], np.float32)
    b = np.array([0.0, 1.0], np.float32)
    order = ranking.mmr_order(np.array([0.9, 0.89, 0.5]), np.stack([a, a, b]), 0.5)
    assert order == [0, 2, 1]
