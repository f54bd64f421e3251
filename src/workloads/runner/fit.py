"""fit(): measure a server from outside (HTTP and /metrics only) and fit the simulated
engine's profile to it, every number with its interval and the probe requests behind it.

    fitted = await fit_async(Target("http://127.0.0.1:8080/v1"))
    Path("server.toml").write_text(profile_toml(fitted))
    python -m workloads fit --target http://127.0.0.1:8080/v1 --out server.toml

The probes, in order (each prompt opens with a nonce, so nothing of it is cached):

1. **/metrics** (and llama.cpp's /props): vLLM's ``cache_config_info`` gives the KV
   capacity, block size and whether prefix caching is on; llama.cpp's /props its slots and
   context. Nothing here is guessed: a server that says nothing leaves them "not measured".
2. **prefill** (after one short warm-up request, left out): cold prompts of
   :data:`PREFILL_TOKENS` sent alone, :data:`PREFILL_REPEATS` times each, each streaming
   :data:`PREFILL_OUTPUT` tokens: TTFT against uncached tokens (the prefill cost), and the
   chunk gaps of one stream against its context.
3. **prefix cache**: the first prefill prompt sent again: its cached tokens, or its TTFT
   against the cold one where the server does not report them.
4. **batch**: :data:`BATCH_STREAMS` streams sent together, :data:`BATCH_OUTPUT` tokens each:
   chunk gaps against streams decoding, and the first wave (the running-sequence limit).

Then :func:`workloads.core.fit.fit_engine` fits the step time. Every request's TurnRecord is
kept (:attr:`Fitted.records`; the CLI saves them beside the profile). The library never
prints: ``progress`` gets one line per probe.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloads.core.corpus import cold_prompt
from workloads.core.fit import (
    Estimate,
    PrefillPoint,
    StreamStamps,
    decode_points,
    first_wave,
    fit_engine,
)
from workloads.model.errors import TargetError
from workloads.model.records import TurnRecord
from workloads.model.scenario import Timeouts
from workloads.model.target import Target
from workloads.runner.turn import RecordHead, record_from_response
from workloads.servers.simulated.profiles import Profile
from workloads.telemetry.prometheus import Snapshot
from workloads.telemetry.scrape import get_json, scrape
from workloads.telemetry.servers import kv_capacity_tokens
from workloads.wire.client import ChatResponse, HttpChatClient
from workloads.wire.identify import identify
from workloads.wire.transport import transport_for

__all__ = ["Fitted", "fit_async", "profile_toml"]

# Prompt sizes (tiktoken tokens; the server's count is what the fit uses): from one chunk of
# any server's batch to past llama.cpp's default n_batch (2,048), under the 8K context a small
# deployment gives a slot. Two of each: one prompt's TTFT is one sample of a noisy host.
PREFILL_TOKENS = (256, 1024, 2048, 4096)
PREFILL_REPEATS = 2
# A prompt whose TTFT the rate seen so far puts past this is left out, with every larger one
# (two sizes at least are kept): a CPU llama.cpp on a busy 2-core host prefilled Gemma 3 270M
# at 60-140 tok/s, 66 s for 4,096 tokens, where the probe is meant to take minutes.
PREFILL_CAP_S = 8.0
PREFILL_OUTPUT = 16  # 15 chunk gaps: a decode point at each prompt's context
BATCH_STREAMS = (1, 2, 4, 8)  # sent together: step time against the batch
BATCH_PROMPT = 128  # short, so the batch's step is the sequences', not their context
BATCH_OUTPUT = 32
# A repeated prompt whose TTFT is under this share of its cold TTFT was served from a
# prefix cache (a hit skips the prefill; the cold 1,024-token prompt's prefill is most of it).
CACHED_TTFT_SHARE = 0.5


@dataclass
class Fitted:
    """What :func:`fit_async` measured: the fitted :class:`Profile`, each field's
    :class:`Estimate` (or why it was not measured), the probe's records and their probes."""

    base_url: str
    model: str
    profile: Profile
    estimates: dict[str, Estimate]
    not_measured: dict[str, str]  # field -> why, the simulator's default kept
    records: list[tuple[str, TurnRecord]] = field(default_factory=list)  # (probe, record)
    seconds: float = 0.0


