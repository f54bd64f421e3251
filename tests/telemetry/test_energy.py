"""Energy readers on fake sysfs trees in temporary directories, and NVML through a stand-in
module with the same functions (no GPU here; the real pynvml path is checked to say why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.telemetry.energy import EnergyMeter, find_hwmon, find_nvml, find_rapl, open_energy
from workloads.telemetry.window import energy_for_target


def rapl_zone(
    root: Path,
    index: int,
    energy: int | None,
    *,
    name: str | None = None,
    max_range: int | None = 262_143_328_850,
) -> Path:
    zone = root / "class" / "powercap" / f"intel-rapl:{index}"
    zone.mkdir(parents=True)
    (zone / "name").write_text(f"{name or f'package-{index}'}\n")
    if energy is not None:
        (zone / "energy_uj").write_text(f"{energy}\n")
    if max_range is not None:
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return zone


def xe_hwmon(
    root: Path, index: int, energy: int, *, driver: str = "xe", bdf: str = "0000:03:00.0"
) -> Path:
    device = root / "devices" / "pci0000:00" / bdf
    device.mkdir(parents=True)
    hwmon = root / "class" / "hwmon" / f"hwmon{index}"
    hwmon.mkdir(parents=True)
    (hwmon / "name").write_text(f"{driver}\n")
    (hwmon / "energy1_input").write_text(f"{energy}\n")
    (hwmon / "energy1_label").write_text("card\n")
    (hwmon / "energy2_input").write_text("999999999\n")  # pkg: not summed with the card
    (hwmon / "device").symlink_to(device)
    return hwmon


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_seed_xe_figures_come_out_of_a_fake_hwmon_tree(tmp_path):
    # Seed 001: "xe hwmon energy1_input 3277950683 uJ over 14.599 s ... 5.12 J/token ...
    # tokens/J 0.1952 ... measured avg draw 224.53 W" for 5 x 128 generated tokens.
    hwmon = xe_hwmon(tmp_path, 2, 10_000_000_000)
    sources, problem = find_hwmon(tmp_path)
    assert problem is None and len(sources) == 1
    assert sources[0].device == "Intel xe 0000:03:00.0 hwmon2 card energy1_input"
    clock = Clock()
    meter = EnergyMeter("hwmon", sources, clock=clock)
    meter.start()
    (hwmon / "energy1_input").write_text(f"{10_000_000_000 + 3_277_950_683}\n")
    clock.ns = 14_599_000_000
    meter.sample()
    e = meter.figures(generated_tokens=640)
    assert e.source == "hwmon" and e.joules == pytest.approx(3277.950683)
    assert e.duration_s == pytest.approx(14.599)
    assert round(e.mean_watts, 2) == 224.53
    assert round(e.joules_per_token, 2) == 5.12
    assert round(e.tokens_per_joule, 4) == 0.1952


def test_rapl_wrap_around_adds_the_range(tmp_path):
    zone = rapl_zone(tmp_path, 0, 900, max_range=1000)
    sources, _ = find_rapl(tmp_path)
    meter = EnergyMeter("rapl", sources)
    meter.start()
    (zone / "energy_uj").write_text("100\n")  # wrapped: 100 + 1000 - 900 = 200
    meter.sample()
    (zone / "energy_uj").write_text("800\n")  # +700
    meter.sample()
    (zone / "energy_uj").write_text("200\n")  # wrapped again: +400
    meter.sample()
    e = meter.figures(generated_tokens=13)
    assert e.devices[0].joules == pytest.approx(1300e-6)
    assert e.joules == pytest.approx(1300e-6) and e.reads == 4


def test_rapl_sums_packages_only(tmp_path):
    rapl_zone(tmp_path, 0, 5)
    rapl_zone(tmp_path, 1, 7)
    rapl_zone(tmp_path, 2, 9, name="psys")  # contains the packages: never added to them
    sub = tmp_path / "class" / "powercap" / "intel-rapl:0:0"  # core: part of package-0
    sub.mkdir()
    (sub / "name").write_text("core\n")
    (sub / "energy_uj").write_text("1\n")
    sources, problem = find_rapl(tmp_path)
    assert problem is None
    assert [s.device for s in sources] == [
        "CPU package-0 (rapl intel-rapl:0)",
        "CPU package-1 (rapl intel-rapl:1)",
    ]


def test_a_missing_energy_file_is_not_available_never_zero(tmp_path):
    rapl_zone(tmp_path, 0, None)
    meter, reason = open_energy("rapl", sysfs=tmp_path)
    assert meter is None
    assert "energy_uj" in reason


def test_an_unreadable_energy_file_is_not_available(tmp_path):
    zone = rapl_zone(tmp_path, 0, None)
    (zone / "energy_uj").mkdir()  # reading it fails as a permission error would (tests run as root)
    meter, reason = open_energy("rapl", sysfs=tmp_path)
    assert meter is None and "intel-rapl:0" in reason


def test_a_device_that_vanishes_mid_window_makes_the_total_unknown(tmp_path):
    zone = rapl_zone(tmp_path, 0, 100)
    rapl_zone(tmp_path, 1, 100)
    meter, _ = open_energy("rapl", sysfs=tmp_path)
    assert meter is not None
    meter.start()
    (zone / "energy_uj").unlink()
    meter.sample()
    e = meter.figures(generated_tokens=10)
    assert e.joules is None and e.joules_per_token is None and e.tokens_per_joule is None
    assert e.devices[0].joules is None and e.devices[1].joules == 0.0
    assert "became unreadable" in e.not_available
    assert meter.warnings and "package-0" in meter.warnings[0]


def test_a_counter_that_goes_down_without_a_range_is_a_reset_not_a_wrap(tmp_path):
    hwmon = xe_hwmon(tmp_path, 0, 5_000_000)
    meter, _ = open_energy("hwmon", sysfs=tmp_path)
    meter.start()
    (hwmon / "energy1_input").write_text("10\n")
    meter.sample()
    e = meter.figures(generated_tokens=10)
    assert e.joules is None and "went down" in e.not_available


def test_auto_prefers_the_gpu_card_over_cpu_packages(tmp_path):
    xe_hwmon(tmp_path, 1, 10, driver="i915")
    rapl_zone(tmp_path, 0, 10)
    meter, reason = open_energy("auto", sysfs=tmp_path, nvml=NoGpuNvml())
    assert reason is None and meter.kind == "hwmon"
    assert meter.sources[0].device.startswith("Intel i915")


def test_nothing_readable_says_why_for_each_kind(tmp_path):
    meter, reason = open_energy("auto", sysfs=tmp_path, nvml=NoGpuNvml())
    assert meter is None
    assert "NVML" in reason and "hwmon" in reason and "RAPL" in reason
    assert open_energy("off") == (None, "energy reading is off")


class NVMLError(Exception):
    """pynvml's error type, as the NVML stand-in raises it."""


