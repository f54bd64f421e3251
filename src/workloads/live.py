"""Live progress of a run on the console: elapsed, ETA, turns done of total, the current
aggregate tok/s, TTFT p50 and errors by kind, and a status while nothing finishes (prompts
being sized, turns waiting at a barrier).

In a terminal it is a progress bar redrawn in place; piped (CI, nohup, a file) it is one
plain line on stderr every few seconds, so a log shows the run is alive without a stream of
redraws. A face of the package, like cli.py: the library never prints, and ``--quiet`` turns
this off.

    with LiveProgress(scenario, console) as live:
        result = workloads.run(scenario, on_record=live.on_record)
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, deque
from types import TracebackType
from typing import IO, Any

from workloads.core import stats
from workloads.core.agent import planned_requests
from workloads.model.records import TurnRecord
from workloads.model.scenario import Scenario

__all__ = ["LiveProgress", "progress_line"]

RATE_WINDOW_S = 10.0  # "current" tok/s: tokens of turns that finished this recently
PLAIN_INTERVAL_S = 5.0  # one line this often when not a terminal


class _Tally:
    """What the records so far say: the figures of the progress line. Fed from the run's
    thread, read from the ticker's: guarded by a lock."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        # Exact for an agent's plans (drawn here too); the turns bound, when too many to draw.
        self.total = planned_requests(scenario) or scenario.total_turns()
        # A fleet is bounded by time, not turns: its progress is its windows' seconds.
        fleet = scenario.fleet
        reps = scenario.repetitions
        self.fleet_s = (
            None
            if fleet is None
            else fleet.window_s * (reps.warmup + reps.measured) * len(scenario.cells())
        )
        self.coordinates = scenario.cells()
        self.cells = len(self.coordinates)
        self.measured = scenario.repetitions.measured
        self.start_ns = time.perf_counter_ns()
        self.done = 0
        self.errors: Counter[str] = Counter()
        self.invalid = 0
        self.ttfts: list[float] = []
        self.recent: deque[tuple[int, int]] = deque()  # (finished ns, completion tokens)
        self.last: TurnRecord | None = None
        self.last_ns: int | None = None
        self.lock = threading.Lock()

    def add(self, record: TurnRecord) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            self.done += 1
            self.last, self.last_ns = record, now
            if record.status != "ok":
                self.errors[record.error_kind or record.status] += 1
            elif not record.valid:
                self.invalid += 1
            if record.ttft_ns is not None and not record.warmup and record.valid:
                self.ttfts.append(record.ttft_ns / 1e9)
            self.recent.append((now, record.completion_tokens or 0))


def progress_line(tally: _Tally, now_ns: int | None = None) -> str:
    """The status as one line: ``12s · 15/60 turns · ETA 36s · measured 2/3 · turn 3 ·
    1,180 tok/s · TTFT p50 0.21 s · errors: 2 timeout``."""
    now = time.perf_counter_ns() if now_ns is None else now_ns
    with tally.lock:
        elapsed = (now - tally.start_ns) / 1e9
        if tally.fleet_s is not None:  # the fleet's windows: time, not turns, ends it
            parts = [f"{_duration(elapsed)}", f"{tally.done:,} turns"]
            if tally.done and elapsed < tally.fleet_s:
                parts.append(f"ETA {_duration(tally.fleet_s - elapsed)}")
        else:
            parts = [f"{_duration(elapsed)}", f"{tally.done:,}/{tally.total:,} turns"]
            if 0 < tally.done < tally.total:
                left = elapsed / tally.done * (tally.total - tally.done)
                parts.append(f"ETA {_duration(left)}")
        last = tally.last
        if last is None:
            parts.append("sizing prompts and sending the first turns")
        else:
            # Cells keep their id (numbered from 0, as in records and plots) with their
            # coordinate; repetitions are counted within their phase (warm-up 1/1).
            warm = tally.scenario.repetitions.warmup
            if last.warmup:
                phase = f"warm-up {last.repetition + 1}/{warm}"
            else:
                phase = f"measured {last.repetition - warm + 1}/{tally.measured}"
            if tally.cells > 1:
                cell = tally.coordinates[last.cell]
                phase = f"cell {last.cell} (C{cell.concurrency} · {cell.prior_tokens:,}) · {phase}"
            parts.append(f"{phase} · turn {last.turn}")
            while tally.recent and now - tally.recent[0][0] > RATE_WINDOW_S * 1e9:
                tally.recent.popleft()
            window = max(1.0, min(RATE_WINDOW_S, elapsed))  # no rate from a blink
            tokens = sum(t for _, t in tally.recent)
            if window > 0 and tokens:
                parts.append(f"{tokens / window:,.0f} tok/s last {window:.0f}s")
            idle = (now - (tally.last_ns or now)) / 1e9
            if idle >= PLAIN_INTERVAL_S and (tally.fleet_s is not None or tally.done < tally.total):
                parts.append(f"waiting {_duration(idle)} (sizing, a barrier or long turns)")
        ttft = stats.median(tally.ttfts)
        if ttft is not None:
            parts.append(f"TTFT p50 {ttft:.2f} s")
        if tally.errors:
            kinds = ", ".join(f"{n} {kind}" for kind, n in tally.errors.most_common())
            parts.append(f"errors: {kinds}")
        if tally.invalid:
            parts.append(f"{tally.invalid} invalid")
    return " · ".join(parts)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m"


class LiveProgress:
    """Progress of one run on ``console`` (a rich Console): a bar in a terminal, a plain line
    on ``stream`` (stderr) every ``interval_s`` otherwise; nothing when ``quiet``."""

    def __init__(
        self,
        scenario: Scenario,
        console: Any,
        *,
        quiet: bool = False,
        interval_s: float = PLAIN_INTERVAL_S,
        stream: IO[str] | None = None,
        terminal: bool | None = None,
    ) -> None:
        self.tally = _Tally(scenario)
        self.quiet = quiet
        self.interval_s = interval_s
        self.stream = stream
        self.terminal = console.is_terminal if terminal is None else terminal
        self._console = console
        self._live: Any = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> LiveProgress:
        if self.quiet:
            return self
        if self.terminal:
            from rich.live import Live

            # Redrawn by rich's own refresh thread: the bar on one line, the status under it
            # (wrapping in a narrow terminal rather than being cut).
            self._live = Live(
                console=self._console,
                transient=True,
                refresh_per_second=2,
                get_renderable=self._renderable,
            )
            self._live.__enter__()
            return self
        self._ticker = threading.Thread(
            target=self._tick, args=(self.interval_s,), name="workloads-progress", daemon=True
        )
        self._ticker.start()
        return self

    def _renderable(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self.tally.lock:
            done, total = self.tally.done, self.tally.total
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            Text(self.tally.scenario.name, style="bold"),
            ProgressBar(total=total, completed=done, width=30),
            Text(f"{done:,}/{total:,}"),
        )
        return Group(bar, Text(progress_line(self.tally)))

    def on_record(self, record: TurnRecord) -> None:
        """The run's ``on_record`` callback: count the turn (the display reads the count)."""
        self.tally.add(record)
        if self._live is not None:
            self._live.refresh()

    def _tick(self, interval: float) -> None:
        first = True  # a plain log gets a line at once: the run has started
        while first or not self._stop.wait(interval):
            first = False
            out = self.stream or sys.stderr
            print(f"{self.tally.scenario.name}: {progress_line(self.tally)}", file=out, flush=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._live is not None:
            self._live.__exit__(kind, err, tb)
