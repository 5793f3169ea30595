"""`make system-tools` on a machine without the tools, without a fresh machine: the tools
are hidden from PATH and apt runs in simulation (`apt-get -s`), so apt resolves the real
package set of this machine's sources and says whether it could install it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = {"chromium", "tmux", "node", "nodejs", "npm", "ip", "iptables"}


def bin_without(tmp: Path, hidden: set[str], fakes: dict[str, str] | None = None) -> Path:
    """A PATH directory with every command of this PATH but `hidden`, and `fakes` (scripts)."""
    bindir = tmp / "bin"
    bindir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            link = bindir / name
            if name in hidden or link.exists():
                continue
            link.symlink_to(os.path.join(directory, name))
    for name, script in (fakes or {}).items():
        (bindir / name).unlink(missing_ok=True)
        (bindir / name).write_text("#!/bin/sh\n" + script)
        (bindir / name).chmod(0o755)
    return bindir


def run_make(bindir: Path, tmp: Path, apt: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": str(bindir),
        "HOME": str(tmp),
        "MEMBUS_APT": apt,
        "MEMBUS_APT_UPDATE": "0",
        "MEMBUS_LIB_DIRS": str(tmp / "no-libs"),
        "MEMBUS_SBIN_DIRS": str(tmp / "sbin"),
        "LC_ALL": "C",
    }
    return subprocess.run(
        ["make", "-s", "system-tools"], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_every_tool_missing_resolves_without_broken_packages(tmp_path: Path) -> None:
    bindir = bin_without(tmp_path, HIDDEN)
    done = run_make(bindir, tmp_path, "apt-get -s")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    asked = next(line for line in out.splitlines() if line.startswith("system-tools:"))
    for package in ("chromium", "tmux", "libjemalloc2", "nodejs", "iproute2", "iptables"):
        assert package in asked.split(), asked
    assert "broken packages" not in out and "E:" not in out, out


def test_npm_is_asked_for_only_where_nodejs_does_not_carry_it(tmp_path: Path) -> None:
    # apt-cache answers as Debian's own nodejs (no npm inside) or NodeSource's (npm inside);
    # the fake apt-get records what it is asked.
    for provides, wants_npm in (("", True), ("Provides: nodejs-dev, npm\n", False)):
        tmp = tmp_path / ("debian" if wants_npm else "nodesource")
        tmp.mkdir()
        stanza = f"Package: nodejs\\nVersion: 20\\n{provides.replace(chr(10), chr(92) + 'n')}"
        record = tmp / "asked"
        bindir = bin_without(
            tmp,
            HIDDEN,
            fakes={
                "apt-cache": f'printf "{stanza}"\n',
                "fake-apt": f'echo "$@" >> {record}\n',
            },
        )
        done = run_make(bindir, tmp, "fake-apt")
        assert done.returncode == 0, done.stderr
        install = record.read_text().split()
        assert install[:1] == ["install"]
        assert ("npm" in install) is wants_npm, install
        assert "nodejs" in install


def test_nothing_is_asked_where_every_tool_is_there(tmp_path: Path) -> None:
    fakes = {name: "exit 0\n" for name in ("chromium", "tmux", "node", "npm")}
    record = tmp_path / "asked"
    fakes["fake-apt"] = f'echo "$@" >> {record}\n'
    bindir = bin_without(tmp_path, HIDDEN, fakes)
    # ip and iptables where Debian puts them, off a user's PATH: found all the same.
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    for name in ("ip", "iptables"):
        (sbin / name).write_text("#!/bin/sh\nexit 0\n")
        (sbin / name).chmod(0o755)
    libs = tmp_path / "no-libs" / "x86_64-linux-gnu"
    libs.mkdir(parents=True)
    (libs / "libjemalloc.so.2").touch()
    done = run_make(bindir, tmp_path, "fake-apt")
    assert done.returncode == 0, done.stderr
    assert not record.exists()
