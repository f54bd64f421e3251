"""Named engine profiles: how fast the simulated engine is, and how much KV cache it has.

Per-step time = step_fixed_s + prefill_s_per_token × prefill tokens in the step
              + decode_s_per_seq × decoding sequences + attend_s_per_token × context tokens
              attended by the decoding sequences.
Override any field with ``--sim FIELD=VALUE``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workloads.errors import ScenarioError

__all__ = ["PROFILES", "Profile", "get_profile"]


class Profile(BaseModel):
    """Engine parameters of the simulated server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str = "sim-coder-8b"
    step_fixed_s: float = Field(ge=0.0)
    prefill_s_per_token: float = Field(ge=0.0)
    decode_s_per_seq: float = Field(ge=0.0)
    attend_s_per_token: float = Field(ge=0.0)
    token_budget: int = Field(8192, ge=1)  # chunked prefill: tokens per step
    max_running: int = Field(256, ge=1)  # sequences decoding at once
    kv_capacity_tokens: int = Field(4_000_000, ge=16)
    block_size: int = Field(16, ge=1)
    max_model_len: int = Field(262_144, ge=16)
    seed: int = 0


PROFILES: dict[str, Profile] = {
    # Fast enough that five-user-coding (60 turns of 512 tokens) finishes in well under a
    # minute on a 2-core machine with client and server in one process: about 250 tok/s per
    # user at C5, prefill about 200K tok/s. For demos and tests, not a claim about hardware.
    "fast": Profile(
        name="fast",
        step_fixed_s=0.0025,
        prefill_s_per_token=5e-6,
        decode_s_per_seq=0.0003,
        attend_s_per_token=1e-9,
    ),
}


def get_profile(name: str, overrides: dict[str, object] | None = None) -> Profile:
    """A named profile with ``--sim`` overrides applied and validated."""
    if name not in PROFILES:
        raise ScenarioError(f"no simulator profile {name!r}; known: {', '.join(PROFILES)}")
    data = PROFILES[name].model_dump()
    for key, value in (overrides or {}).items():
        if key not in data:
            raise ScenarioError(f"--sim {key}: no such profile field; fields: {', '.join(data)}")
        data[key] = value
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"--sim {field}: {first['msg']}") from err