def _prompt(n_tokens: int) -> list[dict[str, str]]:
    nonce = secrets.token_hex(6)
    return cold_prompt(nonce, n_tokens, f"Fit probe {nonce}. Continue the list.")


def _body(model: str, messages: list[dict[str, str]], n: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": n,
        "ignore_eos": True,  # exactly n tokens: vLLM and SGLang honour both, llama.cpp this
        "min_tokens": n,
    }


class _Probe:
    """The requests of one fit, numbered in the order they were sent, with their records."""

    def __init__(self, client: HttpChatClient, model: str) -> None:
        self.client = client
        self.model = model
        self.records: list[tuple[str, TurnRecord]] = []

    async def send(
        self, probe: str, messages: list[dict[str, str]], n: int, size: int
    ) -> tuple[int, ChatResponse]:
        index = len(self.records)
        self.records.append((probe, _placeholder(index)))
        response = await self.client.stream_chat(_body(self.model, messages, n))
        head = RecordHead(
            repetition=0,
            warmup=False,
            session=index,
            turn=1,
            configured_prior_tokens=0,
            configured_prompt_tokens=size,
        )
        record = record_from_response(
            response,
            head,
            output_tokens=n,
            exact_output=True,
            shareable_tokens=None,
            shareable_exact=False,
        )
        self.records[index] = (probe, record)
        return index, response


def _placeholder(index: int) -> TurnRecord:
    return TurnRecord(
        repetition=0,
        warmup=False,
        session=index,
        turn=1,
        status="incomplete",
        configured_prior_tokens=0,
        started_ns=0,
    )


def _stamps(index: int, response: ChatResponse, size: int) -> StreamStamps | None:
    usage = response.usage
    if not response.ok or response.content_ns is None or len(response.content_ns) < 2:
        return None
    completion = usage.completion_tokens if usage else None
    chunks = len(response.content_ns)
    return StreamStamps(
        request=index,
        prompt_tokens=usage.prompt_tokens if usage else size,
        content_ns=list(response.content_ns),
        tokens_per_chunk=completion / chunks if completion else 1.0,
    )


def _ttft_s(response: ChatResponse) -> float | None:
    if not response.ok or response.first_content_ns is None or response.sent_ns is None:
        return None
    return (response.first_content_ns - response.sent_ns) / 1e9


