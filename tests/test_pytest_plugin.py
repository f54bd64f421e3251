"""The plugin's fixtures, used exactly as the README shows users."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_cache_serves_later_turns(run_scenario, simulated_server):
    result = run_scenario(
        "five-user-coding",
        set=["users=2", "repetitions.measured=1", "opening_tokens=800", "output_tokens=32"],
    )
    assert result.summary.run.valid == result.summary.run.records
    assert all(t.cache_effectiveness >= 0.9 for t in result.summary.turns[1:])
    # 2 users × 3 turns × (1 warm-up + 1), and the correctness gate's 6 cases before and after
    assert len(simulated_server.truths()) == 12 + 12
    assert result.gate is not None and result.gate.passed


def test_plugin_is_registered_for_an_installed_package(pytester):
    pytester.makepyfile(
        """
        def test_uses_fixture(simulated_server):
            assert simulated_server.base_url.startswith("http://127.0.0.1:")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_plugin_loads_nothing_heavy_when_no_fixture_runs():
    # Counted in modules, not milliseconds (machine speed varies): pydantic, aiohttp and rich
    # are what cost 0.4-0.8 s at every pytest start when the plugin imported them.
    import subprocess
    import sys

    code = (
        "import sys, pytest; before = set(sys.modules); import workloads.pytest_plugin; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    assert "workloads.pytest_plugin" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in {"pydantic", "aiohttp", "rich", "yarl"}]
    assert heavy == []
    assert [m for m in loaded if m.startswith("workloads")] == [
        "workloads",
        "workloads._version",
        "workloads.pytest_plugin",
    ]


def test_run_scenario_refuses_simulator_overrides_it_cannot_apply(run_scenario, simulated_server):
    import pytest

    import workloads

    for target in (None, simulated_server.target):
        with pytest.raises(workloads.OptionsError, match=r"workloads\.run\(scenario, sim="):
            run_scenario("five-user-coding", sim={"kv_capacity_tokens": 30_000}, target=target)
    assert simulated_server.truths() == []  # it ran nothing, rather than ignore sim=
