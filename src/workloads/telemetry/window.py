"""The measured window's telemetry: scrape ``/metrics`` and read energy at the window's
edges, sample gauges (KV usage) and energy counters in one bounded background task between
them, and turn it all into :class:`ServerTelemetry` and :class:`EnergyFigures`.

    async with WindowTelemetry(TelemetryOptions(), metrics_url=url) as telemetry:
        await telemetry.start()             # right before the first measured request
        ...                                 # the measured repetitions
        server, energy = await telemetry.finish(records)   # after the last measured reply
        result_warnings = telemetry.warnings

What the outside world does never breaks a run: a scrape that fails (unreachable, an HTTP
error, a timeout, text that is not Prometheus) or an energy counter that cannot be read is a
warning, and the figures it would have given are "not reported". A bug in this package is
not the outside world: it propagates (the run still saves what it measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from workloads.core.clock import sleep_until
from workloads.model.figures import EnergyFigures, ServerTelemetry
from workloads.model.records import TurnRecord
from workloads.telemetry.energy import EnergyChoice, EnergyMeter, open_energy
from workloads.telemetry.prometheus import Snapshot, parse_metrics
from workloads.telemetry.reconcile import UsageSums, window_figures
from workloads.telemetry.servers import ServerNames, detect_server
from workloads.wire.errors import describe
from workloads.wire.transport import Transport

__all__ = ["TelemetryOptions", "WindowTelemetry", "energy_for_target"]

# How to make each server export /metrics (also shown by probe).
ENABLE_METRICS_HINT = (
    "vLLM serves /metrics unless --disable-log-stats; SGLang needs --enable-metrics, "
    "llama-server --metrics; pass --metrics-url if it is elsewhere"
)


@dataclass(frozen=True)
class TelemetryOptions:
    """What to read over the measured window, and how often.

    workloads.run("five-user-coding", target=t, telemetry=TelemetryOptions(energy="nvml"))
    TelemetryOptions(metrics_url="http://gpu:9090/metrics")   # metrics on another port
    TelemetryOptions(metrics=False, energy="off")             # read nothing
    """

    metrics: bool = True  # scrape the server's Prometheus /metrics at the window edges
    metrics_url: str | None = None  # None: the target's root URL + /metrics
    energy: EnergyChoice = "auto"  # auto: NVML, else Intel hwmon, else RAPL; local targets only
    gauge_interval_s: float = 1.0  # KV usage and queue gauges: catches peaks of a second
    energy_interval_s: float = 10.0  # xe/i915 must be read at least every minute to not wrap
    settle_s: float = 0.5  # one re-scrape this long after the window when a counter lags
    scrape_timeout_s: float = 5.0
    sysfs_root: str = "/sys"  # tests point this at a fake tree


def energy_for_target(
    choice: EnergyChoice, *, base_url: str, simulated: bool
) -> tuple[EnergyChoice, str | None]:
    """``auto`` reads this machine's counters only when the server runs on this machine: the
    energy of a laptop is not the energy of a remote GPU server. An explicit kind is obeyed."""
    if choice != "auto":
        return choice, None
    if simulated:
        return "off", "the simulated server models time, not hardware"
    host = urlsplit(base_url).hostname or ""
    local = host in ("localhost", "") or host.endswith(".localhost")
    with contextlib.suppress(ValueError):  # a host name, not an address
        local = local or ipaddress.ip_address(host).is_loopback
    if not local:
        return "off", (
            f"the target ({host}) is not on this machine; pass --energy nvml|hwmon|rapl to "
            "read this machine's counters anyway"
        )
    return "auto", None


class _ScrapeError(Exception):
    """One /metrics read failed (its message says how)."""


class WindowTelemetry:
    """Reads the server's counters and this machine's energy over the measured window."""

    def __init__(
        self,
        options: TelemetryOptions,
        *,
        metrics_url: str | None,
        transport: Transport | None = None,  # headers, proxy, TLS of the target
        energy_note: str | None = None,  # why energy is off, when the caller decided so
        nvml: Any = None,  # tests inject a stand-in for pynvml
    ) -> None:
        self.options = options
        self.metrics_url = metrics_url if options.metrics else None
        self._transport = transport or Transport()
        self._energy_note = energy_note
        self._nvml = nvml
        self._http: aiohttp.ClientSession | None = None
        self._meter: EnergyMeter | None = None
        self._names: ServerNames | None = None
        self._start: Snapshot | None = None
        self._samples: list[Snapshot] = []
        self._scrapes = 0
        self._failed = 0
        self._sample_errors: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self.warnings: list[str] = []

    async def __aenter__(self) -> WindowTelemetry:
        if self.metrics_url is not None:
            # Its own small pool: a scrape never waits for, or takes, a chat connection.
            self._http = self._transport.session(
                self.metrics_url, timeout_s=self.options.scrape_timeout_s, limit=2
            )
        if self.options.energy == "off":
            self._energy_note = self._energy_note or "energy reading is off"
        else:
            # Finding devices (NVML init) happens before the run, not inside the window.
            self._meter, reason = await asyncio.to_thread(
                open_energy,
                self.options.energy,
                sysfs=Path(self.options.sysfs_root),
                nvml=self._nvml,
            )
            if self._meter is None:
                self._energy_note = reason
                if self.options.energy != "auto":
                    self.warnings.append(f"energy ({self.options.energy}) not available: {reason}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stop_sampler()
        finally:
            if self._http is not None:
                await self._http.close()
                self._http = None
            if self._meter is not None:
                self._meter.close()

    # --- window edges -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the window: scrape, read energy, start sampling. What the server or a counter
        does is a warning, never raised. May be called again after :meth:`finish` for the
        next window (one per sweep cell)."""
        self._samples = []
        self._scrapes = self._failed = 0
        self._sample_errors = []
        self._start = self._names = None  # never compare against an earlier window's start
        if self.metrics_url is not None:
            try:
                self._start = await self._scrape()
            except _ScrapeError as err:
                self.warnings.append(
                    f"server metrics not reported: {self.metrics_url} {err} ({ENABLE_METRICS_HINT})"
                )
            else:
                self._names = detect_server(self._start)
                if self._names is None:
                    self.warnings.append(
                        f"{self.metrics_url} exports no vLLM, SGLang, llama.cpp or TGI "
                        "metrics; server figures not reported"
                    )
        if self._meter is not None:  # a counter that cannot be read is left out by the meter
            await asyncio.to_thread(self._meter.start)
        if (self._names is not None and self._names.gauges) or self._meter is not None:
            self._task = asyncio.create_task(self._sample_loop(), name="workloads-telemetry")

    async def finish(
        self, records: Sequence[TurnRecord]
    ) -> tuple[ServerTelemetry | None, EnergyFigures | None]:
        """Close the window: read energy, scrape, compute the figures against ``records``."""
        await self._stop_sampler()
        usage = UsageSums.of(records)
        energy = await self._finish_energy(usage.completion)
        server = await self._finish_server(usage)
        if self._sample_errors:
            self.warnings.append(
                f"{len(self._sample_errors)} gauge samples of {self.metrics_url} failed "
                f"({self._sample_errors[-1]}); gauge peaks cover the rest"
            )
        return server, energy

    async def _finish_energy(self, generated: int) -> EnergyFigures:
        if self._meter is None:
            return EnergyFigures(
                source=None, not_available=self._energy_note or "no energy counter readable"
            )
        await asyncio.to_thread(self._meter.sample)
        figures = self._meter.figures(generated)
        self.warnings.extend(self._meter.warnings)
        self._meter.warnings.clear()  # the next window (sweep cell) reports only its own
        return figures

    async def _finish_server(self, usage: UsageSums) -> ServerTelemetry | None:
        if self.metrics_url is None:
            return None
        names, start = self._names, self._start
        if names is None or start is None:
            return ServerTelemetry(
                server=None,
                metrics_url=self.metrics_url,
                scrapes=self._scrapes,
                failed_scrapes=self._failed,
            )
        try:
            end = await self._scrape()
        except _ScrapeError as err:
            self.warnings.append(
                f"server metrics at the window end not reported: {self.metrics_url} {err}; "
                "counter figures are unknown"
            )
            return ServerTelemetry(
                server=names.server,
                metrics_url=self.metrics_url,
                scrapes=self._scrapes,
                failed_scrapes=self._failed,
            )
        figures, warnings = self._figures(names, start, end, usage)
        lagging = [
            r
            for r in figures.reconciliation
            if r.verdict == "differs" and r.difference is not None and r.difference < 0
        ]
        if lagging:
            # The server may count a request a moment after its last byte (llama.cpp and SGLang
            # count at request finish): read once more before blaming anything else.
            await asyncio.sleep(self.options.settle_s)
            try:
                late = await self._scrape()
            except _ScrapeError:
                late = None
            if late is not None:
                settled, late_warnings = self._figures(names, start, late, usage)
                if settled.reconciles:
                    note = (
                        f"reconciles on a re-read {self.options.settle_s:g} s after the window: "
                        f"{names.server} counted the last requests after their responses ended"
                    )
                    rows = [
                        r.model_copy(update={"causes": [*r.causes, note]})
                        if any(r.figure == x.figure for x in lagging)
                        else r
                        for r in settled.reconciliation
                    ]
                    figures = settled.model_copy(update={"reconciliation": rows})
                    warnings = late_warnings
        self.warnings.extend(warnings)
        return figures

    def _figures(
        self, names: ServerNames, start: Snapshot, end: Snapshot, usage: UsageSums
    ) -> tuple[ServerTelemetry, list[str]]:
        assert self.metrics_url is not None
        return window_figures(
            names,
            start,
            end,
            self._samples,
            usage,
            metrics_url=self.metrics_url,
            scrapes=self._scrapes,
            failed_scrapes=self._failed,
        )

    # --- scraping and sampling --------------------------------------------------------------

    async def _scrape(self, only: frozenset[str] | None = None) -> Snapshot:
        assert self._http is not None and self.metrics_url is not None
        try:
            async with self._http.get(self.metrics_url) as resp:
                if resp.status != 200:
                    raise _ScrapeError(f"answered HTTP {resp.status}")
                text = await resp.text()
                openmetrics = "openmetrics" in resp.headers.get("Content-Type", "")
            unix, perf_ns = time.time(), time.perf_counter_ns()
            # Parsing 100 KB of histograms takes milliseconds: off the event loop, so it does
            # not delay the chunk timestamps of the streams being measured.
            snapshot = await asyncio.to_thread(
                parse_metrics,
                text,
                openmetrics=openmetrics,
                only=only,
                unix=unix,
                perf_ns=perf_ns,
            )
        except _ScrapeError:
            self._failed += 1
            raise
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as err:
            self._failed += 1
            raise _ScrapeError(f"could not be read ({describe(err, self.metrics_url)})") from err
        except ValueError as err:  # after UnicodeDecodeError, which is one
            self._failed += 1
            raise _ScrapeError(f"is not Prometheus text ({err})") from err
        self._scrapes += 1
        return snapshot

    async def _sample_loop(self) -> None:
        """Gauges every gauge_interval_s, energy every energy_interval_s, on absolute
        deadlines; one scrape or read at a time, so the task's work is bounded."""
        o = self.options
        gauges = self._names.gauge_names() if self._names is not None else frozenset()
        t0 = time.perf_counter()
        next_gauge = t0 + o.gauge_interval_s if gauges else float("inf")
        next_energy = t0 + o.energy_interval_s if self._meter is not None else float("inf")
        while (deadline := min(next_gauge, next_energy)) != float("inf"):
            await sleep_until(deadline)
            now = time.perf_counter()
            if now >= next_gauge:
                try:
                    self._samples.append(await self._scrape(only=gauges))
                except _ScrapeError as err:
                    self._sample_errors.append(str(err))
                next_gauge = _next(next_gauge, o.gauge_interval_s, time.perf_counter())
            if now >= next_energy and self._meter is not None:
                await asyncio.to_thread(self._meter.sample)
                next_energy = _next(next_energy, o.energy_interval_s, time.perf_counter())

    async def _stop_sampler(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # wait(), not "await task": a cancellation of *our* caller must still propagate.
        await asyncio.wait({task})
        if not task.cancelled() and (err := task.exception()) is not None:
            raise err  # scrapes and energy reads fail into warnings: this is a bug


def _next(deadline: float, interval: float, now: float) -> float:
    """The next deadline on the grid, skipping any missed while a scrape was slow."""
    deadline += interval
    if deadline <= now:
        deadline += ((now - deadline) // interval + 1) * interval
    return deadline
