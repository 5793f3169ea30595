"""The pure parts of metrics and traces: the metrics object, the timed embedder, the Redis
error kinds, the probe port's HTTP answers, when tracing is on, and what runs without the
`observability` extra. Checks that depend on the process's global tracer provider run in a
subprocess of their own (another test may have set one in this process)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
import redis.exceptions
from redisvl.exceptions import RedisSearchError

from handlers.embed import HashEmbedder
from handlers.embed.timed import TimedEmbedder
from handlers.errors import Unavailable
from handlers.metrics import Metrics
from handlers.probes import ProbeServer
from handlers.settings import SettingsError, load_settings
from handlers.store.failures import redis_error_kind
from handlers.tracing import tracing_wanted


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# Metrics


def test_requests_are_counted_and_timed_by_op_and_code() -> None:
    metrics = Metrics(process=False)
    metrics.request_done("add", "ok", 0.002)
    metrics.request_done("add", "ok", 0.004)
    metrics.request_done("add", "conflict", 0.001)
    reg = metrics.registry
    ok = {"op": "add", "code": "ok"}
    assert reg.get_sample_value("membus_requests_total", ok) == 2
    assert reg.get_sample_value("membus_request_duration_seconds_count", ok) == 2
    assert reg.get_sample_value("membus_request_duration_seconds_sum", ok) == pytest.approx(0.006)
    assert (
        reg.get_sample_value("membus_request_duration_seconds_bucket", {**ok, "le": "0.0025"}) == 1
    )
    assert reg.get_sample_value("membus_requests_total", {"op": "add", "code": "conflict"}) == 1


def test_the_admission_gauges_are_read_at_scrape_time() -> None:
    metrics = Metrics(process=False)
    counts = {"running": 3, "waiting": 7}
    metrics.watch_admission(lambda: counts["running"], lambda: counts["waiting"])
    assert metrics.registry.get_sample_value("membus_inflight_requests") == 3
    counts["waiting"] = 0
    assert metrics.registry.get_sample_value("membus_waiting_requests") == 0


def test_durable_writes_and_redis_errors_are_counted() -> None:
    metrics = Metrics(process=False)
    metrics.durable_write("add", "applied")
    metrics.redis_error("timeout")
    reg = metrics.registry
    assert (
        reg.get_sample_value("membus_durable_writes_total", {"op": "add", "outcome": "applied"})
        == 1
    )
    assert reg.get_sample_value("membus_redis_errors_total", {"kind": "timeout"}) == 1


def test_two_handlers_in_one_process_have_registries_of_their_own() -> None:
    one, two = Metrics(), Metrics()  # with the process collectors too: no duplicate names
    one.request_done("get", "ok", 0.001)
    assert (
        two.registry.get_sample_value("membus_requests_total", {"op": "get", "code": "ok"}) is None
    )
    assert one.registry.get_sample_value("process_resident_memory_bytes", {})


async def test_the_timed_embedder_reports_texts_and_time_of_each_call() -> None:
    metrics = Metrics(process=False)
    embedder = TimedEmbedder(HashEmbedder(64), metrics.embedder_report("hash"))
    assert (embedder.name, embedder.dimension) == ("hash", 64)
    vectors = await embedder.embed(["one text", "another text"])
    assert len(vectors) == 2 and vectors[0].shape == (64,)
    reg = metrics.registry
    assert reg.get_sample_value("membus_embedded_texts_total", {"embedder": "hash"}) == 2
    assert reg.get_sample_value("membus_embed_duration_seconds_count", {"embedder": "hash"}) == 1


# Redis error kinds


def _raised(cause: BaseException) -> Unavailable:
    try:
        try:
            raise cause
        except Exception as exc:
            raise Unavailable("Redis is unreachable") from exc
    except Unavailable as err:
        return err


def test_redis_error_kinds_come_from_the_cause_chain() -> None:
    assert redis_error_kind(_raised(redis.exceptions.ConnectionError("refused"))) == "connection"
    assert redis_error_kind(_raised(redis.exceptions.TimeoutError("slow"))) == "timeout"
    pool = redis.exceptions.ConnectionError("No connection available.")
    assert redis_error_kind(_raised(pool)) == "pool_exhausted"
    assert redis_error_kind(_raised(redis.exceptions.ResponseError("WRONGTYPE"))) == "response"
    wrapped = RedisSearchError("search failed")
    wrapped.__cause__ = redis.exceptions.TimeoutError("slow")
    assert redis_error_kind(_raised(wrapped)) == "timeout"
    assert redis_error_kind(_raised(ValueError("not Redis"))) is None
    assert redis_error_kind(Unavailable("an embedder failed")) is None


# The probe port


async def _http(port: int, raw: bytes) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await reader.read()  # the server closes the connection after its answer
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


async def test_the_probe_port_answers_metrics_liveness_and_readiness() -> None:
    metrics = Metrics(process=False)
    metrics.request_done("search", "ok", 0.003)
    reason: list[str | None] = [None]

    async def ready() -> str | None:
        return reason[0]

    probes = ProbeServer(metrics.registry, ready)
    await probes.start("127.0.0.1", 0)
    try:
        port = probes.port
        status, headers, body = await _http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == "HTTP/1.1 200 OK"
        assert headers["content-type"].startswith("text/plain")
        assert int(headers["content-length"]) == len(body)
        assert b'membus_requests_total{code="ok",op="search"} 1.0' in body

        accept = b"Accept: application/openmetrics-text; version=1.0.0\r\n"
        _, headers, body = await _http(port, b"GET /metrics HTTP/1.1\r\n" + accept + b"\r\n")
        assert headers["content-type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")

        assert (await _http(port, b"GET /healthz HTTP/1.1\r\n\r\n"))[::2] == (
            "HTTP/1.1 200 OK",
            b"ok\n",
        )
        assert (await _http(port, b"GET /readyz?verbose HTTP/1.0\r\n\r\n"))[2] == b"ok\n"
        reason[0] = "NATS is not connected"
        status, _, body = await _http(port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert body == b"not ready: NATS is not connected\n"

        status, headers, body = await _http(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert (status, headers["content-length"], body) == ("HTTP/1.1 200 OK", "3", b"")
        assert (await _http(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0].endswith(
            "405 Method Not Allowed"
        )
        assert (await _http(port, b"GET /other HTTP/1.1\r\n\r\n"))[0].endswith("404 Not Found")
        assert (await _http(port, b"nonsense\r\n\r\n"))[0].endswith("400 Bad Request")
    finally:
        await probes.close()


# Settings and switches


def test_the_metrics_port_is_a_setting_off_by_default() -> None:
    assert load_settings({}).metrics_port == 0
    settings = load_settings({"MEMBUS_METRICS_PORT": "9464", "MEMBUS_METRICS_HOST": "127.0.0.1"})
    assert (settings.metrics_port, settings.metrics_host) == (9464, "127.0.0.1")
    with pytest.raises(SettingsError, match="MEMBUS_METRICS_PORT='70000'"):
        load_settings({"MEMBUS_METRICS_PORT": "70000"})


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_ask(env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(env) is wanted


def test_without_an_sdk_the_client_sends_no_headers_but_passes_a_given_context_on() -> None:
    done = run_python(
        """
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
        from bus.tracing import sending, traced

        assert not traced()
        with sending("add", "mem.x.add", "x", SpanKind.CLIENT) as headers:
            assert headers is None
        with sending("add", "memq.x.add", "x", SpanKind.PRODUCER, {"Nats-Msg-Id": "1"}) as h:
            assert h == {"Nats-Msg-Id": "1"}

        given = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
        with trace.use_span(NonRecordingSpan(given)):
            assert traced()
            with sending("add", "mem.x.add", "x", SpanKind.CLIENT) as headers:
                assert headers is not None
                assert headers["traceparent"] == f"00-{0xABC:032x}-{0xDEF:016x}-01", headers
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_handler_runs_without_the_observability_extra() -> None:
    """No prometheus-client, no OpenTelemetry SDK or instrumentation: the handler imports,
    tracing stays off, and a metrics port is refused with what to install."""
    done = run_python(
        """
        import sys
        for name in ("prometheus_client", "opentelemetry.sdk", "opentelemetry.instrumentation"):
            sys.modules[name] = None  # import fails as if not installed
        import handlers.service as service
        from handlers.settings import SettingsError, load_settings
        from handlers.tracing import configure_tracing

        assert configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None
        assert service.make_metrics(load_settings({})) is None
        try:
            service.make_metrics(load_settings({"MEMBUS_METRICS_PORT": "9464"}))
        except SettingsError as exc:
            assert "memory-bus[observability]" in str(exc), exc
            print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
