"""The library embedded in someone else's program: run() inside a running loop (Jupyter, an
async harness), the same arguments as run_async, client= that says what it turns off,
errors worded for a library caller (the CLI words them with flags), the ``workloads`` logger,
and telemetry that keeps the world's failures as warnings but lets the library's bugs out."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

import workloads
from fakes import FakeChatClient
from workloads.cli import main
from workloads.telemetry import TelemetryOptions, WindowTelemetry

TESTS = Path(__file__).parent


def tiny(*overrides: str) -> workloads.Scenario:
    return workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=300",
            "turn_tokens=50",
            "output_tokens=8",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            *overrides,
        ]
    )


def fake() -> FakeChatClient:
    return FakeChatClient(lambda body: (100, "ok"))


# --- run() inside a running loop -------------------------------------------------------------


def test_run_takes_exactly_run_asyncs_arguments():
    sync, coro = inspect.signature(workloads.run), inspect.signature(workloads.run_async)
    assert list(sync.parameters.values()) == list(coro.parameters.values())
    assert sync.return_annotation == coro.return_annotation
    assert len(sync.parameters) >= 17  # explicit, not **options


async def test_run_inside_a_running_loop_runs_on_a_loop_of_its_own(tmp_path):
    caller = asyncio.get_running_loop()
    threads = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = workloads.run(
            tiny(),
            out_dir=tmp_path / "r",
            on_record=lambda r: threads.append(threading.current_thread()),
        )
        gc.collect()  # a coroutine never awaited warns when it is collected
    assert [str(w.message) for w in caught] == []
    assert asyncio.get_running_loop() is caller
    assert result.complete and len(result.records) == 4
    assert {t.name for t in threads} == {"workloads-loop"}  # the embedded server answered there
    assert workloads.load_result(tmp_path / "r").complete
    assert not [t for t in threading.enumerate() if t.name == "workloads-loop"]


def test_run_from_inside_asyncio_run_returns_the_result():
    async def harness() -> workloads.RunResult:
        return workloads.run(tiny())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = asyncio.run(harness())
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert result.complete and all(r.valid for r in result.records)


def test_an_error_of_the_run_reaches_the_caller_inside_a_loop():
    async def harness() -> None:
        workloads.run(tiny(), workers=0)

    with pytest.raises(workloads.OptionsError, match="workers=0"):
        asyncio.run(harness())


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"workers": "3"}, "workers='3': give a whole number of processes"),
        ({"workers": 2.0}, "workers=2.0: give a whole number of processes"),
        ({"stop_grace_s": "5"}, "stop_grace_s='5': give seconds as a number"),
    ],
)
def test_an_argument_of_the_wrong_type_is_named_not_a_type_error(tmp_path, options, said):
    with pytest.raises(workloads.OptionsError) as raised:
        workloads.run(tiny(), out_dir=tmp_path / "r", **options)
    assert str(raised.value).startswith(said)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("caller", ["asyncio.run", "run_until_complete"])
def test_ctrl_c_while_run_waits_inside_a_loop_cancels_the_run_and_saves_it(
    tmp_path, caller, request
):
    """asyncio.run's SIGINT handler cancels the caller's task (which is blocked in run());
    a loop without one (Jupyter's kernel) raises KeyboardInterrupt in it. Either way the
    run is cancelled, saves its partial result, and the interruption propagates."""
    out = tmp_path / "r"
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    sent = []
    # A user's Python starts with SIGINT's default handler, and asyncio.run installs its own
    # only over that one; a pytest-xdist worker starts with SIGINT ignored (until some CLI
    # run in it restores the default), so the test sets what a user's process has.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))

    def on_record(record: workloads.TurnRecord) -> None:
        if not sent:  # the first turn is in: Ctrl-C, as a user would press it
            sent.append(record)
            signal.pthread_kill(main_thread, signal.SIGINT)

    # The first turn answers at once; every later one would take a minute (cancelled long
    # before: the test fails, not hangs, if the interruption is lost).
    client = FakeChatClient(lambda body: (100, "ok"), delay=lambda body: 0.0 if not sent else 60.0)

    async def harness() -> None:
        workloads.run(tiny("users=1", "turns=3"), out_dir=out, client=client, on_record=on_record)

    with pytest.raises(KeyboardInterrupt):
        if caller == "asyncio.run":
            asyncio.run(harness())
        else:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(harness())
            finally:
                loop.close()
    saved = workloads.load_result(out)
    assert not saved.complete
    seen = [(r.turn, r.status, r.error_kind) for r in saved.records]
    # Turn 1 is kept; turn 2 is recorded cancelled if it was sent before the interruption
    # landed, and not at all if it landed while turn 2 was being prepared (nothing was sent).
    assert seen in ([(1, "ok", None)], [(1, "ok", None), (2, "incomplete", "cancelled")]), seen
    assert not [t for t in threading.enumerate() if t.name == "workloads-loop"]


# --- client= says what it turns off ----------------------------------------------------------


def test_a_replaced_client_says_what_it_turned_off(caplog):
    with caplog.at_level(logging.WARNING, logger="workloads"):
        result = workloads.run(tiny(), client=fake())
    said = [w for w in result.warnings if w.startswith("client= replaced the HTTP client")]
    assert len(said) == 1
    assert "correctness gate was not sent" in said[0] and "energy" in said[0]
    assert f"model {result.target.model!r}" in said[0] and "tiktoken" in said[0]
    assert "likelihood probe was not sent" in said[0] and result.likelihood is None
    assert result.scenario.gate == "off" and result.gate is None
    energy = result.window.energy
    assert energy is not None and "client=" in (energy.not_available or "")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == said


def test_a_replaced_client_with_telemetry_asked_for_does_not_claim_it_off():
    result = workloads.run(
        tiny("gate=off"), client=fake(), telemetry=TelemetryOptions(metrics=False, energy="off")
    )
    said = [w for w in result.warnings if w.startswith("client=")]
    assert len(said) == 1 and "energy" not in said[0] and "gate" not in said[0]


# --- errors worded for a library caller, flags in the CLI ------------------------------------


@pytest.mark.parametrize(
    ("options", "option", "says"),
    [
        ({"workers": 0}, "workers", "workers=0: give 1 or more processes"),
        ({"stop_grace_s": -1.0}, "stop_grace_s", "stop_grace_s=-1.0: give seconds, 0 or more"),
        ({"replay": "/no/such/run"}, "replay", "replay='/no/such/run': no such run directory"),
        ({"workers": 2, "client": "fake"}, "client", "client= cannot be combined with workers=2"),
        (
            {"workers": 3, "replay": "runs/a"},
            "replay",
            "replay='runs/a' cannot be combined with workers=3",
        ),
        (
            {"trace": "mooncake-sample", "replay": "runs/a"},
            "trace",
            "trace='mooncake-sample' cannot be combined with replay='runs/a'",
        ),
    ],
)
def test_arguments_that_cannot_work_together_are_an_options_error(tmp_path, options, option, says):
    if options.get("client") == "fake":
        options["client"] = fake()
    with pytest.raises(workloads.OptionsError) as raised:
        workloads.run(tiny(), out_dir=tmp_path / "r", **options)
    err = raised.value
    assert isinstance(err, workloads.WorkloadsError) and isinstance(err, ValueError)
    assert err.option == option
    assert says in str(err) and "--" not in str(err)
    assert not (tmp_path / "r").exists()  # refused before anything was made


def test_the_cli_words_an_options_error_with_its_flags(tmp_path, capsys):
    code = main(
        [
            "run",
            "--trace",
            "mooncake-sample",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "r"),
            "--quiet",
            "--no-plots",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: --trace ") and "mooncake-sample.jsonl" in err
    assert "cannot be combined with --workers 2" in err and "=" not in err
    assert main(["run", "--replay", "/no/such/run", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == "error: --replay /no/such/run: no such run directory\n"


def test_a_scenario_override_error_is_worded_for_its_caller_and_for_the_cli(tmp_path, capsys):
    with pytest.raises(workloads.ScenarioError) as raised:
        tiny("nosuch=1")
    assert str(raised.value).startswith("scenario override 'nosuch=1': no field 'nosuch'")
    code = main(["run", "five-user-coding", "--set", "nosuch=1", "--out", str(tmp_path / "r")])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --set 'nosuch=1': no field 'nosuch'")


def test_a_simulator_override_error_is_worded_for_its_caller_and_for_the_cli(tmp_path, capsys):
    with pytest.raises(workloads.ScenarioError) as raised:
        workloads.SimulatedServer(sim={"nosuch": 1})
    assert str(raised.value).startswith("simulator override 'nosuch': no such profile field")
    code = main(
        ["run", "five-user-coding", "--sim", "nosuch=1", "--out", str(tmp_path / "r"), "--quiet"]
    )
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --sim 'nosuch': no such profile field")


def test_a_target_field_is_named_as_the_library_spells_it_and_the_cli_as_a_flag(tmp_path, capsys):
    missing = str(tmp_path / "none.pem")
    with pytest.raises(workloads.TargetError) as raised:
        workloads.run(tiny(), workloads.Target("https://127.0.0.1:1/v1", ca_bundle=missing))
    assert str(raised.value).startswith(f"Target.ca_bundle {missing}: no such file")
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            "https://127.0.0.1:1/v1",
            "--ca-bundle",
            missing,
            "--out",
            str(tmp_path / "r"),
            "--quiet",
        ]
    )
    assert code == 2  # a bad argument (README), checked before --out exists
    assert capsys.readouterr().err.startswith(f"error: --ca-bundle {missing}: no such file")


# --- the workloads logger ------------------------------------------------------------------


def test_the_logger_tells_a_runs_start_cells_and_end(caplog):
    with caplog.at_level(logging.INFO, logger="workloads"):
        workloads.run(tiny("concurrency=[1, 2]"))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("workloads.")]
    assert lines[0].startswith(
        "run of five-user-coding: 2 cells × 1 repetitions against the embedded simulated server"
    )
    assert sum(line.startswith("cell ") for line in lines) == 2
    assert lines[-1].startswith("run of five-user-coding finished: complete, 6 records")
    assert len(lines) == 4  # nothing per turn


def test_the_logger_is_silent_without_a_logging_configuration(tmp_path):
    """A run that logs a WARNING (client= replaced) prints nothing on stderr when the
    application configured no logging: the package's NullHandler keeps Python's last-resort
    handler quiet."""
    code = (
        "import logging, workloads; "
        "from fakes import FakeChatClient; "
        "s = workloads.load_scenario('five-user-coding').with_overrides(['users=1', "
        "'turns=1', 'opening_tokens=300', 'repetitions.warmup=0', "
        "'repetitions.measured=1']); "
        "r = workloads.run(s, client=FakeChatClient(lambda b: (100, 'ok'))); "
        "assert any(w.startswith('client=') for w in r.warnings); "
        "assert logging.getLogger('workloads').isEnabledFor(logging.WARNING)"
    )
    # this workloads (a checkout's, when it is not the installed one) and tests/fakes.py
    path = os.pathsep.join([str(Path(workloads.__file__).parents[1]), str(TESTS)])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


# --- telemetry: the world's failures are warnings, the library's bugs propagate -------------


class NVMLError(Exception):
    """pynvml's error type, as the stand-in raises it."""


class OneGpuNvml:
    """The pynvml functions the energy reader calls, for one GPU whose counter read raises
    ``fails_with`` from the third read on (the first two: checking it, the window's start)."""

    NVMLError = NVMLError

    def __init__(self, fails_with: Exception) -> None:
        self.fails_with = fails_with
        self.reads = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self.reads += 1
        if self.reads > 2:
            raise self.fails_with
        return 1_000_000 * self.reads


def window(nvml: OneGpuNvml) -> WindowTelemetry:
    return WindowTelemetry(
        TelemetryOptions(metrics=False, energy="nvml"), metrics_url=None, nvml=nvml
    )


async def test_a_counter_the_driver_cannot_read_costs_its_figure_not_the_window():
    async with window(OneGpuNvml(NVMLError("GPU is lost"))) as telemetry:
        await telemetry.start()
        _, energy = await telemetry.finish([])
    assert energy is not None and energy.joules is None
    assert "GPU is lost" in (energy.not_available or "")
    assert any("GPU is lost" in w for w in telemetry.warnings)


async def test_a_bug_under_the_window_propagates_instead_of_becoming_a_warning():
    """A TypeError from a counter read is no driver's failure: the window used to turn it
    into "energy not available: reading it failed" and carry on."""
    async with window(OneGpuNvml(TypeError("a bug in the reader"))) as telemetry:
        await telemetry.start()
        with pytest.raises(TypeError, match="a bug in the reader"):
            await telemetry.finish([])
    assert telemetry.warnings == []


def test_the_cli_translation_covers_every_library_spelling():
    from workloads.cli.common import flag_words

    assert flag_words(
        "replay='runs/a' cannot be combined with workers=2, ray='auto': "
        "a replay sends from this process (workers=1)"
    ) == (
        "--replay runs/a cannot be combined with --workers 2, --ray auto: a replay sends "
        "from this process (--workers 1)"
    )
    assert flag_words(
        "pass overwrite=True or choose another out_dir='x'; "
        "transcripts=False; Target.model, Target.proxy, Target.ca_bundle, "
        "Target.insecure"
    ) == (
        "pass --overwrite or choose another --out x; --no-transcripts; --model, --proxy, "
        "--ca-bundle, --insecure"
    )
    # field names that merely contain an argument's name are left alone
    assert flag_words("agent.trace=3 and trace.max_requests=2") == (
        "agent.trace=3 and trace.max_requests=2"
    )
