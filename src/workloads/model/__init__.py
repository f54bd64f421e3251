"""The data a run reads and writes (lowest layer): scenario, target, TurnRecord, summaries,
saved telemetry and the RunResult file. Pydantic models, frozen; no network I/O."""
