"""LoCoMo with plain cosine, offline (no bus): where the bus's vector mode loses against
exact cosine (issue 38). Scores every question of categories 1-4 against every observation
of its conversation, exactly, with MiniLM fp32 and int8 query vectors, and e5 if installed;
hits counted as bench/locomo.py counts them, over all questions and over the answerable
ones (some observation points at one of their evidence turns).

    python bench/locomo_cosine.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo import DATA, load, summary


def ranks_of(sims: np.ndarray, dia: list[list[str]], evidence: list[set[str]]) -> list[int | None]:
    out: list[int | None] = []
    for row, ev in zip(sims, evidence, strict=True):
        order = np.argsort(-row, kind="stable")[:10]
        out.append(next((i for i, j in enumerate(order, 1) if ev & set(dia[j])), None))
    return out


def main() -> None:
    from handlers.embed.minilm import MiniLMEmbedder

    fp32 = MiniLMEmbedder(quantize=False, query_quantize=False)
    int8 = MiniLMEmbedder(quantize=False, query_quantize=True)
    try:
        from handlers.embed.e5 import E5Model

        e5: E5Model | None = E5Model()
    except ImportError:
        e5 = None
    results: dict[str, list[int | None]] = {}
    answerable: list[bool] = []  # some observation points at an evidence turn
    for path in sorted(DATA.glob("conv-*.json")):
        facts, questions = load(path)
        texts = [f for f, _, _ in facts]
        dia = [ids for _, _, ids in facts]
        qs = [q for q, _, _ in questions]
        ev = [e for _, e, _ in questions]
        pointed = {d for ids in dia for d in ids}
        answerable += [bool(e & pointed) for e in ev]
        stored = fp32.encode(texts)
        for name, queries in (
            ("minilm fp32 queries", fp32.encode_queries(qs)),
            ("minilm int8 queries", np.stack([int8.encode_queries([q])[0] for q in qs])),
        ):
            results.setdefault(name, []).extend(ranks_of(queries @ stored.T, dia, ev))
        if e5 is not None:
            p = e5.passages(texts)
            q = e5.queries(qs)
            results.setdefault("e5", []).extend(ranks_of(q @ p.T, dia, ev))
    n_ans = sum(answerable)
    print(f"{len(answerable)} questions, {n_ans} answerable (ans: over those alone)")
    print(
        f"{'exact cosine':<24}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR@10':>8}"
        f"{'ans R@10':>9}{'ans MRR':>8}"
    )
    for name, ranks in results.items():
        r1, r5, r10, mrr = summary(ranks)
        _, _, a10, amrr = summary([r for r, a in zip(ranks, answerable, strict=True) if a])
        print(f"{name:<24}{r1:>7.3f}{r5:>7.3f}{r10:>7.3f}{mrr:>8.3f}{a10:>9.3f}{amrr:>8.3f}")


if __name__ == "__main__":
    main()
