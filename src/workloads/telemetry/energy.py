"""Energy counters of this machine: NVIDIA GPUs (NVML), Intel GPUs (xe/i915 hwmon), CPU
packages (RAPL). Read at the window's edges and every few seconds between, so a counter that
wraps is caught; the result is joules per device, or "not available" with the reason.

| source | counter                                           | unit | wraps                   |
|--------|---------------------------------------------------|------|--------------------------|
| nvml   | nvmlDeviceGetTotalEnergyConsumption (since load)  | mJ   | no (64-bit)              |
| hwmon  | class/hwmon/hwmonN/energy1_input, name xe or i915 | µJ   | no, if read every ≤ 60 s |
| rapl   | class/powercap/intel-rapl:N/energy_uj (packages)  | µJ   | at max_energy_range_uj   |

(xe and i915 accumulate a 32-bit hardware counter into 63 bits on each read, so a reader
must come by at least once a minute; the window samples every 10 s.)

A counter that goes down without a known range means the device or driver was reset: that
device's energy is unknown, never 0. Sysfs roots and the NVML module are injectable, so the
readers are tested on fake trees in temporary directories.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from workloads.model.figures import EnergyDevice, EnergyFigures

__all__ = [
    "EnergyChoice",
    "EnergyMeter",
    "EnergySource",
    "find_hwmon",
    "find_nvml",
    "find_rapl",
    "open_energy",
]

EnergyChoice = Literal["auto", "nvml", "hwmon", "rapl", "off"]
Kind = Literal["nvml", "hwmon", "rapl"]

# What reading a sysfs counter raises when it cannot: the file (OSError) or its text
# (ValueError). NVML sources add pynvml's NVMLError; anything else is a bug and propagates.
READ_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError)


@dataclass
class EnergySource:
    """One cumulative energy counter. ``read`` returns raw counts (raises one of ``errors``
    when it cannot: the counter is then unknown); ``joules_per_count`` converts; ``wrap`` is
    the raw value at which the counter starts again from 0, when it has one."""

    device: str
    read: Callable[[], int]
    joules_per_count: float
    wrap: int | None = None
    errors: tuple[type[Exception], ...] = READ_ERRORS


@dataclass
class _Track:
    source: EnergySource
    last: int | None = None
    counts: int = 0  # accumulated raw counts since start
    failure: str | None = None  # set once: the device's window energy is unknown


@dataclass
class EnergyMeter:
    """Accumulates the window's energy over several reads. Not thread-safe: the window calls
    it from one worker thread at a time."""

    kind: Kind
    sources: list[EnergySource]
    close: Callable[[], None] = lambda: None
    clock: Callable[[], int] = time.perf_counter_ns  # tests give a fake clock
    warnings: list[str] = field(default_factory=list)
    _tracks: list[_Track] = field(default_factory=list)
    _first_ns: int | None = None
    _last_ns: int | None = None
    _reads: int = 0
    # The sampler reads in a worker thread; a cancelled to_thread call keeps running, so the
    # final read can overlap it.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Read every counter at the window start."""
        with self._lock:
            self._tracks = [_Track(s) for s in self.sources]
            self._first_ns = None
            self._reads = 0
            self._sample()

    def sample(self) -> None:
        """Read every counter and add what it moved since the last read (wraps included)."""
        with self._lock:
            self._sample()

    def _sample(self) -> None:
        now = self.clock()
        for track in self._tracks:
            if track.failure is not None:
                continue
            try:
                raw = track.source.read()
            except track.source.errors as err:  # the counter is unknown from now on
                track.failure = f"{track.source.device} became unreadable: {err}"
                continue
            if track.last is not None:
                step = raw - track.last
                if step < 0:
                    if track.source.wrap is None:
                        track.failure = (
                            f"{track.source.device}: energy counter went down "
                            f"({track.last} → {raw}); the device or driver was reset"
                        )
                        continue
                    step += track.source.wrap  # e2 + range − e1
                track.counts += step
            track.last = raw
        if self._first_ns is None:
            self._first_ns = now
        self._last_ns = now
        self._reads += 1

    def figures(self, generated_tokens: int | None) -> EnergyFigures:
        """The window's energy after the final :meth:`sample`."""
        with self._lock:
            return self._figures(generated_tokens)

    def _figures(self, generated_tokens: int | None) -> EnergyFigures:
        devices = [
            EnergyDevice(
                device=t.source.device,
                joules=None if t.failure else t.counts * t.source.joules_per_count,
            )
            for t in self._tracks
        ]
        failures = [t.failure for t in self._tracks if t.failure]
        self.warnings.extend(f"energy: {f}" for f in failures)
        duration = None
        if self._first_ns is not None and self._last_ns is not None and self._reads > 1:
            duration = (self._last_ns - self._first_ns) / 1e9
        joules = None
        if devices and not failures and duration is not None:
            joules = sum(d.joules or 0.0 for d in devices)
        tokens = generated_tokens if generated_tokens else None
        return EnergyFigures(
            source=self.kind,
            devices=devices,
            joules=joules,
            duration_s=duration,
            mean_watts=joules / duration if joules is not None and duration else None,
            generated_tokens=generated_tokens,
            joules_per_token=joules / tokens if joules is not None and tokens else None,
            tokens_per_joule=tokens / joules if joules and tokens else None,
            reads=self._reads,
            not_available=None
            if joules is not None
            else "; ".join(failures) or "fewer than two readings",
        )


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _check(sources: list[EnergySource]) -> tuple[list[EnergySource], list[str]]:
    """Keep the sources that can be read now; say why the others cannot."""
    good, bad = [], []
    for s in sources:
        try:
            s.read()
        except PermissionError:
            bad.append(
                f"{s.device}: permission denied (RAPL energy_uj is root-only since Linux 5.10)"
                if "rapl" in s.device
                else f"{s.device}: permission denied"
            )
        except s.errors as err:
            bad.append(f"{s.device}: {err}")
        else:
            good.append(s)
    return good, bad