async def fit_async(
    target: Target,
    *,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 120.0,  # per request: a 4K prompt on a slow CPU takes seconds
    metrics_url: str | None = None,  # None: the target's root URL + /metrics
    prefill_tokens: Sequence[int] = PREFILL_TOKENS,
    batch_streams: Sequence[int] = BATCH_STREAMS,
) -> Fitted:
    """Probe ``target`` from outside and fit the simulated engine's profile to it.

        fitted = await fit_async(Target("http://127.0.0.1:8080/v1"), progress=print)
        fitted.estimates["prefill_s_per_token"].low

    Raises :class:`TargetError` when ``/models`` does not answer, or when too few probe
    requests succeeded to fit the step time (naming the first failure).
    """
    say = progress or (lambda line: None)
    started = time.perf_counter()
    transport = transport_for(target)
    model, _ = await identify(target, timeout_s, transport)
    url = metrics_url or target.root_url + "/metrics"
    timeouts = Timeouts(connect_s=min(timeout_s, 10.0), read_gap_s=timeout_s, turn_s=timeout_s)
    estimates: dict[str, Estimate] = {}
    not_measured: dict[str, str] = {}
    async with (
        transport.session(url, timeout_s=timeout_s) as http,
        HttpChatClient(
            target.base_url,
            connections=max(batch_streams),
            transport=transport,
            timeouts=timeouts,
        ) as client,
    ):
        snapshot, _ = await scrape(http, url)
        props = await get_json(http, target.root_url + "/props")
        _server_config(snapshot, props, estimates, not_measured)
        say(
            "server config: "
            + (
                "vLLM cache_config_info"
                if snapshot is not None and kv_capacity_tokens(snapshot)
                else "llama.cpp /props"
                if props
                else "not exported"
            )
        )
        probe = _Probe(client, model)
        # One short request first, left out of the fit: a server's first request after it
        # started pays for its warm-up (llama.cpp: 6.7 s for 267 tokens, then 1.4 s).
        await probe.send("warm-up", _prompt(64), 2, 64)
        prefill, streams, cold = await _prefill(probe, prefill_tokens, say)
        await _prefix_cache(probe, cold, estimates, not_measured, snapshot, say)
        streams += await _batches(probe, batch_streams, estimates, not_measured, say)
    fitted = fit_engine(prefill, decode_points(streams))
    missing = [
        name
        for name in (
            "step_fixed_s",
            "decode_s_per_seq",
            "attend_s_per_token",
            "prefill_s_per_token",
        )
        if name not in fitted
    ]
    if missing:
        failed = next((r for _, r in probe.records if r.status != "ok"), None)
        why = (
            f"; first failure: {failed.error_kind} {failed.error_message}"
            if failed is not None
            else ""
        )
        raise TargetError(
            f"fit of {target.base_url}: too few probe requests succeeded to fit "
            f"{', '.join(missing)} ({sum(r.valid for _, r in probe.records)} of "
            f"{len(probe.records)} valid){why}"
        )
    estimates.update(fitted)
    values: dict[str, Any] = {"name": "fitted", "model": model}
    for name, estimate in estimates.items():
        if name in Profile.model_fields:
            kind = Profile.model_fields[name].annotation
            values[name] = (
                bool(estimate.value)
                if kind is bool
                else round(estimate.value)
                if kind is int
                else estimate.value
            )
    return Fitted(
        base_url=target.base_url,
        model=model,
        profile=Profile.model_validate(values),
        estimates=estimates,
        not_measured=not_measured,
        records=probe.records,
        seconds=round(time.perf_counter() - started, 2),
    )


async def _prefill(
    probe: _Probe, sizes: Sequence[int], say: Callable[[str], None]
) -> tuple[list[PrefillPoint], list[StreamStamps], tuple[list[dict[str, str]], float, int] | None]:
    """Cold prompts alone: TTFT points and one stream each; the first one's (messages,
    TTFT, request) for the prefix-cache probe."""
    points: list[PrefillPoint] = []
    streams: list[StreamStamps] = []
    cold = None
    sizes = sorted(sizes)
    for repeat in range(PREFILL_REPEATS):
        for size in list(sizes):
            slowest = max((p.ttft_s / max(1, p.uncached_tokens) for p in points), default=0.0)
            if len({p.uncached_tokens for p in points}) >= 2 and size * slowest > PREFILL_CAP_S:
                # a slow server (a busy CPU): the larger prompts would take minutes
                sizes = [s for s in sizes if s < size]
                say(
                    f"prefill: {size:,} tokens and more left out (about "
                    f"{size * slowest:,.0f} s each at the rate seen, over {PREFILL_CAP_S:g} s)"
                )
                break
            messages = _prompt(size)
            index, response = await probe.send("prefill", messages, PREFILL_OUTPUT, size)
            ttft = _ttft_s(response)
            usage = response.usage
            if ttft is None or usage is None:
                say(f"prefill {size:,}: {response.error_kind or 'no usage'} (left out)")
                continue
            uncached = usage.prompt_tokens - (usage.cached_tokens or 0)
            points.append(PrefillPoint(index, uncached, ttft))
            if (stamps := _stamps(index, response, size)) is not None:
                streams.append(stamps)
            if cold is None and size >= 1024:
                cold = (messages, ttft, index)
            say(
                f"prefill {repeat + 1}/{PREFILL_REPEATS}: {usage.prompt_tokens:,} tokens, "
                f"TTFT {ttft * 1000:,.1f} ms"
            )
    return points, streams, cold