class FakeNvml:
    """The five pynvml functions the reader calls, with per-GPU mJ counters."""

    NVMLError = NVMLError  # what the reader catches: pynvml.NVMLError

    def __init__(self, names, energy_mj, unsupported=()):
        self.names, self.energy_mj, self.unsupported = names, energy_mj, set(unsupported)
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.names[handle].encode() if handle == 0 else self.names[handle]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle in self.unsupported:
            raise NVMLError("Not Supported")
        return self.energy_mj[handle]


class NoGpuNvml(FakeNvml):
    def __init__(self):
        super().__init__([], [])

    def nvmlInit(self):
        raise NVMLError("Driver Not Loaded")


def test_nvml_reads_millijoules_per_gpu():
    nvml = FakeNvml(["NVIDIA H200", "NVIDIA H200"], [1_000_000, 2_000_000])
    meter, reason = open_energy("nvml", nvml=nvml)
    assert reason is None
    assert [s.device for s in meter.sources] == ["NVIDIA H200 (GPU 0)", "NVIDIA H200 (GPU 1)"]
    meter.start()
    nvml.energy_mj = [1_150_000, 2_250_500]
    meter.sample()
    e = meter.figures(generated_tokens=400)
    assert e.joules == pytest.approx(150 + 250.5)
    assert e.joules_per_token == pytest.approx(400.5 / 400)
    meter.close()
    assert nvml.shut


def test_an_nvml_gpu_without_energy_support_is_left_out_with_a_warning():
    nvml = FakeNvml(["A", "B"], [0, 0], unsupported={1})
    meter, _ = open_energy("nvml", nvml=nvml)
    assert [s.device for s in meter.sources] == ["A (GPU 0)"]
    assert "B (GPU 1): Not Supported" in meter.warnings[0]


def test_nvml_without_a_driver_is_not_available():
    sources, reason, _ = find_nvml(NoGpuNvml())
    assert sources == [] and "Driver Not Loaded" in reason


def test_the_real_nvml_module_without_a_gpu_says_why():
    pytest.importorskip("pynvml")
    sources, reason, close = find_nvml()
    close()
    if sources:
        pytest.skip("this machine has an NVIDIA GPU")
    assert reason and reason.startswith(("NVML", "nvidia-ml-py"))


@pytest.mark.parametrize(
    ("url", "simulated", "expected"),
    [
        ("http://127.0.0.1:8000/v1", False, "auto"),
        ("http://localhost:8000/v1", False, "auto"),
        ("http://[::1]:8000/v1", False, "auto"),
        ("http://gpu-box:8000/v1", False, "off"),
        ("http://10.0.0.5:8000/v1", False, "off"),
        ("http://127.0.0.1:8000/v1", True, "off"),
    ],
)
def test_auto_energy_reads_this_machine_only_for_a_local_server(url, simulated, expected):
    choice, note = energy_for_target("auto", base_url=url, simulated=simulated)
    assert choice == expected
    assert (note is None) == (expected == "auto")


def test_an_explicit_energy_kind_is_obeyed_for_a_remote_server():
    assert energy_for_target("nvml", base_url="http://gpu:8000/v1", simulated=False) == (
        "nvml",
        None,
    )
