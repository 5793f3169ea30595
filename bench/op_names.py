"""Where each operation's name is spelled, meaning the operation, in contracts/ and handlers/
(issue 36: at most 2 files each, e.g. contracts/operations.py and the op's module).

    python bench/op_names.py                 # this checkout, handlers/store aside
    python bench/op_names.py --store         # handlers/store counted too
    python bench/op_names.py --root DIR      # another checkout (an exported commit)

Counted: a string that is exactly an operation's name (docstrings aside), and the name of a
function bound with `@handles(...)` where it is defined or imported. Not counted, because
there the word means something else: values of a `Literal[...]` (and a Literal field's
default), class keywords (`tag=`),
keyword arguments other than `name=` (`trimmed="people"`, `action="add"`), a string compared
with an attribute (`req.mode == "compact"`), a tuple or list that holds other strings too
(field names), attributes (`store.add`), other identifiers, comments and prose.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def operations(root: Path) -> list[str]:
    """The names of contracts/operations.py's TABLE, read without importing it."""
    tree = ast.parse((root / "contracts" / "operations.py").read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Operation":
            for kw in node.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    names.append(str(kw.value.value))
    return names


def _skipped_strings(tree: ast.AST, ops: set[str]) -> set[int]:
    """The string constants whose text means something other than an operation."""
    skip: set[int] = set()

    def constants(node: ast.AST) -> list[ast.Constant]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Constant)]

    for node in ast.walk(tree):
        scope = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        first = node.body[0] if isinstance(node, scope) and node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))  # a docstring
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            skip |= {id(c) for c in constants(node.slice)}
        literal = isinstance(node, ast.AnnAssign) and any(
            getattr(n, "id", None) == "Literal" for n in ast.walk(node.annotation)
        )
        if isinstance(node, ast.AnnAssign) and literal and node.value is not None:
            skip |= {id(c) for c in constants(node.value)}  # a Literal field's default
        if isinstance(node, ast.ClassDef):
            skip |= {id(c) for kw in node.keywords for c in constants(kw.value)}
        if isinstance(node, ast.Call):
            skip |= {id(c) for kw in node.keywords if kw.arg != "name" for c in constants(kw.value)}
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            attrs = [s for s in sides if isinstance(s, ast.Attribute)]
            if any(a.attr not in ("name", "op") for a in attrs):
                skip |= {id(s) for s in sides if isinstance(s, ast.Constant)}
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            texts = [
                e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            if any(e.value not in ops for e in texts):
                skip |= {id(e) for e in texts}
    return skip


def spelled(path: Path, ops: list[str]) -> dict[str, int]:
    """Operation name -> how many times `path` spells it, meaning the operation."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set(ops)
    # A handler function's identifier: the name, or name_ where it would shadow a builtin.
    idents = {op: op for op in ops} | {op + "_": op for op in ops}
    skip = _skipped_strings(tree, names)
    found: dict[str, int] = {}

    def hit(op: str) -> None:
        found[op] = found.get(op, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in names:
                hit(node.value)
        elif isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name in idents:
            bound = any(
                isinstance(d, ast.Call) and getattr(d.func, "id", None) == "handles"
                for d in node.decorator_list
            )
            if bound:
                hit(idents[node.name])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("handlers.ops"):
            for alias in node.names:
                if alias.name in idents:
                    hit(idents[alias.name])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--store", action="store_true", help="count handlers/store too")
    args = parser.parse_args()
    root: Path = args.root.resolve()
    ops = operations(root)
    files = sorted([*root.glob("contracts/**/*.py"), *root.glob("handlers/**/*.py")])
    if not args.store:
        files = [f for f in files if "handlers/store/" not in f.relative_to(root).as_posix()]
    where: dict[str, list[str]] = {op: [] for op in ops}
    for path in files:
        for op, n in spelled(path, ops).items():
            where[op].append(f"{path.relative_to(root).as_posix()}({n})")
    for op in ops:
        print(f"{op:18} {len(where[op])}  {' '.join(where[op])}")
    print(f"most files for one operation: {max(len(w) for w in where.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
