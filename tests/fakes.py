"""Test doubles that are real code, not mocks:

* :class:`FakeChatClient` — a ChatClient backed by a function (httpx's MockTransport idea),
  for session and runner logic without sockets;
* :class:`LlamaCppLikeServer` — a tiny aiohttp server on 127.0.0.1 with llama.cpp's
  ``/apply-template`` and ``/tokenize`` shapes and a tokenizer and chat template that are
  deliberately *not* cl100k/ChatML, so sizing by the target's tokens is really tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from workloads.core import tokens
from workloads.model.results import read_records_file
from workloads.wire.client import ChatResponse, Usage

# The CLI arguments that shrink a run to about a second: 2 users, 2 turns, short prompts and
# replies, one measured repetition and no warm-up, no plots.
TINY_RUN = [
    "--set",
    "users=2",
    "--set",
    "turns=2",
    "--set",
    "opening_tokens=300",
    "--set",
    "turn_tokens=50",
    "--set",
    "output_tokens=8",
    "--set",
    "repetitions.warmup=0",
    "--set",
    "repetitions.measured=1",
    "--no-plots",
]

# Simulated engines for tests that read counts, tokens, cache or warnings, not speed:
# QUICK_ENGINE steps five times quicker than the fast profile, TIMELESS_ENGINE models next
# to no time. As ``sim=`` for workloads.run, and as CLI arguments through sim_args().
QUICK_ENGINE = {"step_fixed_s": 0.0005, "decode_s_per_seq": 0.00006}
TIMELESS_ENGINE = {"step_fixed_s": 0.0001, "prefill_s_per_token": 0.0, "decode_s_per_seq": 0.0}


def turn_lines(out: Path) -> list[dict[str, Any]]:
    """The TurnRecords in ``out``/records.jsonl as JSON dicts, read as ``show`` reads them
    (:func:`~workloads.model.results.read_records_file`): safe while a run still writes the
    file, whose last line may then be half written (skipped)."""
    records = read_records_file(out / "records.jsonl").records
    return [r.model_dump(mode="json") for r in records]


def sim_args(sim: dict[str, float]) -> list[str]:
    """``--sim field=value`` for each of ``sim``'s fields."""
    return [arg for field, value in sim.items() for arg in ("--sim", f"{field}={value!r}")]


# --- a function-backed ChatClient ------------------------------------------------------------


class FakeChatClient:
    """``handler(body) -> (prompt_tokens, text)``; every turn completes at exactly
    ``max_tokens`` tokens, with times 1 ms apart."""

    def __init__(
        self,
        handler: Callable[[dict[str, Any]], tuple[int, str]],
        delay: Callable[[dict[str, Any]], float] = lambda body: 0.0,
    ) -> None:
        self.handler = handler
        self.delay = delay
        self.bodies: list[dict[str, Any]] = []
        self.sent_at: list[float] = []

    async def stream_chat(self, body: dict[str, Any]) -> ChatResponse:
        self.bodies.append(body)
        self.sent_at.append(time.perf_counter())
        await asyncio.sleep(self.delay(body))
        prompt_tokens, text = self.handler(body)
        n = body["max_tokens"]
        now = time.perf_counter_ns()
        return ChatResponse(
            started_ns=now,
            sent_ns=now,
            first_content_ns=now + 1_000_000,
            last_content_ns=now + 1_000_000 * n,
            done_ns=now + 1_000_000 * n,
            http_status=200,
            text=text,
            content_events=n,
            finish_reason="length",
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=n, cached_tokens=None),
            saw_done=True,
        )


# --- counting event-loop iterations -------------------------------------------------------


# How early a kernel-stamped read (wire/arrival.py) may read against a stamp the server took
# just before its write: the kernel's CLOCK_REALTIME stamp, brought to perf_counter_ns by
# two clock reads, was off by up to ~8 µs either way in this project's VM (measured).
KERNEL_STAMP_SLACK_NS = 50_000


class LoopTicks:
    """Counts the running loop's iterations while inside (``async with``): a task that
    ``sleep(0)``s and adds one each time it runs. ``ticks`` is the count so far."""

    def __init__(self) -> None:
        self.ticks = 0
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while not self._done.is_set():  # bounded by the ``async with`` block
            await asyncio.sleep(0)
            self.ticks += 1

    async def __aenter__(self) -> LoopTicks:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done.set()
        assert self._task is not None
        await self._task


# --- a tokenizer and template unlike cl100k/ChatML ---------------------------------------------

BOS, START, END = "<|bos|>", "<|start|>", "<|end|>"
_SPECIALS = {BOS: 1, START: 2, END: 3}
# Letters in runs of at most 4 (long words split), digits one by one, each punctuation
# character alone, whitespace runs: about 1.3x cl100k's count on code.
_PIECE = re.compile(r"<\|bos\|>|<\|start\|>|<\|end\|>|[A-Za-z]{1,4}|\d|\s+|[^\sA-Za-z\d]")


