from __future__ import annotations

import pytest

# The simulated_server fixture and run_scenario come from workloads' own pytest plugin
# (entry point "workloads"), exactly as users get them.


@pytest.fixture
def tiny_scenario():
    import workloads

    return workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=600",
            "turn_tokens=120",
            "output_tokens=24",
            "repetitions.warmup=1",
            "repetitions.measured=1",
        ]
    )
