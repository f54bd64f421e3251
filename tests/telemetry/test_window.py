"""WindowTelemetry against real HTTP servers on 127.0.0.1 serving /metrics text we control."""

from __future__ import annotations

import asyncio
import os

import pytest
from aiohttp import web

from workloads.model.records import TurnRecord
from workloads.telemetry import TelemetryOptions, WindowTelemetry

L = '{engine="0",model_name="m"}'


def spec_text(drafts, draft_tokens, accepted, kv=0.0, generated=0):
    return (
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        f"vllm:spec_decode_num_drafts_total{L} {drafts}\n"
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        f"vllm:spec_decode_num_draft_tokens_total{L} {draft_tokens}\n"
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        f"vllm:spec_decode_num_accepted_tokens_total{L} {accepted}\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f"vllm:generation_tokens_total{L} {generated}\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{L} {kv}\n"
    )


class MetricsText:
    """An app whose /metrics answers with ``self.text`` (or ``self.status``); after its
    n-th answer the text becomes ``after_hit[n]`` where given. ``await hits_reach(n)`` waits
    for the n-th request (the test's loop serves it: no sleep, no timing)."""

    def __init__(
        self, text: str = "", status: int = 200, after_hit: dict[int, str] | None = None
    ) -> None:
        self.text, self.status, self.hits = text, status, 0
        self.after_hit = after_hit or {}
        self.hit = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_get("/metrics", self.metrics)

    async def metrics(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.hit.set()
        if self.status != 200:
            return web.Response(status=self.status, text="no metrics here")
        text = self.text
        self.text = self.after_hit.get(self.hits, self.text)
        return web.Response(text=text, content_type="text/plain")

    async def hits_reach(self, n: int) -> None:
        async def wait() -> None:
            while self.hits < n:  # each pass waits for one more request
                self.hit.clear()
                await self.hit.wait()

        await asyncio.wait_for(wait(), timeout=120)  # a bound, not a timing: hangs fail


def record(completion: int) -> TurnRecord:
    return TurnRecord(
        repetition=0,
        warmup=False,
        session=0,
        turn=1,
        status="ok",
        http_status=200,
        prompt_tokens=10,
        cached_tokens=0,
        completion_tokens=completion,
        configured_prior_tokens=0,
        started_ns=1,
    )


QUICK = TelemetryOptions(energy="off", gauge_interval_s=0.02, settle_s=0.05)


async def test_acceptance_over_the_window_from_a_real_metrics_endpoint(serve_app):
    server = MetricsText(spec_text(50, 200, 100))
    async with (
        serve_app(server.app) as root,
        WindowTelemetry(QUICK, metrics_url=root + "/metrics") as window,
    ):
        await window.start()
        server.text = spec_text(50 + 201, 200 + 804, 100 + 437, kv=0.8)
        # Three periodic samples of it: one scrape at a time, so the first two were read
        # whole (the third may be cut short by finish()).
        await server.hits_reach(server.hits + 3)
        server.text = spec_text(50 + 201, 200 + 804, 100 + 437, kv=0.1)
        telemetry, energy = await window.finish([])
    assert telemetry is not None and telemetry.server == "vLLM"
    assert round(telemetry.spec_acceptance_rate, 4) == 0.5435
    assert telemetry.spec_mean_accepted_length == pytest.approx(1 + 437 / 201)
    assert telemetry.kv_usage_peak == 0.8  # seen only by the periodic samples
    assert telemetry.gauges["kv_usage"].last == 0.1
    assert telemetry.scrapes >= 4 and telemetry.failed_scrapes == 0
    assert window.warnings == []
    assert energy is not None and energy.joules is None and energy.not_available


async def test_a_counter_that_lags_the_last_response_reconciles_on_the_settle_read(serve_app):
    # The server counts the last request a moment after its end: the window-end scrape
    # (the 2nd request; no gauge samples in this window) still reads 1032, the re-read 1064.
    late = {2: spec_text(0, 0, 0, generated=1064)}
    server = MetricsText(spec_text(0, 0, 0, generated=1000), after_hit=late)
    no_samples = TelemetryOptions(energy="off", gauge_interval_s=3600, settle_s=0.05)
    async with (
        serve_app(server.app) as root,
        WindowTelemetry(no_samples, metrics_url=root + "/metrics") as window,
    ):
        await window.start()
        server.text = spec_text(0, 0, 0, generated=1032)
        telemetry, _ = await window.finish([record(32), record(32)])
    assert server.hits == 3
    row = next(r for r in telemetry.reconciliation if r.figure == "generation_tokens")
    assert row.verdict == "reconciles" and row.server == 64
    assert "re-read 0.05 s after the window" in row.causes[-1]


async def test_a_missing_metrics_endpoint_is_a_warning_not_an_error(serve_app):
    server = MetricsText(status=404)
    async with (
        serve_app(server.app) as root,
        WindowTelemetry(QUICK, metrics_url=root + "/metrics") as window,
    ):
        await window.start()
        telemetry, _ = await window.finish([record(8)])
    assert telemetry is not None and telemetry.server is None
    assert telemetry.prompt_tokens is None and telemetry.reconciliation == []
    assert len(window.warnings) == 1
    assert "answered HTTP 404" in window.warnings[0] and "--enable-metrics" in window.warnings[0]


async def test_an_unreachable_metrics_endpoint_is_a_warning(serve_app):
    async with WindowTelemetry(QUICK, metrics_url="http://127.0.0.1:9/metrics") as window:
        await window.start()
        telemetry, _ = await window.finish([])
    assert telemetry.server is None
    assert "could not be read" in window.warnings[0]


async def test_a_failing_window_end_scrape_leaves_counters_unknown(serve_app):
    server = MetricsText(spec_text(1, 4, 2))
    async with (
        serve_app(server.app) as root,
        WindowTelemetry(QUICK, metrics_url=root + "/metrics") as window,
    ):
        await window.start()
        server.status = 500
        # some gauge samples fail too: wait for one (a sample answered 500 is a sample
        # error once the next request shows the sampler went on)
        await server.hits_reach(server.hits + 2)
        telemetry, _ = await window.finish([])
    assert telemetry.server == "vLLM" and telemetry.spec_acceptance_rate is None
    assert telemetry.failed_scrapes >= 2
    assert any("window end not reported" in w for w in window.warnings)
    assert any("gauge samples" in w for w in window.warnings)


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("<html>{ nope</html>", "not Prometheus text"),
        (
            "# TYPE http_requests_total counter\nhttp_requests_total 7\n",
            "/metrics exports no vLLM, SGLang, llama.cpp or TGI metrics;"
            " server figures not reported",
        ),
    ],
    ids=["not-prometheus", "no-known-server"],
)
async def test_metrics_text_the_window_cannot_read_is_one_warning(serve_app, text, warning):
    server = MetricsText(text)
    async with (
        serve_app(server.app) as root,
        WindowTelemetry(QUICK, metrics_url=root + "/metrics") as window,
    ):
        await window.start()
        telemetry, _ = await window.finish([record(8)])
    assert telemetry is not None and telemetry.server is None
    assert len(window.warnings) == 1 and warning in window.warnings[0]