class WordTokenizer:
    """``kind="words"``: the pieces of ``_PIECE`` (a harsh test: 1.4-1.8x cl100k, varying
    with the text). ``kind="split"``: cl100k with every token longer than 6 bytes split in
    two, about 1.1x cl100k on code: a different but realistic BPE."""

    def __init__(self, kind: str = "words") -> None:
        self.kind = kind
        self.vocab: dict[str, int] = dict(_SPECIALS)

    def encode(self, text: str, *, add_special: bool = False) -> list[int]:
        ids = [1] if add_special else []
        if self.kind == "words":
            for piece in _PIECE.findall(text):
                ids.append(self.vocab.setdefault(piece, len(self.vocab) + 1))
            return ids
        enc = tokens.encoding()
        for part in re.split(r"(<\|bos\|>|<\|start\|>|<\|end\|>)", text):
            if part in _SPECIALS:
                ids.append(_SPECIALS[part])
                continue
            for t in enc.encode_ordinary(part):
                long = len(enc.decode_single_token_bytes(t)) > 6
                ids += [t + 10, t + 200_010] if long else [t + 10]
        return ids

    @staticmethod
    def template(messages: list[dict[str, Any]]) -> str:
        """Llama-3-like: role header, blank line, trimmed content, end marker."""
        out = [
            f"{START}{m['role']}\n\n{str(m.get('content') or '').strip()}{END}" for m in messages
        ]
        return "".join(out) + f"{START}assistant\n\n"


class LlamaCppLikeServer:
    """``/v1/models``, ``/v1/chat/completions`` (streaming), ``/apply-template``,
    ``/tokenize`` — the last two only when ``tokenize=True``. With ``hold_completions``, a
    ``/v1/completions`` that answers (without log-probabilities) only once a chat request has
    come in, or after ``HOLD_S``; ``chats_while_held`` counts the chat requests that came in
    while one waited."""

    model = "word-model"
    HOLD_S = 10.0

    def __init__(
        self, *, tokenize: bool = True, tokenizer: str = "words", hold_completions: bool = False
    ) -> None:
        self.tokenize_routes = tokenize
        self.hold_completions = hold_completions
        self.tokenizer = WordTokenizer(tokenizer)
        self.prompt_tokens: list[int] = []
        self.holding = 0  # /v1/completions requests waiting now
        self.chats_while_held = 0
        self._chat_seen: asyncio.Event | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    async def _apply_template(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": self.tokenizer.template(body["messages"])})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text, special = body.get("content", ""), body.get("add_special", False)
        ids = self.tokenizer.encode(text, add_special=special)
        return web.json_response({"tokens": ids})

    async def _completions(self, request: web.Request) -> web.Response:
        await request.json()
        assert self._chat_seen is not None
        self.holding += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.HOLD_S):
                    await self._chat_seen.wait()
        finally:
            self.holding -= 1
        return web.json_response({"choices": [{"index": 0, "text": " word"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.chats_while_held += self.holding > 0
        if self._chat_seen is not None:
            self._chat_seen.set()
        body = await request.json()
        prompt = self.tokenizer.encode(self.tokenizer.template(body["messages"]), add_special=True)
        self.prompt_tokens.append(len(prompt))
        n = body["max_tokens"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def chunk(obj: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        for i in range(n):
            delta = {"content": f" word{i % 7}"}
            await resp.write(chunk({"id": "x", "choices": [{"index": 0, "delta": delta}]}))
        done = {"index": 0, "delta": {}, "finish_reason": "length"}
        await resp.write(chunk({"id": "x", "choices": [done]}))
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": n,
            "total_tokens": len(prompt) + n,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        await resp.write(chunk({"id": "x", "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._chat_seen = asyncio.Event()
        if self.hold_completions:
            app.router.add_post("/v1/completions", self._completions)
        if self.tokenize_routes:
            app.router.add_post("/apply-template", self._apply_template)
            app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> LlamaCppLikeServer:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self._start())
            ready.set()
            loop.run_forever()
            assert self._runner is not None
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class LocalTokenizer:
    """A TargetTokenizer over :class:`WordTokenizer` and its template, without HTTP: sizing
    logic tested against a tokenizer that is not the estimate's."""

    description = "local word tokenizer"
    exact = True

    def __init__(self, kind: str = "words") -> None:
        self.tokenizer = WordTokenizer(kind)
        self.calls = 0
        self.seconds = 0.0

    async def render(self, messages: list[dict[str, Any]], mode: str) -> list[int]:
        self.calls += 1
        prompt = self.tokenizer.template(messages)
        if mode == "continue" and messages:
            # Up to the end of the last message's (trimmed) content, as vLLM's
            # continue_final_message cuts the rendered chat.
            end = prompt.rfind(END)
            prompt = prompt[:end]
        return self.tokenizer.encode(prompt, add_special=True)

    async def encode(self, text: str) -> list[int]:
        self.calls += 1
        return self.tokenizer.encode(text)

    def count_prompt(self, messages: list[dict[str, Any]]) -> int:
        return len(self.tokenizer.encode(self.tokenizer.template(messages), add_special=True))


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST ``body`` as JSON with the standard library (no client of ours); (status, JSON)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
