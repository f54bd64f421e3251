"""workloads fit against the embedded simulator started with engine parameters the fit
cannot know (issue 36, Deliver 5): the fitted intervals hold the true values, or the fit is
within the tolerance stated below. Real sockets on 127.0.0.1; no timed assertion (a slow
host widens the intervals, it does not move the medians the fit reads)."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest

from workloads.cli import main
from workloads.core.fit import Estimate
from workloads.model.errors import ScenarioError
from workloads.model.target import Target
from workloads.runner.fit import fit_async, profile_toml
from workloads.servers.simulated import Profile, SimulatedServer
from workloads.servers.simulated.profiles import get_profile

# Smaller than the CLI's probe: the same four kinds of point in a third of the time.
PREFILL = (256, 1024, 2048)
STREAMS = (1, 2, 4, 8)
# Stated tolerance where an interval misses: 15% of the true value, or, for a cost per
# token or per sequence, what it adds to a step at the probe's largest regressor being
# under 5% of the true step there (a coefficient the probe barely moves is not known
# better than that, and matters less than that to a prediction in the probed range). The
# intervals are tight (±1% for the fixed step) and the simulator's steps run late on a
# host at load 6 on 2 cores: one fit in ~10 missed its fixed step's interval there. A
# median in place of the mean of chunk gaps (decode_s_per_seq 12% low, 0.6 ms at 8
# streams) fails this.
RELATIVE = 0.15
EFFECT = 0.05


def draw(seed: int) -> Profile:
    """Engine parameters from ranges around the named profiles, scaled to keep the probe
    short: steps of 2-12 ms, prefill 20-200 µs a token, a running limit that is sometimes
    below the probe's largest batch."""
    rng = random.Random(seed)
    return Profile(
        name=f"hidden-{seed}",
        step_fixed_s=rng.uniform(0.002, 0.012),
        prefill_s_per_token=10 ** rng.uniform(-4.7, -3.7),
        decode_s_per_seq=rng.uniform(0.0001, 0.0015),
        attend_s_per_token=10 ** rng.uniform(-8, -6.5),
        max_running=rng.choice([3, 5, 256]),
        kv_capacity_tokens=rng.randrange(20_000, 200_000),
        prefix_caching=rng.random() < 0.7,
    )


def close_enough(e: Estimate, truth: float, effect_at: float, step: float) -> bool:
    if e.contains(truth) or abs(e.value - truth) <= RELATIVE * truth:
        return True
    return abs(e.value - truth) * effect_at <= EFFECT * step


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_fit_recovers_hidden_engine_parameters(seed: int) -> None:
    truth = draw(seed)
    async with SimulatedServer(truth) as server:
        fitted = await fit_async(
            Target(server.base_url), prefill_tokens=PREFILL, batch_streams=STREAMS
        )
    e = fitted.estimates
    deepest = max(p for _, r in fitted.records if (p := r.prompt_tokens) is not None)
    step_deep = truth.step_fixed_s + truth.decode_s_per_seq + truth.attend_s_per_token * deepest
    step_wide = truth.step_fixed_s + 8 * truth.decode_s_per_seq
    checks = {
        "step_fixed_s": close_enough(e["step_fixed_s"], truth.step_fixed_s, 1, step_wide),
        "decode_s_per_seq": close_enough(
            e["decode_s_per_seq"], truth.decode_s_per_seq, 8, step_wide
        ),
        "attend_s_per_token": close_enough(
            e["attend_s_per_token"], truth.attend_s_per_token, deepest, step_deep
        ),
        "prefill_s_per_token": close_enough(
            e["prefill_s_per_token"],
            truth.prefill_s_per_token,
            deepest,
            truth.step_fixed_s + truth.prefill_s_per_token * deepest,
        ),
    }
    seen = {k: (getattr(truth, k), e[k].value, e[k].low, e[k].high) for k in checks}
    assert all(checks.values()), seen
    # What the server says, and the first wave, are exact.
    assert fitted.profile.kv_capacity_tokens == truth.num_blocks * truth.block_size
    assert fitted.profile.prefix_caching == truth.prefix_caching
    if truth.max_running < max(STREAMS):
        assert e["max_running"].value == truth.max_running
    else:
        assert e["max_running"].contains(truth.max_running)
        assert e["max_running"].low == max(STREAMS)
    # Every number names the requests that measured it, and they are in the records.
    for name in checks:
        assert e[name].requests and max(e[name].requests) < len(fitted.records)
    # The file round-trips into the profile the simulator runs.
    assert load_profile_text(profile_toml(fitted)) == fitted.profile


def load_profile_text(text: str) -> Profile:
    data = tomllib.loads(text)
    assert set(data["provenance"]) >= {"step_fixed_s", "prefill_s_per_token", "overhead_s"}
    data.pop("provenance")
    return Profile.model_validate(data)


def test_fit_cli_writes_a_profile_that_run_uses(tmp_path: Path) -> None:
    out = tmp_path / "server.toml"
    fast = ["--sim", "step_fixed_s=0.001", "--sim", "prefill_s_per_token=0.00001"]
    assert main(["fit", "--quiet", "--out", str(out), *fast]) == 0
    records = (tmp_path / "server.records.jsonl").read_text().splitlines()
    text = out.read_text()
    assert "[provenance.prefill_s_per_token]" in text and len(records) >= 20
    profile = get_profile(str(out))
    assert profile.step_fixed_s == pytest.approx(0.001, rel=0.3)
    # a second fit into the same file is refused, and nothing is written
    before = out.read_bytes()
    assert main(["fit", "--quiet", "--out", str(out), *fast]) == 2
    assert out.read_bytes() == before


def test_a_profile_file_with_a_wrong_field_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\nstep_fixed_s = -1.0\nprefill_s_per_token = 0.0\n'
        "decode_s_per_seq = 0.0\nattend_s_per_token = 0.0\n"
    )
    with pytest.raises(ScenarioError, match=r"bad\.toml: field 'step_fixed_s'"):
        get_profile(str(bad))
    with pytest.raises(ScenarioError, match=r"missing\.toml: cannot read"):
        get_profile(str(tmp_path / "missing.toml"))
