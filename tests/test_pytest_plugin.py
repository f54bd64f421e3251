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