async def test_the_sampler_catches_rapl_wraps_inside_the_window(tmp_path):
    zone = tmp_path / "class" / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("1000\n")
    (zone / "energy_uj").write_text("900\n")
    options = TelemetryOptions(
        metrics=False, energy="rapl", energy_interval_s=0.01, sysfs_root=str(tmp_path)
    )
    async with WindowTelemetry(options, metrics_url=None) as window:
        await window.start()
        meter = window._meter
        assert meter is not None
        for value in (100, 800, 200):  # two wraps; edges alone would see 900 → 200 = 300
            # Atomically, as sysfs reads are: a truncate-then-write could be read half done.
            (zone / "energy_uj.tmp").write_text(f"{value}\n")
            os.replace(zone / "energy_uj.tmp", zone / "energy_uj")
            # Wait for the sampler to read this value (not a fixed sleep: a loaded machine
            # may not run it within any fixed time), bounded at 10 s.
            reads = meter._reads
            for _ in range(1000):
                await asyncio.sleep(0.01)
                if meter._reads >= reads + 2:
                    break
        telemetry, energy = await window.finish([record(10)])
    assert telemetry is None  # metrics off
    assert energy.source == "rapl" and energy.joules == pytest.approx(1300e-6)
    assert energy.reads >= 4 and energy.generated_tokens == 10
    assert window.warnings == []


async def test_an_explicit_energy_kind_that_cannot_be_read_warns(tmp_path):
    options = TelemetryOptions(metrics=False, energy="rapl", sysfs_root=str(tmp_path))
    async with WindowTelemetry(options, metrics_url=None) as window:
        await window.start()
        _, energy = await window.finish([])
    assert energy.joules is None and "no RAPL package zone" in energy.not_available
    assert window.warnings and "energy (rapl) not available" in window.warnings[0]
