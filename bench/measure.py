"""What every bench measures with: percentiles, a process's CPU and memory from /proc, and
Redis's own time per command (INFO commandstats, which does not depend on the core count).

The benches run as scripts (`python bench/<name>.py`), so they import this as `measure`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import redis.asyncio as aioredis

CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`th percentile (0..100) of `samples`, interpolated between the nearest ones
    (statistics' inclusive method); one sample is its own percentile, none is nan."""
    if len(samples) < 2:
        return samples[0] if samples else math.nan
    if q >= 100:
        return max(samples)
    if q <= 0:
        return min(samples)
    cuts = statistics.quantiles(samples, n=1000, method="inclusive")
    return cuts[max(0, min(len(cuts) - 1, round(q * 10) - 1))]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def proc_cpu_ms(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads, live and ended) or of one thread, in ms."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    raw = Path(path).read_bytes()
    # The command name (field 2) may hold spaces or ')': fields resume after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / CLK_TCK  # fields 14, 15 of stat(5)


def proc_rss_mib(pid: int) -> float | None:
    """A process's resident memory (VmRSS), None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def box_cpu_ms() -> tuple[float, float]:
    """Whole-machine (busy, steal) CPU ms since boot, all cores, from /proc/stat's cpu line."""
    with open("/proc/stat", "rb") as fh:
        vals = [int(v) for v in fh.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = vals
    return (user + nice + system + irq + softirq) * 1000.0 / CLK_TCK, steal * 1000.0 / CLK_TCK


CommandStats = dict[str, tuple[int, int]]  # command -> (calls, usec)


async def command_stats(client: aioredis.Redis) -> CommandStats:
    """Redis's own per-command counters (INFO commandstats): where its main thread goes."""
    info = await client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in info.items()}


async def script_shares(
    url: str, run: Callable[[], Awaitable[object]], settle: float = 0.2
) -> dict[str, float]:
    """For each command, the share of its calls that Lua scripts made during `run()`, read
    from MONITOR. INFO commandstats counts a script's own calls (an HMGET inside an EVALSHA)
    and also includes their time in the script's, so a plain sum counts them twice: the
    benches leave out that share of each command's time. Run apart from the measurement
    itself: feeding MONITOR slows the scripts down."""
    calls: Counter[str] = Counter()
    scripted: Counter[str] = Counter()
    watcher = aioredis.Redis.from_url(url)
    try:
        async with watcher.monitor() as monitor:

            async def listen() -> None:
                async for seen in monitor.listen():
                    name = str(seen["command"]).split(" ", 1)[0].lower()
                    calls[name] += 1
                    if seen.get("client_type") == "lua":
                        scripted[name] += 1

            task = asyncio.create_task(listen())
            await asyncio.sleep(settle)  # MONITOR is on before the first command
            await run()
            await asyncio.sleep(settle)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await watcher.aclose()
    return {name: scripted[name] / n for name, n in calls.items() if scripted[name]}


def top_level(stats: CommandStats, shares: dict[str, float]) -> dict[str, tuple[float, float]]:
    """commandstats without the calls scripts made (`script_shares`): command -> (calls,
    usec) as the clients sent them, a script's time including its own calls."""
    out = {}
    for name, (calls, usec) in stats.items():
        kept = 1.0 - shares.get(name.lower(), 0.0)
        if kept > 0:
            out[name] = (calls * kept, usec * kept)
    return out


async def keyspace(client: aioredis.Redis, sample: int = 200) -> list[tuple[str, int, float]]:
    """Where Redis's memory is, by key family (`membus:{<ns>}:<family>:...` -> family): (family,
    keys, MiB), largest first; each family's bytes from MEMORY USAGE of up to `sample` keys."""
    keys: dict[str, list[bytes]] = {}
    async for key in client.scan_iter(count=1000):
        parts = key.split(b":")
        family = parts[2].decode() if len(parts) > 3 else parts[-1].decode()
        if len(parts) > 2 and parts[1] in (b"embcache", b"tier", b"pool"):
            family = parts[1].decode()
        keys.setdefault(family, []).append(key)
    out = []
    for family, found in keys.items():
        picked = found[:: max(1, len(found) // sample)][:sample]
        sizes = [await client.memory_usage(k) or 0 for k in picked]
        mean = sum(sizes) / len(sizes) if sizes else 0
        out.append((family, len(found), mean * len(found) / 2**20))
    return sorted(out, key=lambda row: -row[2])
