"""Plot Redis ms per request against the number of memories, before and after, as SVG.

Reads two JSON files written by `bench/store_cost.py --json` and draws one line per
operation (dashed: before, solid: after) on log scales, with no plotting library:

    .venv/bin/python bench/plot_cost.py before.json after.json -o docs/store_cost.svg
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Operations drawn, in the legend's order, with their colours.
LINES = {
    "search, default (hybrid), from a workflow": ("hybrid search", "#d62728"),
    "search, text": ("text search", "#ff7f0e"),
    "search, vector": ("vector search", "#1f77b4"),
    "add, then describe of its workflow": ("add + describe", "#2ca02c"),
    "list 20, from a workflow": ("list 20", "#9467bd"),
    "recall, one turn": ("recall turn", "#8c564b"),
    "raw KNN, unfiltered (redisvl, same index)": ("raw KNN (floor)", "#7f7f7f"),
}
W, H = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 60


def _scale(lo: float, hi: float, a: float, b: float) -> Callable[[float], float]:
    span = math.log10(hi) - math.log10(lo)
    return lambda v: a + (math.log10(v) - math.log10(lo)) / span * (b - a)


def plot(before: dict[str, Any], after: dict[str, Any], title: str) -> str:
    sizes = sorted({int(s) for run in (before, after) for s in run["sizes"]})
    values = [
        v for run in (before, after) for name in LINES for v in run["ms"].get(name, {}).values()
    ]
    lo = 10 ** math.floor(math.log10(max(min(values), 0.01)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    x = _scale(sizes[0], sizes[-1], LEFT, W - RIGHT)
    y = _scale(lo, hi, H - BOTTOM, TOP)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2 - 100}" y="22" font-size="14">{title}</text>',
    ]
    decade = lo
    while decade <= hi * 1.0001:
        for m in (1, 2, 5):
            v = decade * m
            if lo <= v <= hi:
                out.append(
                    f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                    'stroke="#ddd"/>'
                )
                out.append(
                    f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>'
                )
        decade *= 10
    for s in sizes:
        out.append(
            f'<line x1="{x(s):.1f}" x2="{x(s):.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{x(s):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{s:,}</text>')
    out.append(
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 15}" text-anchor="middle">'
        "memories in the namespace</text>"
    )
    out.append(
        f'<text x="18" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 18 {(TOP + H - BOTTOM) / 2})">Redis ms per request</text>'
    )
    for i, (name, (label, colour)) in enumerate(LINES.items()):
        for run, dash in ((before, "6,4"), (after, "")):
            pts = sorted((int(s), v) for s, v in run["ms"].get(name, {}).items() if v > 0)
            if len(pts) < 2:
                continue
            path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
                f'stroke-dasharray="{dash}"/>'
            )
        ly = TOP + 10 + i * 20
        out.append(
            f'<line x1="{W - RIGHT + 15}" x2="{W - RIGHT + 40}" y1="{ly}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{W - RIGHT + 46}" y="{ly + 4}">{label}</text>')
    ly = TOP + 10 + len(LINES) * 20 + 10
    out.append(
        f'<line x1="{W - RIGHT + 15}" x2="{W - RIGHT + 40}" y1="{ly}" y2="{ly}" stroke="#000" '
        'stroke-dasharray="6,4"/>'
    )
    out.append(f'<text x="{W - RIGHT + 46}" y="{ly + 4}">before</text>')
    out.append(
        f'<line x1="{W - RIGHT + 15}" x2="{W - RIGHT + 40}" y1="{ly + 18}" y2="{ly + 18}" '
        'stroke="#000"/>'
    )
    out.append(f'<text x="{W - RIGHT + 46}" y="{ly + 22}">after</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("-o", "--out", default="docs/store_cost.svg")
    p.add_argument("--title", default="Redis's own time per request (INFO commandstats)")
    args = p.parse_args()
    before = json.loads(Path(args.before).read_text())
    after = json.loads(Path(args.after).read_text())
    Path(args.out).write_text(plot(before, after, args.title))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
