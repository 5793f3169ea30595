"""The dependency arrows point one way, between the packages (contracts <- bus, contracts <-
handlers) and between the parts of handlers/. Imports are read with `ast`, so nothing is
imported to check them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "bus", "handlers")
REPO_PACKAGES = {"contracts", "bus", "handlers", "deploy"}

# The parts of handlers/ and which other parts each may import. The wiring (the service, the
# dispatch path, nats.micro's internals, logging) may import every part; no part imports it.
WIRING = {"handlers", "handlers.__main__", "handlers.service", "handlers.dispatch"}
WIRING |= {"handlers.micro", "handlers.logs", "handlers.fit", "handlers.admission"}
WIRING |= {"handlers.durable"}
# Tracing spans wrap dispatch, and the probe port reads the service's connections: wiring.
WIRING |= {"handlers.tracing", "handlers.probes"}
PARTS: dict[str, set[str]] = {
    "handlers.errors": set(),
    "handlers.embed": set(),
    "handlers.settings": {"handlers.embed"},
    "handlers.store": {"handlers.errors"},
    # Only prometheus-client: Deps carries a Metrics (typed), the wiring fills it.
    "handlers.metrics": set(),
    # The bus's JetStream streams as an erasure reads them (ids derive as the store's do).
    "handlers.streams": {"handlers.store"},
    "handlers.ops": {
        "handlers.errors",
        "handlers.settings",
        "handlers.store",
        "handlers.embed",
        "handlers.metrics",
        "handlers.streams",
    },
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


ALL_MODULES = [path for package in PACKAGES for path in modules(package)]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, name: str = "") -> set[str]:
    """Every module name a module imports, anywhere in it (relative imports resolved
    against its name, by default the one its path gives)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def repo_imports(path: Path, name: str = "") -> set[str]:
    """The top-level names of this repo's packages that a module imports."""
    return {top for n in imported(path, name) if (top := n.split(".")[0]) in REPO_PACKAGES}


def part_of(name: str) -> str | None:
    """The part of handlers/ a module belongs to (None for the wiring or outside handlers)."""
    for part in PARTS:
        if name == part or name.startswith(part + "."):
            return part
    return None


def test_the_packages_exist_and_have_modules() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file()
    assert len(ALL_MODULES) >= 10


def test_import_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import numpy\n"
        "def f():\n    from bus import errors\n    import deploy.x\n"
        "if True:\n    from contracts import y\n"
    )
    assert repo_imports(module, "handlers.m") == {"bus", "deploy", "contracts"}


@pytest.mark.parametrize("path", modules("contracts"), ids=lambda p: p.name)
def test_contracts_import_nothing_else_from_this_repo(path: Path) -> None:
    assert repo_imports(path) <= {"contracts"}


@pytest.mark.parametrize("path", modules("bus"), ids=lambda p: p.name)
def test_bus_imports_only_contracts_from_this_repo(path: Path) -> None:
    assert repo_imports(path) <= {"bus", "contracts"}


@pytest.mark.parametrize("path", modules("handlers"), ids=module_name)
def test_handlers_never_import_bus(path: Path) -> None:
    assert "bus" not in repo_imports(path)


@pytest.mark.parametrize("path", modules("handlers"), ids=module_name)
def test_every_handlers_module_is_wiring_or_in_a_known_part(path: Path) -> None:
    name = module_name(path)
    assert name in WIRING or part_of(name) is not None, (
        f"{name} is in no part of handlers/: add its folder to PARTS (with what it may import)"
    )


def violations(path: Path, name: str = "") -> list[str]:
    """The imports of a handlers/ module that its part may not make."""
    part = part_of(name or module_name(path))
    if part is None:
        return []  # the wiring may import every part
    found = []
    for target in sorted(imported(path, name)):
        if not target.startswith("handlers.") and target != "handlers":
            continue
        other = part_of(target)
        wiring = any(target == w or target.startswith(w + ".") for w in WIRING - {"handlers"})
        if wiring or other not in (None, part, *PARTS[part]):
            found.append(target)
    return found


@pytest.mark.parametrize("path", modules("handlers"), ids=module_name)
def test_handlers_parts_import_only_the_parts_below_them(path: Path) -> None:
    assert violations(path) == []


def test_the_part_rules_catch_an_upward_import_and_an_import_of_the_wiring(
    tmp_path: Path,
) -> None:
    module = tmp_path / "x.py"
    module.write_text(
        "from handlers.store.keys import record_key\n"
        "from handlers.ops.search import search\n"
        "def f():\n    from handlers.dispatch import dispatch\n"
    )
    assert violations(module, "handlers.store.x") == [
        "handlers.dispatch",
        "handlers.dispatch.dispatch",
        "handlers.ops.search",
        "handlers.ops.search.search",
    ]
    assert violations(module, "handlers.service") == []