async def _prefix_cache(
    probe: _Probe,
    cold: tuple[list[dict[str, str]], float, int] | None,
    estimates: dict[str, Estimate],
    not_measured: dict[str, str],
    snapshot: Snapshot | None,
    say: Callable[[str], None],
) -> None:
    if cold is None:
        not_measured.setdefault("prefix_caching", "no cold prompt of 1,024 tokens succeeded")
        return
    messages, cold_ttft, cold_index = cold
    index, response = await probe.send("prefix cache", messages, 2, 1024)
    ttft, usage = _ttft_s(response), response.usage
    if ttft is None:
        not_measured.setdefault(
            "prefix_caching", f"the repeated prompt failed: {response.error_kind}"
        )
        return
    cached = usage.cached_tokens if usage else None
    if cached is not None and usage is not None:
        on = cached >= usage.prompt_tokens // 2
        how = f"a repeated {usage.prompt_tokens:,}-token prompt: {cached:,} cached tokens"
    else:
        on = ttft < CACHED_TTFT_SHARE * cold_ttft
        how = (
            f"a repeated prompt's TTFT {ttft * 1000:,.1f} ms against "
            f"{cold_ttft * 1000:,.1f} ms cold (cached tokens not reported)"
        )
    config = estimates.get("prefix_caching")
    if config is None or config.value != float(on):
        estimates["prefix_caching"] = Estimate(
            float(on), float(on), float(on), (cold_index, index), how
        )
    not_measured.pop("prefix_caching", None)
    say(f"prefix cache: {'on' if on else 'off'} ({how})")