def find_rapl(root: Path = Path("/sys")) -> tuple[list[EnergySource], str | None]:
    """CPU package counters: ``class/powercap/intel-rapl:N`` whose ``name`` is package-N.
    Sub-zones (``intel-rapl:N:M``: core, uncore, dram) are parts of a package and ``psys``
    contains the packages, so only packages are summed."""
    base = root / "class" / "powercap"
    zones = sorted(base.glob("intel-rapl:*")) if base.is_dir() else []
    sources = []
    for zone in zones:
        if zone.name.count(":") != 1:
            continue
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        if not name.startswith("package"):
            continue
        energy = zone / "energy_uj"
        try:
            wrap: int | None = _read_int(zone / "max_energy_range_uj")
        except (OSError, ValueError):
            wrap = None  # then a decrease makes the device unknown rather than guessed
        sources.append(
            EnergySource(
                device=f"CPU {name} (rapl {zone.name})",
                read=partial(_read_int, energy),
                joules_per_count=1e-6,
                wrap=wrap,
            )
        )
    if not sources:
        return [], f"no RAPL package zone under {base}"
    good, bad = _check(sources)
    return good, "; ".join(bad) if bad else None


def find_hwmon(root: Path = Path("/sys")) -> tuple[list[EnergySource], str | None]:
    """Intel GPU card energy: ``class/hwmon/hwmonN`` named ``xe`` or ``i915`` with
    ``energy1_input`` (µJ). Per-GT hwmons (``i915_gt0``) are parts of the card: skipped."""
    base = root / "class" / "hwmon"
    hwmons = sorted(base.glob("hwmon*")) if base.is_dir() else []
    sources = []
    for hwmon in hwmons:
        try:
            driver = (hwmon / "name").read_text().strip()
        except OSError:
            continue
        energy = hwmon / "energy1_input"
        if driver not in ("xe", "i915") or not energy.exists():
            continue
        where = hwmon.name
        if (hwmon / "device").exists():
            where = f"{(hwmon / 'device').resolve().name} {hwmon.name}"
        label = "card"
        with contextlib.suppress(OSError):
            label = (hwmon / "energy1_label").read_text().strip() or label
        sources.append(
            EnergySource(
                device=f"Intel {driver} {where} {label} energy1_input",
                read=partial(_read_int, energy),
                joules_per_count=1e-6,
            )
        )
    if not sources:
        return [], f"no xe/i915 hwmon with energy1_input under {base}"
    good, bad = _check(sources)
    return good, "; ".join(bad) if bad else None


def _import_nvml() -> Any:
    try:
        import pynvml  # from nvidia-ml-py, the optional [nvidia] extra
    except ImportError:
        return None
    return pynvml


def find_nvml(nvml: Any = None) -> tuple[list[EnergySource], str | None, Callable[[], None]]:
    """One source per NVIDIA GPU: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver
    loaded; whole board, not per MIG slice). ``nvml`` defaults to ``pynvml``."""
    nvml = nvml if nvml is not None else _import_nvml()
    if nvml is None:
        return [], "nvidia-ml-py is not installed (pip install 'workloads[nvidia]')", _noop
    errors = (nvml.NVMLError, *READ_ERRORS)  # every NVML failure is an NVMLError subclass
    try:
        nvml.nvmlInit()
    except errors as err:
        return [], f"NVML unavailable: {err}", _noop
    sources = []
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # older nvidia-ml-py returned bytes
                name = name.decode()
            sources.append(
                EnergySource(
                    device=f"{name} (GPU {index})",
                    read=partial(_nvml_energy, nvml, handle),
                    joules_per_count=1e-3,
                    errors=errors,
                )
            )
    except errors as err:
        _shutdown(nvml)
        return [], f"NVML: {err}", _noop
    if not sources:
        _shutdown(nvml)
        return [], "NVML sees no GPU", _noop
    good, bad = _check(sources)
    if not good:
        _shutdown(nvml)
        return [], "; ".join(bad), _noop
    return good, "; ".join(bad) if bad else None, lambda: _shutdown(nvml)


def _nvml_energy(nvml: Any, handle: Any) -> int:
    return int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))  # mJ


def _noop() -> None:
    """Nothing to release (a reader without a handle)."""


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):  # best effort after a failure half-way
        nvml.nvmlShutdown()


def open_energy(
    choice: EnergyChoice, *, sysfs: Path = Path("/sys"), nvml: Any = None
) -> tuple[EnergyMeter | None, str | None]:
    """The meter for ``choice`` and, when there is none, why. ``auto`` takes the first kind
    with a readable counter: NVML, then Intel hwmon, then RAPL. A partial failure (one GPU
    of two unreadable) is a warning on the meter, not a silent omission."""
    if choice == "off":
        return None, "energy reading is off"
    reasons: list[str] = []
    for kind in ("nvml", "hwmon", "rapl"):
        if choice not in ("auto", kind):
            continue
        close = _noop
        if kind == "nvml":
            sources, problem, close = find_nvml(nvml)
        elif kind == "hwmon":
            sources, problem = find_hwmon(sysfs)
        else:
            sources, problem = find_rapl(sysfs)
        if sources:
            meter = EnergyMeter(kind, sources, close)
            if problem:
                meter.warnings.append(f"energy: some {kind} devices are left out: {problem}")
            return meter, None
        reasons.append(problem or f"no {kind} counter")
    return None, "; ".join(reasons)
