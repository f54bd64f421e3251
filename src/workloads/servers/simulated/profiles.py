"""Named engine profiles: how fast the simulated engine is, how much KV cache it has, whether
it speculates, and which faults it injects. Override any field with ``--sim FIELD=VALUE``
(fault fields with ``--sim faults.FIELD=VALUE``).

Per-step time of the engine's one step loop::

    step_fixed_s
    + prefill_s_per_token * prompt tokens computed in the step (chunks, recomputes)
    + decode_s_per_seq    * sequences decoding in the step
    + draft_s_per_token   * draft tokens verified in the step (speculative decoding)
    + attend_s_per_token  * context tokens attended (each scheduled sequence reads the KV it
                            already has once per step)

Profiles
--------
``fast``
    For demos and tests. Fast enough that five-user-coding (60 turns of 512 tokens) finishes
    in about half a minute on a 2-core machine with client and server in one process: about
    250 tok/s per user at C5, prefill about 200K tok/s, KV effectively unlimited (4M tokens).
    Not a claim about any hardware.

``arc-b70-27b``
    One Intel Arc Pro B70 (32 GB) serving a dense 27B INT4 model with patched vLLM XPU, from
    two hand-made benchmark records of that stack (a depth sweep and a 5-user A/B):

    * KV capacity 46,202 tokens: seed 000 ``cold_native_kv_capacity`` at
      gpu_memory_utilization 0.9 (measured with the MTP-4 drafter loaded).
    * token budget 8,192 (both seeds' ``scheduler_token_ceiling``); max_model_len 40,000
      (seed 000's matched workload).
    * Decode without speculation: 27.006 tok/s at 6,146 prompt + 512 generated (mean context
      ≈ 6,402) and 24.838 tok/s at 34,819 + 512 (≈ 35,075), seed 000. Step times 37.03 ms and
      40.26 ms, so attend_s_per_token = (40.26 - 37.03) ms / 28,673 tokens ≈ 1.127e-7 s, and
      step_fixed_s + decode_s_per_seq = 37.03 ms - 6,402 * 1.127e-7 s ≈ 36.3 ms. The split
      (35.3 ms fixed, 1.0 ms per sequence) is an assumption: a memory-bound dense model reads
      its weights once per step whatever the batch; the seeds have no C5 run without MTP.
    * Prefill: seed 001 cold 8K cell, TTFT 4,738.1 ms for 8,190 prompt tokens, one step:
      (4,738.1 - 35.3) ms / 8,190 ≈ 5.742e-4 s per token (≈ 1,742 tok/s marginal, 1,729 tok/s
      as prompt/TTFT). Check: the 516-token cell gives 35.3 + 516 * 0.574 ≈ 332 ms against
      383 ms measured (that arm also ran a drafter).
    * Speculative decoding is off (``spec_tokens`` 0). With ``--sim spec_tokens=4`` the other
      two numbers reproduce seed 001's draft-INT4 MTP-4 cell at 8K (72.55 tok/s, acceptance
      0.5676 = accepted/draft tokens): spec_acceptance 0.786 gives (p+p²+p³+p⁴)/4 = 0.5676,
      so 3.27 tokens per step; 3.27 / 72.55 = 45.1 ms per step against 37.25 ms without
      drafts, so draft_s_per_token = (45.1 - 37.25) / 4 ≈ 1.96 ms. Seed 000's graph-disabled
      MTP runs were far slower; this models the graph-enabled stack.
    * Not modelled: the hybrid (Gated DeltaNet) layers' state caching, attention cost that
      grows with chunk * context inside long prefills.

``h200-8b``
    Rough, not calibrated against a measured record: one H200 (141 GB HBM3e, 4.8 TB/s) serving
    an 8B dense BF16 model (Qwen3-8B shape: 36 layers, 8 KV heads * 128, so 144 KiB of KV per
    token) with vLLM defaults.

    * KV: 0.9 * 141 GB - 16.4 GB weights - ~4 GB activations ≈ 106 GB / 147,456 B ≈ 720,000.
    * Decode: weight read 16.4 GB / 4.8 TB/s ≈ 3.4 ms; with launch and sampling overheads
      ≈ 5.5 ms fixed, 0.05 ms per sequence; KV read 147,456 B / 4.8 TB/s ≈ 3.1e-8 s per
      context token.
    * Prefill: 2 * 8e9 FLOP per token at ~45% of 989 TFLOPS ≈ 28K tok/s → 3.6e-5 s per token.
    * token budget 8,192, max 1,024 running sequences (vLLM's server defaults for cards with
      70 GiB or more), max_model_len 40,960.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from workloads.model.base import Frozen
from workloads.model.errors import ScenarioError

__all__ = [
    "PROFILES",
    "Faults",
    "Profile",
    "expected_acceptance_rate",
    "get_profile",
    "load_profile",
]


class Faults(Frozen):
    """Failures the simulated server injects, for reliability tests. All off by default.

    Each ``rate_*`` is the probability that one request gets that fault; a request gets at
    most one. The draw is made from the profile's ``seed`` and the request's arrival number,
    so a run with the same arrival order gets the same faults.

    * ``rate_429`` — HTTP 429 with ``Retry-After: retry_after_s`` and an OpenAI error body;
    * ``rate_500`` — HTTP 500 with an error body;
    * ``rate_disconnect`` — the connection is cut after ``after_tokens`` content tokens;
    * ``rate_stall`` — the stream pauses ``stall_s`` seconds after ``after_tokens`` tokens;
    * ``rate_malformed`` — a broken ``data:`` line (truncated JSON) after ``after_tokens``;
    * ``rate_error_in_stream`` — a ``data: {"error": ...}`` chunk inside the HTTP 200
      stream after ``after_tokens`` tokens, then ``[DONE]``;
    * ``rate_early_stop`` — the reply ends with finish_reason "stop" after ``after_tokens``
      tokens even when ``ignore_eos``/``min_tokens`` asked for more;
    * ``rate_corrupt`` — the output is corrupt: its first three tokens repeated to the
      request's ``max_tokens`` (what a broken graph replay or draft path emits at full
      speed), a clean HTTP 200 stream of the right length. The correctness gate fails and
      the degeneration detector flags the turn.
    """

    rate_429: float = Field(default=0.0, ge=0.0, le=1.0)
    retry_after_s: float = Field(default=1.0, ge=0.0)
    rate_500: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_disconnect: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_stall: float = Field(default=0.0, ge=0.0, le=1.0)
    stall_s: float = Field(default=5.0, ge=0.0)
    rate_malformed: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_error_in_stream: float = Field(default=0.0, ge=0.0, le=1.0)
    rate_early_stop: float = Field(default=0.0, ge=0.0, le=1.0)
    after_tokens: int = Field(default=8, ge=0)
    rate_corrupt: float = Field(default=0.0, ge=0.0, le=1.0)

    def rates(self) -> list[tuple[str, float]]:
        """(fault kind, probability) in the fixed order the draw walks them."""
        return [
            ("429", self.rate_429),
            ("500", self.rate_500),
            ("disconnect", self.rate_disconnect),
            ("stall", self.rate_stall),
            ("malformed", self.rate_malformed),
            ("error_in_stream", self.rate_error_in_stream),
            ("early_stop", self.rate_early_stop),
            ("corrupt", self.rate_corrupt),  # last: the other faults keep their draws
        ]

    def pick(self, u: float) -> str | None:
        """The fault for a uniform draw ``u`` in [0, 1), or None."""
        edge = 0.0
        for kind, rate in self.rates():
            edge += rate
            if u < edge:
                return kind
        return None

    @model_validator(mode="after")
    def _rates_sum_to_at_most_one(self) -> Faults:
        total = sum(rate for _, rate in self.rates())
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {total:g}; at most 1 (one fault a request)")
        return self


class Profile(Frozen):
    """Engine parameters of the simulated server (see the module doc for the step-time
    formula and how each named profile was derived)."""

    name: str
    model: str = "sim-coder-8b"
    step_fixed_s: float = Field(ge=0.0)
    prefill_s_per_token: float = Field(ge=0.0)
    decode_s_per_seq: float = Field(ge=0.0)
    attend_s_per_token: float = Field(ge=0.0)
    draft_s_per_token: float = Field(default=0.0, ge=0.0)
    token_budget: int = Field(default=8192, ge=1)  # chunked prefill: tokens computed per step
    max_running: int = Field(default=256, ge=1)  # sequences in the running batch at once
    kv_capacity_tokens: int = Field(default=4_000_000, ge=16)
    block_size: int = Field(default=16, ge=1)
    max_model_len: int = Field(default=262_144, ge=16)
    # "prompt": admit a request only when blocks for its whole uncached prompt are free, and
    # reserve them (a prefill is never preempted by its own later chunks). "chunk": vLLM's
    # default, allocate per scheduled chunk and let the preemption loop sort it out.
    admission: Literal["prompt", "chunk"] = "prompt"
    prefix_caching: bool = True  # vLLM --enable-prefix-caching (the seeds' cold arms: off)
    spec_tokens: int = Field(default=0, ge=0, le=16)  # draft tokens proposed per step; 0 = off
    # Probability that a draft token is accepted given every earlier draft of the step was;
    # the counters' acceptance rate is then expected_acceptance_rate(spec_tokens, this).
    spec_acceptance: float = Field(default=0.7, ge=0.0, le=1.0)
    seed: int = 0  # replies, acceptance draws and faults are deterministic per seed
    # Tool calls (servers/simulated/tools.py): when a request offers ``tools`` (and
    # ``tool_choice`` is not "none"), this share of its replies end in tool calls. TraceLab's
    # coding-agent traces call a tool on almost every step (mean 1.2 calls a step, p99 4).
    tool_call_share: float = Field(default=0.85, ge=0.0, le=1.0)
    # Of the replies with tool calls, the share that make 2 to 4 calls at once.
    parallel_tool_call_share: float = Field(default=0.1, ge=0.0, le=1.0)
    # Leading tokens of every reply streamed as ``delta.reasoning_content`` (a thinking
    # model behind vLLM's reasoning parser): counted in completion_tokens, not in the content.
    # 0 = off, unless the request asks ``chat_template_kwargs: {"enable_thinking": true}``,
    # which then gets THINKING_TOKENS; ``"enable_thinking": false`` turns it off.
    reasoning_tokens: int = Field(default=0, ge=0, le=32_768)
    faults: Faults = Field(default_factory=Faults)

    @property
    def num_blocks(self) -> int:
        """KV blocks the capacity holds (vLLM's ``num_gpu_blocks``)."""
        return self.kv_capacity_tokens // self.block_size


def expected_acceptance_rate(spec_tokens: int, p: float) -> float:
    """Expected accepted/draft tokens when each of ``spec_tokens`` drafts is accepted with
    probability ``p`` given all before it were (a prefix is accepted): (p + … + p^k) / k."""
    if spec_tokens <= 0:
        return 0.0
    return sum(p**i for i in range(1, spec_tokens + 1)) / spec_tokens


PROFILES: dict[str, Profile] = {
    "fast": Profile(
        name="fast",
        step_fixed_s=0.0025,
        prefill_s_per_token=5e-6,
        decode_s_per_seq=0.0003,
        attend_s_per_token=1e-9,
        draft_s_per_token=0.0001,
    ),
    "arc-b70-27b": Profile(
        name="arc-b70-27b",
        model="sim-dense-27b-int4",
        step_fixed_s=0.0353,
        prefill_s_per_token=5.742e-4,
        decode_s_per_seq=0.0010,
        attend_s_per_token=1.127e-7,
        draft_s_per_token=0.00196,
        token_budget=8192,
        max_running=256,
        kv_capacity_tokens=46_202,
        max_model_len=40_000,
        spec_acceptance=0.786,
    ),
    "h200-8b": Profile(
        name="h200-8b",
        model="sim-dense-8b",
        step_fixed_s=0.0055,
        prefill_s_per_token=3.6e-5,
        decode_s_per_seq=0.00005,
        attend_s_per_token=3.1e-8,
        draft_s_per_token=0.0006,
        token_budget=8192,
        max_running=1024,
        kv_capacity_tokens=720_000,
        max_model_len=40_960,
    ),
}


def _set(data: dict[str, Any], dotted: str, value: object, full: str = "") -> None:
    full = full or dotted  # the field as the user wrote it, for the message
    head, _, rest = dotted.partition(".")
    if head not in data:
        raise ScenarioError(
            f"simulator override {full!r}: no such profile field; fields: {', '.join(data)}"
        )
    if rest:
        inner = data[head]
        if not isinstance(inner, dict):
            raise ScenarioError(f"simulator override {full!r}: {head} has no fields")
        _set(inner, rest, value, full)
    else:
        if isinstance(data[head], dict):
            raise ScenarioError(
                f"simulator override {full!r}: set one of its fields, e.g. "
                f"'{full}.{next(iter(data[head]))}'"
            )
        data[head] = value


def get_profile(name: str | Profile, overrides: dict[str, object] | None = None) -> Profile:
    """A named profile (or a given one) with overrides (``sim=``, ``--sim``) applied and
    validated.

        get_profile("arc-b70-27b", {"spec_tokens": 4, "faults.rate_429": 0.1})
    """
    if isinstance(name, Profile):
        data = name.model_dump()
    elif name in PROFILES:
        data = PROFILES[name].model_dump()
    elif name.endswith(".toml"):
        data = load_profile(name).model_dump()
    else:
        raise ScenarioError(
            f"no simulator profile {name!r}; known: {', '.join(PROFILES)}, or a "
            "profile file (FILE.toml, as `workloads fit` writes)"
        )
    for key, value in (overrides or {}).items():
        _set(data, key, value)
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"simulator override {field!r}: {first['msg']}") from err