async def _batches(
    probe: _Probe,
    counts: Sequence[int],
    estimates: dict[str, Estimate],
    not_measured: dict[str, str],
    say: Callable[[str], None],
) -> list[StreamStamps]:
    streams: list[StreamStamps] = []
    waves: list[tuple[int, int, list[int]]] = []  # (sent, decoded together, requests)
    for n in counts:
        sent = [
            probe.send("batch", _prompt(BATCH_PROMPT), BATCH_OUTPUT, BATCH_PROMPT) for _ in range(n)
        ]
        done = await asyncio.gather(*sent)
        batch = [s for i, r in done if (s := _stamps(i, r, BATCH_PROMPT)) is not None]
        streams += batch
        wave = first_wave([(s.content_ns[0], s.content_ns[-1]) for s in batch])
        waves.append((len(batch), wave, [s.request for s in batch]))
        gaps = [b - a for s in batch for a, b in zip(s.content_ns, s.content_ns[1:], strict=False)]
        median = sorted(gaps)[len(gaps) // 2] / 1e6 if gaps else float("nan")
        say(
            f"batch {n}: {len(batch)} streams, {wave} decoding together, median gap {median:.2f} ms"
        )
    if "max_running" in estimates:
        return streams  # the server said (llama.cpp's slots)
    limited = [(sent, wave, used) for sent, wave, used in waves if 0 < wave < sent]
    if limited:
        sent, wave, used = min(limited, key=lambda w: w[1])
        estimates["max_running"] = Estimate(
            wave,
            wave,
            wave,
            tuple(used),
            f"of {sent} streams sent together {wave} decoded together, the rest waited",
        )
    elif waves:
        most, _, used = max(waves)
        estimates["max_running"] = Estimate(
            256,
            most,
            None,
            tuple(used),
            f"all {most} streams sent together decoded together: at least {most} "
            "(the simulator's default 256 kept)",
        )
    return streams


def _server_config(
    snapshot: Snapshot | None,
    props: dict[str, Any] | None,
    estimates: dict[str, Estimate],
    not_measured: dict[str, str],
) -> None:
    """What the server says of itself: vLLM's cache_config_info, llama.cpp's /props."""
    kv = kv_capacity_tokens(snapshot) if snapshot is not None else None
    if snapshot is not None and kv is not None:
        labels = dict(next(iter(snapshot.rows("vllm:cache_config_info"))))
        said = "/metrics vllm:cache_config_info"
        estimates["kv_capacity_tokens"] = Estimate(kv, kv, kv, (), f"{said} (blocks × block size)")
        if labels.get("block_size", "").isdigit():
            bs = int(labels["block_size"])
            estimates["block_size"] = Estimate(bs, bs, bs, (), f"{said} block_size")
        if labels.get("enable_prefix_caching") in ("True", "False"):
            on = float(labels["enable_prefix_caching"] == "True")
            estimates["prefix_caching"] = Estimate(on, on, on, (), f"{said} enable_prefix_caching")
        return
    slots = props.get("total_slots") if props else None
    settings = props.get("default_generation_settings") if props else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    if isinstance(slots, int) and slots > 0:
        estimates["max_running"] = Estimate(slots, slots, slots, (), "llama.cpp /props total_slots")
    if isinstance(slots, int) and isinstance(n_ctx, int) and slots > 0 and n_ctx > 0:
        kv = slots * n_ctx
        estimates["kv_capacity_tokens"] = Estimate(
            kv, kv, kv, (), f"llama.cpp /props: {slots} slots × n_ctx {n_ctx:,}"
        )
    else:
        not_measured["kv_capacity_tokens"] = "the server exports no cache_config_info or /props"
    not_measured["block_size"] = "the server does not say it"
    not_measured["token_budget"] = "not probed yet"


# --- the profile file ---------------------------------------------------------------------------


def _number(value: float) -> str:
    """A TOML float (never an integer literal, never inf or nan)."""
    text = f"{value:.5g}"
    return text if any(c in text for c in ".en") else text + ".0"


def profile_toml(fitted: Fitted, *, records_file: str | None = None) -> str:
    """The fitted profile as TOML for ``--sim profile=FILE``: the fields, then a
    ``[provenance.FIELD]`` table per number (value, 95% interval, the probe requests by
    their index in the records, how it was measured), and what was not measured."""
    p = fitted.profile
    lines = [
        f"# Fitted by `workloads fit` from {fitted.base_url} (model {fitted.model}):",
        f"# {len(fitted.records)} probe requests in {fitted.seconds:.1f} s"
        + (f", saved in {records_file} (request = line number - 1)." if records_file else "."),
        "# Each measured number's 95% interval and the requests that measured it are in",
        "# [provenance.FIELD]; a field not measured keeps the simulator's default (said below).",
        "# Use: workloads run SCENARIO --sim profile=THIS_FILE.toml",
        f'name = "{p.name}"',
        f'model = "{p.model}"',
    ]
    data = p.model_dump()
    for name in Profile.model_fields:
        if name in ("name", "model", "faults", "seed"):
            continue
        value = data[name]
        note = ""
        if name in fitted.estimates:
            e = fitted.estimates[name]
            if e.low is not None and e.high is None:
                note = f"  # at least {e.low:.6g}: the simulator's default kept"
            elif e.low is None or e.high is None:
                note = "  # no interval (too few points)"
            elif e.low == e.high:
                note = f"  # {e.how}" if not e.requests else "  # exact"
            else:
                note = f"  # 95% [{e.low:.4g}, {e.high:.4g}]"
        elif name in fitted.not_measured:
            note = f"  # not measured: {fitted.not_measured[name]}"
        else:
            note = "  # not measured: the simulator's default"
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            text = repr(value)  # the very number the fit gave: the file is the profile
        else:
            text = f'"{value}"'
        lines.append(f"{name} = {text}{note}")
    for name, e in fitted.estimates.items():
        lines += ["", f"[provenance.{name}]", f"value = {_number(e.value)}"]
        if e.low is not None:
            lines.append(f"low = {_number(e.low)}")
        if e.high is not None:
            lines.append(f"high = {_number(e.high)}")
        lines.append(f"requests = [{', '.join(str(r) for r in e.requests)}]")
        how = e.how.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'how = "{how}"')
    return "\n".join(lines) + "\n"
