"""The dependency arrows point one way (contracts <- bus, contracts <- handlers), and modules
stay small. Imports are read with `ast`, so nothing is imported to check them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "bus", "handlers")
REPO_PACKAGES = {"contracts", "bus", "handlers", "deploy"}
MAX_LINES = 400


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


ALL_MODULES = [path for package in PACKAGES for path in modules(package)]


def repo_imports(path: Path, own_package: str) -> set[str]:
    """The top-level names of this repo's packages that a module imports (anywhere in it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # A relative import stays inside the module's own package.
            names = [own_package] if node.level else [node.module or ""]
        else:
            continue
        found.update(top for name in names if (top := name.split(".")[0]) in REPO_PACKAGES)
    return found


def test_the_packages_exist_and_have_modules() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file()
    assert len(ALL_MODULES) >= 10


def test_import_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import numpy\n"
        "def f():\n    from bus import errors\n    import deploy.x\n"
        "if True:\n    from . import y\n"
    )
    assert repo_imports(module, "handlers") == {"bus", "deploy", "handlers"}


@pytest.mark.parametrize("path", modules("contracts"), ids=lambda p: p.name)
def test_contracts_import_nothing_else_from_this_repo(path: Path) -> None:
    assert repo_imports(path, "contracts") <= {"contracts"}


@pytest.mark.parametrize("path", modules("bus"), ids=lambda p: p.name)
def test_bus_imports_only_contracts_from_this_repo(path: Path) -> None:
    assert repo_imports(path, "bus") <= {"bus", "contracts"}


@pytest.mark.parametrize("path", modules("handlers"), ids=lambda p: p.name)
def test_handlers_never_import_bus(path: Path) -> None:
    assert "bus" not in repo_imports(path, "handlers")


# Known oversize modules, reported rather than fixed here; strict, so a fix shows up.
OVERSIZE: set[str] = set()


def _line_param(path: Path) -> object:
    rel = path.relative_to(ROOT).as_posix()
    marks = (
        [pytest.mark.xfail(strict=True, reason=f"{rel} is over {MAX_LINES} lines; split it")]
        if rel in OVERSIZE
        else []
    )
    return pytest.param(path, id=rel, marks=marks)


@pytest.mark.parametrize("path", [_line_param(p) for p in ALL_MODULES])
def test_module_is_under_400_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines < MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
