"""probe(): what an OpenAI-compatible target offers, and what workloads will do about it.

    report = await probe(Target("http://127.0.0.1:8080/v1"))
    report.check("cached_tokens").status        # "yes", "no", "partial" or "not reported"
    python -m workloads probe --target http://127.0.0.1:8080/v1

Four small streamed chat requests, one after the other on one pooled connection, as a run
sends them: a short plain one (streaming, TTFT, usage, timings, identity), one asking for
exactly 16 tokens with ``ignore_eos`` + ``min_tokens``, and the same fresh ~300-token prompt
twice (the second send should find the first in the prefix cache). Around them: the target's
``/tokenize`` shapes, ``/metrics`` before and after (so spec-decode counters can be seen
moving), ``/version`` and llama.cpp's ``/props``.

A missing feature is a row that says so, with what a run will do about it; only a target that
does not answer ``/models`` raises :class:`~workloads.model.errors.TargetError`. Gathering (I/O) and
judging (:mod:`workloads.probe.conformance`, pure functions of what was seen) are kept apart.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from workloads.core import tokens
from workloads.core.corpus import cold_prompt
from workloads.model.base import Frozen
from workloads.model.scenario import Timeouts
from workloads.model.target import Target
from workloads.probe.conformance import EXACT_TOKENS, Check, Observations, Support, judge
from workloads.telemetry.scrape import get_json, scrape
from workloads.wire.client import AiohttpChatClient
from workloads.wire.identify import identify
from workloads.wire.tokenize import probe_tokenizer
from workloads.wire.transport import Transport, transport_for

__all__ = ["Check", "ProbeReport", "Support", "probe", "render"]

CACHE_PROMPT_TOKENS = 300  # (tiktoken) many 16-token KV blocks, yet cheap to prefill on a CPU
SHORT_TOKENS = 8  # the plain request: enough chunks to see streaming
HELLO = [{"role": "user", "content": "Say hello in five words."}]


class ProbeReport(Frozen):
    """The probe's rows, in a fixed order, for one target and model.

    report = await probe(target)
    if report.check("exact output length").status != "yes": ...
    """

    base_url: str
    model: str
    server: str | None = None  # the /metrics family (vLLM, SGLang, llama.cpp, TGI), if any
    seconds: float
    checks: tuple[Check, ...]

    def check(self, name: str) -> Check:
        """The row called ``name``; KeyError (listing the names) when there is none."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r}; checks: {', '.join(c.name for c in self.checks)}")


async def probe(
    target: Target,
    *,
    timeout_s: float = 60.0,  # per request: a hanging endpoint costs at most this
    metrics_url: str | None = None,  # None: the target's root URL + /metrics
) -> ProbeReport:
    """Probe ``target`` with a few small requests and judge what it offers.

        report = await probe(Target("http://127.0.0.1:8000/v1"))
        for row in report.checks:
            print(row.name, row.status, row.evidence, row.consequence)

    Raises :class:`~workloads.model.errors.TargetError` when ``/models`` does not answer.
    """
    started = time.perf_counter()
    transport = transport_for(target)
    model, identity = await identify(target, timeout_s, transport)
    url = metrics_url or target.root_url + "/metrics"
    async with (
        transport.session(url, timeout_s=timeout_s) as http,
        AiohttpChatClient(
            target.base_url,
            connections=1,  # one pooled connection: shows whether the server keeps it alive
            transport=transport,
            timeouts=Timeouts(connect_s=timeout_s, read_gap_s=timeout_s, turn_s=timeout_s),
        ) as client,
    ):
        before, _ = await scrape(http, url)
        short = await client.stream_chat(_body(model, HELLO, SHORT_TOKENS))
        exact = await client.stream_chat(
            _body(model, HELLO, EXACT_TOKENS, ignore_eos=True, min_tokens=EXACT_TOKENS)
        )
        nonce = secrets.token_hex(6)
        cache_messages = cold_prompt(
            nonce, CACHE_PROMPT_TOKENS, f"Probe {nonce}. Reply with one word."
        )
        cache_first = await client.stream_chat(_body(model, cache_messages, 2))
        cache_again = await client.stream_chat(_body(model, cache_messages, 2))
        after, metrics_error = await scrape(http, url)
        props = await get_json(http, target.root_url + "/props")
    tokenizer, tokenized = await _tokenizer(target, model, transport, timeout_s)
    seen = Observations(
        target=target,
        model=model,
        identity=identity,
        short=short,
        exact=exact,
        cache_first=cache_first,
        cache_again=cache_again,
        tokenizer=tokenizer,
        tokenized=tokenized,
        metrics_url=url,
        before=before,
        after=after,
        metrics_error=metrics_error,
        props=props,
    )
    names = seen.names
    return ProbeReport(
        base_url=target.base_url,
        model=model,
        server=names.server if names is not None else None,
        seconds=round(time.perf_counter() - started, 2),
        checks=judge(seen),
    )


# --- gathering ------------------------------------------------------------------------------


def _body(
    model: str, messages: list[dict[str, str]], max_tokens: int, **extra: Any
) -> dict[str, Any]:
    # The fields session.build_body sends on every turn.
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        **extra,
    }


async def _tokenizer(
    target: Target, model: str, transport: Transport, timeout_s: float
) -> tuple[str | None, int | None]:
    """(the target tokenizer's description, its count for the short request's chat)."""
    found = await probe_tokenizer(target.root_url, model, transport=transport, timeout_s=timeout_s)
    if found is None:
        return None, None
    async with found:
        try:
            ids = await found.render(HELLO, "generate")
        except tokens.TokenizeError:
            return found.description, None
    return found.description, len(ids)


# --- rendering ------------------------------------------------------------------------------

_STYLES: dict[str, str] = {"yes": "green", "partial": "yellow", "no": "red", "not reported": "red"}


def render(report: ProbeReport) -> Any:
    """A rich table of the report (the CLI prints it; the library never prints)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    server = f" · {report.server} metrics" if report.server else ""
    table = Table(
        "check",
        "status",
        "seen",
        "what workloads will do",
        title=f"probe of {report.base_url} · model {report.model}{server} · {report.seconds:.1f} s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_lines=True,  # rows wrap: a blank line keeps each row's two texts together
    )
    table.columns[0].no_wrap = True
    table.columns[1].no_wrap = True
    for column in table.columns[2:]:  # break a long metric name rather than cut it with "…"
        column.overflow = "fold"
    for check in report.checks:
        table.add_row(
            check.name,
            Text(check.status, style=_STYLES[check.status]),
            check.evidence,
            check.consequence,
        )
    return table
