"""A run's lifetime: set-up (``run``), cells and windows (``cells``), repetitions, sessions,
sizing, pacing, the client's self-monitor, and the RunResult made of what was measured
(``outcome``). The public entry is :func:`workloads.run` / :func:`workloads.run_async`."""
