"""--ray: the workers as Ray actors on a real local Ray cluster (started here, on 127.0.0.1),
merged into one run with every record's host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workloads
from workloads.servers.simulated import SimulatedServer

pytestmark = pytest.mark.slow

# Ray binds its own services to 127.0.0.1 only when told that this machine is not a cluster
# (its switch for laptops); read at import, so before Ray is imported anywhere in this process.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
os.environ.update(LOOPBACK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_cli is None:
        pytest.fail("the ray CLI is missing: install the test extra (pip install -e '.[test]')")
    port = _free_port()
    env = {**os.environ, **LOOPBACK}
    temp = tmp_path_factory.mktemp("ray")
    # `ray start` leads a session of its own: every process of the cluster (its services,
    # their agents and the workers) is in its process group, which the end kills at once
    # (`ray stop` would stop every Ray cluster on the machine, and polls for seconds).
    start = subprocess.Popen(
        [
            ray_cli,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--include-log-monitor=false",  # the run does not log to its driver
            "--object-store-memory=80000000",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = start.communicate(timeout=180)
        assert start.returncode == 0, err[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        start.kill()  # still starting (timed out or interrupted): its group goes below
        start.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(start.pid, signal.SIGKILL)


async def test_a_ray_run_merges_into_one_result(cluster: str, tmp_path: Path) -> None:
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=4",
            "turns=2",
            "opening_tokens=600",
            "turn_tokens=80",
            "output_tokens=24",
            "repetitions.warmup=1",
            "repetitions.measured=1",
            "gate=off",
        ]
    )
    async with SimulatedServer() as server:
        result = await workloads.run_async(
            scenario, server.target, out_dir=tmp_path, workers=2, ray=cluster
        )
    assert result.complete
    assert result.client is not None and result.client.processes == 2
    assert len(result.records) == 4 * 2 * 2
    assert all(r.status == "ok" and r.valid for r in result.records)
    assert all(r.host for r in result.records)  # every record says where it was sent from
    assert sorted({r.session for r in result.records}) == [0, 1, 2, 3]
    lines = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert sum(1 for line in lines if "kind" not in line) == 16
    assert result.summary.run.aggregate_rate is not None