def load_profile(path: str | Path) -> Profile:
    """A profile from a TOML file (what ``workloads fit`` writes; ``--sim
    profile=FILE.toml``): the Profile's fields at the top level, and a ``[provenance]``
    table that says where each number came from (read by people, ignored here). Raises
    :class:`ScenarioError` naming the file and the field.

        load_profile("server.toml").prefill_s_per_token
    """
    where = Path(path)
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(f"simulator profile {where}: cannot read it ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"simulator profile {where}: not TOML: {err}") from err
    data.pop("provenance", None)
    data.setdefault("name", where.stem)
    try:
        return Profile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"simulator profile {where}: field {field!r}: {first['msg']}") from err


def sim_profile(sim: Mapping[str, object] | None, default: str | Profile = "fast") -> Profile:
    """The profile that simulator overrides make of ``default``, validated: ``profile=NAME``
    among them picks the named profile (``--sim profile=arc-b70-27b``) or a profile file
    (``--sim profile=server.toml``, :func:`load_profile`), the others set its
    fields. Raises :class:`ScenarioError` naming the first field that is not one, or not
    valid; the CLI calls it before anything starts.

        sim_profile({"profile": "h200-8b", "spec_tokens": 2})
    """
    overrides = dict(sim or {})
    base = overrides.pop("profile", None)
    return get_profile(str(base) if base is not None else default, overrides)
