"""The simulated server's HTTP surface: an OpenAI-compatible aiohttp app shaped like vLLM.

Endpoints: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``,
``POST /tokenize`` (``prompt`` or ``messages``), ``POST /detokenize``, ``GET /metrics``,
``GET /health``, ``GET /version``, ``POST /reset_prefix_cache``, and ``GET /debug/requests``
(ground truth; 404 unless the server was started with ``debug=True``).

Requests honour ``max_tokens``/``max_completion_tokens``, ``min_tokens`` and ``ignore_eos``
exactly; usage always carries ``prompt_tokens_details.cached_tokens`` (as vLLM with
``--enable-prompt-tokens-details``). A request that offers ``tools`` gets replies that call
them, streamed as vLLM's hermes parser does, with finish_reason "tool_calls"; a profile with
``reasoning_tokens`` streams that many first tokens as ``reasoning_content`` (tools.py).
Faults from the profile (see ``profiles.Faults``) are injected here.

Size: past 400 lines: one handler per endpoint of the surface above, and the streaming
response writer; they change together when the server shape we imitate changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from workloads._version import __version__
from workloads.core.corpus import Corpus, load_corpus
from workloads.servers.simulated import tokenizer
from workloads.servers.simulated.answers import answer
from workloads.servers.simulated.engine import Engine, RequestTruth, Sequence
from workloads.servers.simulated.metrics import render_metrics
from workloads.servers.simulated.profiles import Profile
from workloads.servers.simulated.replies import plan_reply, reply_seed
from workloads.servers.simulated.tools import (
    ReplyStream,
    ToolReply,
    plan_reasoning,
    plan_tool_reply,
    reasoning_tokens,
)

ENGINE_KEY = web.AppKey("engine", Engine)

# Without max_tokens vLLM generates up to max_model_len; the simulated "model" ends its reply
# at a random length up to this instead, so a bare request does not stream for minutes.
DEFAULT_MAX_TOKENS = 256


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer")
    return value


def _dumps(data: Any) -> str:
    """orjson's JSON: a /tokenize answer lists every id of a deep prompt (~100K), and the
    stdlib's encoder took several times longer on the server's loop."""
    return orjson.dumps(data).decode()


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    return tools if isinstance(tools, list) and tools else None


def _tokenize(body: dict[str, Any]) -> list[int]:
    """The ids of a /tokenize body: ``messages`` rendered with the chat template (and its
    ``tools``), or ``prompt``."""
    if isinstance(body.get("messages"), list):
        return tokenizer.render(
            body["messages"],
            tools=_tools(body),
            add_generation_prompt=body.get("add_generation_prompt", True),
            continue_final_message=body.get("continue_final_message", False),
        )
    return tokenizer.encode(body["prompt"])


@dataclass(frozen=True, slots=True)
class _Shape:
    """How a planned reply splits: its first ``reasoning`` tokens are reasoning; the rest is
    content, or content and the ``tools`` reply's calls."""

    reasoning: int = 0
    tools: ToolReply | None = None


class _Handlers:
    def __init__(self, engine: Engine, corpus: Corpus, debug: bool) -> None:
        self.engine = engine
        self.corpus = corpus
        self.debug = debug
        self.created = time.time()
        profile = engine.profile
        config = hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:8]
        self.fingerprint = f"workloads-sim-{__version__}-{profile.name}-{config}"
        # One draw per request in arrival order: the same arrival order gets the same faults.
        self._fault_rng = random.Random(f"faults:{profile.seed}")
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-tokenizer")

    def close(self) -> None:
        """Stop the tokenizer thread."""
        self._worker.shutdown(wait=False, cancel_futures=True)

    @property
    def profile(self) -> Profile:
        return self.engine.profile

    # --- chat ---------------------------------------------------------------------------------

    def _limits(self, body: dict[str, Any], prompt: list[int]) -> tuple[int, int] | str:
        """(max_tokens, min_tokens), or the reason the request is refused."""
        try:
            max_tokens = _int_field(body, "max_completion_tokens")
            if max_tokens is None:
                max_tokens = _int_field(body, "max_tokens")
            min_tokens = _int_field(body, "min_tokens") or 0
        except ValueError as err:
            return str(err)
        if max_tokens is None:
            max_tokens = min(DEFAULT_MAX_TOKENS, self.profile.max_model_len - len(prompt))
        if max_tokens < 1:
            return "max_tokens must be at least 1"
        if not 0 <= min_tokens <= max_tokens:
            return f"min_tokens ({min_tokens}) must be between 0 and max_tokens ({max_tokens})"
        if len(prompt) + max_tokens > self.profile.max_model_len:
            return (
                f"This model's maximum context length is {self.profile.max_model_len} tokens. "
                f"However, you requested {len(prompt) + max_tokens} tokens "
                f"({len(prompt)} in the messages, {max_tokens} in the completion)."
            )
        if not self.engine.fits(len(prompt), max_tokens):
            return (
                f"{len(prompt) + max_tokens} tokens do not fit in the KV cache "
                f"({self.profile.kv_capacity_tokens} tokens)"
            )
        return max_tokens, min_tokens

    def _length(self, body: dict[str, Any], seed: int, max_tokens: int, min_tokens: int) -> int:
        """How long the reply is: exactly max_tokens with ignore_eos, else the simulated
        model "stops" (EOS) somewhere in [max(min_tokens, 1), max_tokens] half the time."""
        if body.get("ignore_eos"):
            return max_tokens
        rng = random.Random(seed ^ 0x5EED)
        low = max(1, min_tokens)
        return rng.randint(low, max_tokens) if rng.random() < 0.5 else max_tokens

    def _draw_fault(self) -> str | None:
        faults = self.profile.faults
        if not any(rate for _, rate in faults.rates()):
            return None
        return faults.pick(self._fault_rng.random())

    def _prepare(
        self, body: dict[str, Any], arrival: int
    ) -> web.Response | tuple[list[int], list[int], int, RequestTruth, int, _Shape]:
        """Tokenize, check limits, draw the fault, plan the reply (on the worker thread)."""
        prompt = tokenizer.render(body["messages"], tools=_tools(body))
        limits = self._limits(body, prompt)
        if isinstance(limits, str):
            return _error(400, limits)
        max_tokens, min_tokens = limits
        truth = RequestTruth(
            request_id=self.engine.next_request_id(),
            arrival_ns=arrival,
            prompt_tokens=len(prompt),
            max_tokens=max_tokens,
        )
        fault = self._draw_fault()
        truth.fault = fault
        if fault in ("429", "500"):
            return self._refuse(truth, fault)
        seed = reply_seed(prompt, request_seed=body.get("seed"), server_seed=self.profile.seed)
        solved = None
        if body.get("temperature") == 0 and not body.get("ignore_eos"):
            solved = answer(body["messages"])  # the scripted correct model (answers.py)
        if solved is not None:
            plan = tokenizer.encode(solved)[:max_tokens]
            length = len(plan)
        else:
            length = self._length(body, seed, max_tokens, min_tokens)
        if fault == "early_stop":
            length = min(length, max(1, self.profile.faults.after_tokens))
            if length == max_tokens:  # cannot stop early at 1 token of 1; no fault after all
                truth.fault = None
        shape = _Shape()
        if solved is not None and fault == "early_stop":
            plan = plan[:length]
        elif solved is None:
            shape = self._shape(body, seed, length, truth, tools=fault is None)
            visible = length - shape.reasoning
            plan = plan_reasoning(self.corpus, seed, shape.reasoning) + (
                tokenizer.encode(shape.tools.text)
                if shape.tools is not None
                else plan_reply(self.corpus, seed, visible)
            )
        if fault == "corrupt":
            # A loop of the first three tokens, to max_tokens: stable under re-encoding so the
            # next turn's prompt still caches as the engine computed it.
            plan = tokenizer.stable_completion(
                tokenizer.decode(plan[:3] or [0]) * max_tokens, max_tokens
            )
            shape = _Shape()
        return prompt, plan, max_tokens, truth, seed, shape

    def _shape(
        self, body: dict[str, Any], seed: int, length: int, truth: RequestTruth, *, tools: bool
    ) -> _Shape:
        """How a reply of ``length`` tokens splits into reasoning, content and tool calls.
        No tool calls in a reply that draws a fault: a cut or rewritten call is broken."""
        reasoning = reasoning_tokens(self.profile, body, length)
        calls = (
            plan_tool_reply(
                self.corpus,
                self.profile,
                body,
                seed=seed,
                n_tokens=length - reasoning,
                request_id=truth.request_id,
            )
            if tools
            else None
        )
        return _Shape(reasoning, calls)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        arrival = time.perf_counter_ns()
        try:
            body = await request.json(loads=orjson.loads)
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' must be a list")
        if body.get("model") not in (self.profile.model, None):
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        # Tokenizing and planning the reply run on one worker thread: off the event loop,
        # which the engine's step loop shares (64 prompts arriving together stalled the steps
        # by ~130 ms in a timing-truth benchmark), and first come, first served, so requests
        # reach the engine in the order they arrived. With a short KV cache that order decides
        # whose cached prefix survives; a thread pool reordered them and made the hit rate of
        # the same run swing between 0.18 and 0.49.
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(self._worker, self._prepare, body, arrival)
        if isinstance(prepared, web.Response):
            return prepared
        prompt, plan, max_tokens, truth, seed, shape = prepared
        fault = truth.fault
        seq = self.engine.submit(prompt, plan, max_tokens, truth=truth, rng_seed=seed)
        try:
            if body.get("stream"):
                return await self._stream(request, body, seq, fault, shape)
            return await self._whole(request, seq, fault, shape)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            # The client went away (Ctrl-C, a timeout): what a real server logs and forgets.
            raise web.HTTPException() from None  # closes the request without a traceback
        finally:
            self.engine.abort(seq)  # no-op when finished; frees the blocks on disconnect

    def _refuse(self, truth: RequestTruth, fault: str) -> web.Response:
        truth.http_status = int(fault)
        self.engine.record(truth)
        if fault == "429":
            retry = self.profile.faults.retry_after_s
            response = _error(429, "Too many requests (simulated)", "RateLimitError")
            response.headers["Retry-After"] = f"{retry:g}"
            return response
        return _error(500, "Internal server error (simulated)", "InternalServerError")

    def _chunk(self, seq: Sequence, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = {
            "id": seq.truth.request_id,
            "object": "chat.completion.chunk",
            "created": int(self.created),
            "model": self.profile.model,
            "choices": choices,
            "system_fingerprint": self.fingerprint,
            **extra,
        }
        # orjson: compact, UTF-8 as is (as vLLM writes), and ~8 µs less per token than the
        # standard library's encoder on this machine kind
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def _usage(self, seq: Sequence, *, details: bool = True) -> dict[str, Any]:
        t = seq.truth
        usage: dict[str, Any] = {
            "prompt_tokens": t.prompt_tokens,
            "total_tokens": t.prompt_tokens + t.completion_tokens,
            "completion_tokens": t.completion_tokens,
        }
        if details:  # vLLM leaves the details out of continuous-usage chunks
            usage["prompt_tokens_details"] = {"cached_tokens": t.cached_tokens}
        return usage

    @staticmethod
    async def _next_ids(seq: Sequence) -> list[int] | None:
        """The next tokens, merged with any already waiting (vLLM coalesces outputs for a
        client that reads slower than the engine generates); None at the end."""
        ids = await seq.out.get()
        if ids is None:
            return None
        while not seq.out.empty():
            more = seq.out.get_nowait()
            if more is None:
                seq.out.put_nowait(None)  # keep the end marker for the next call
                break
            ids = ids + more
        return ids

    def _stamp_written(self, seq: Sequence) -> None:
        now = time.perf_counter_ns()
        if seq.truth.first_written_ns is None:
            seq.truth.first_written_ns = now
        seq.truth.last_written_ns = now

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        seq: Sequence,
        fault: str | None,
        shape: _Shape,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            return await self._stream_events(resp, request, body, seq, fault, shape)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            # The client went away mid-stream (Ctrl-C, a timeout): a real server logs this
            # quietly and frees the slot (the caller aborts the sequence).
            return resp

    async def _stream_events(
        self,
        resp: web.StreamResponse,
        request: web.Request,
        body: dict[str, Any],
        seq: Sequence,
        fault: str | None,
        shape: _Shape,
    ) -> web.StreamResponse:
        options = body.get("stream_options") or {}
        continuous = bool(options.get("include_usage") and options.get("continuous_usage_stats"))

        def extra() -> dict[str, Any]:
            return {"usage": self._usage(seq, details=False)} if continuous else {}

        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        await resp.write(self._chunk(seq, [role], **extra()))
        pending = thinking = b""
        written = 0
        strike_at = self.profile.faults.after_tokens
        split = ReplyStream(shape.tools)
        while (ids := await self._next_ids(seq)) is not None:
            if fault in ("disconnect", "stall", "malformed", "error_in_stream") and (
                written >= strike_at
            ):
                if await self._strike(resp, request, seq, fault):
                    return resp
                fault = None
            deltas: list[dict[str, Any]] = []
            if written < shape.reasoning:  # the reply's first tokens are its reasoning
                head, ids = ids[: shape.reasoning - written], ids[shape.reasoning - written :]
                written += len(head)
                thinking += b"".join(tokenizer.token_bytes(i) for i in head)
                text = thinking.decode("utf-8", "ignore")
                if text.encode() == thinking:  # else a character is split; wait for the rest
                    thinking = b""
                    deltas.append({"reasoning_content": text})
            written += len(ids)
            pending += b"".join(tokenizer.token_bytes(i) for i in ids)
            text = pending.decode("utf-8", "ignore")
            if text.encode() == pending:  # else a character is split; wait for the rest
                pending = b""
                deltas += split.feed(text)
            if not deltas:
                continue
            await resp.write(
                b"".join(
                    self._chunk(
                        seq, [{"index": 0, "delta": delta, "finish_reason": None}], **extra()
                    )
                    for delta in deltas
                )
            )
            self._stamp_written(seq)
        reason = seq.truth.finish_reason
        if shape.tools is not None and reason in ("length", "stop"):
            reason = "tool_calls"  # as vLLM says of a reply whose calls it parsed
        final = {"index": 0, "delta": {}, "finish_reason": reason}
        await resp.write(self._chunk(seq, [final], **extra()))
        if options.get("include_usage"):
            await resp.write(self._chunk(seq, [], usage=self._usage(seq)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _strike(
        self, resp: web.StreamResponse, request: web.Request, seq: Sequence, fault: str
    ) -> bool:
        """Inject a mid-stream fault; True when the stream is over."""
        if fault == "stall":
            await asyncio.sleep(self.profile.faults.stall_s)
            return False
        if fault == "malformed":
            broken = f'data: {{"id":"{seq.truth.request_id}","choices":[{{"delta":{{"cont\n\n'
            await resp.write(broken.encode())
            return False
        if fault == "error_in_stream":
            self.engine.abort(seq, reason="error")
            error = {
                "error": {
                    "message": "engine failure (simulated)",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
            await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return True
        # disconnect: cut the connection without ending the chunked body
        self.engine.abort(seq)
        if request.transport is not None:
            request.transport.close()
        return True

    async def _whole(
        self, request: web.Request, seq: Sequence, fault: str | None, shape: _Shape
    ) -> web.StreamResponse:
        ids: list[int] = []
        while (part := await self._next_ids(seq)) is not None:
            ids += part
        self._stamp_written(seq)
        if fault == "stall":
            await asyncio.sleep(self.profile.faults.stall_s)
        elif fault == "disconnect" and request.transport is not None:
            request.transport.close()
            return web.Response(status=200)
        elif fault == "malformed":
            return web.Response(status=200, text='{"id": "', content_type="application/json")
        elif fault == "error_in_stream":
            return web.json_response(
                {
                    "error": {
                        "message": "engine failure (simulated)",
                        "type": "InternalServerError",
                        "code": 500,
                    }
                }
            )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": tokenizer.decode(ids[shape.reasoning :]),
        }
        reason = seq.truth.finish_reason
        if shape.reasoning:
            message["reasoning_content"] = tokenizer.decode(ids[: shape.reasoning])
        if shape.tools is not None and reason in ("length", "stop"):
            message["content"] = shape.tools.content
            message["tool_calls"] = shape.tools.tool_calls()
            reason = "tool_calls"
        return web.json_response(
            {
                "id": seq.truth.request_id,
                "object": "chat.completion",
                "created": int(self.created),
                "model": self.profile.model,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": self._usage(seq),
                "system_fingerprint": self.fingerprint,
            }
        )

    # --- everything else ----------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.profile.model,
            "object": "model",
            "created": int(self.created),
            "owned_by": "workloads",
            "max_model_len": self.profile.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=orjson.loads)
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "give 'prompt' (a string) or 'messages' (a list)")
        if not isinstance(body.get("messages"), list) and not isinstance(body.get("prompt"), str):
            return _error(400, "give 'prompt' (a string) or 'messages' (a list)")
        # Off the engine's event loop: a 100K-token render takes tens of milliseconds, and
        # the engine's steps (and every stream's chunks) would wait behind it. Not on the chat
        # worker either, whose first-come-first-served order the chat requests keep.
        ids = await asyncio.to_thread(_tokenize, body)
        strs = None
        if body.get("return_token_strs"):
            strs = [tokenizer.token_bytes(i).decode("utf-8", "replace") for i in ids]
        return web.json_response(
            dumps=_dumps,
            data={
                "count": len(ids),
                "max_model_len": self.profile.max_model_len,
                "tokens": ids,
                "token_strs": strs,
            },
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=orjson.loads)
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        ids = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return _error(400, "'tokens' must be a list of token ids")
        return web.json_response({"prompt": tokenizer.decode(ids)})

    async def metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.engine, self.created)
        return web.Response(body=text, content_type="text/plain", charset="utf-8")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"workloads-sim-{__version__}"})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        self.engine.reset_prefix_cache()
        return web.Response(status=200)

    def _logprob(self, previous: int, token: int) -> float:
        """The simulated model's log-probability of ``token`` after ``previous``: fixed per
        server seed, between -4 and 0 (a mean NLL near 2 nats, like a small real model)."""
        digest = hashlib.sha256(f"{self.profile.seed}:{previous}:{token}".encode()).digest()
        return -int.from_bytes(digest[:4], "big") / 0xFFFFFFFF * 4.0

    async def completions(self, request: web.Request) -> web.Response:
        """``/v1/completions`` for the likelihood probe only: scores the prompt (``echo`` +
        ``logprobs``, or vLLM's ``prompt_logprobs``) off the engine, in no time; it does
        not generate (the one token asked for is a space)."""
        try:
            body = await request.json(loads=orjson.loads)
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return _error(400, "'prompt' must be a string")
        ids = tokenizer.encode(body["prompt"])
        scores: list[float | None] = [None] + [
            self._logprob(a, b) for a, b in itertools.pairwise(ids)
        ]
        choice: dict[str, Any] = {"index": 0, "text": " ", "finish_reason": "length"}
        if body.get("echo") and body.get("logprobs") is not None:
            choice["text"] = body["prompt"] + " "
            choice["logprobs"] = {
                "tokens": [tokenizer.decode([i]) for i in ids],
                "token_logprobs": scores,
                "top_logprobs": None,
                "text_offset": None,
            }
        if body.get("prompt_logprobs") is not None:
            choice["prompt_logprobs"] = [None] + [
                {
                    str(token): {
                        "logprob": score,
                        "rank": 1,
                        "decoded_token": tokenizer.decode([token]),
                    }
                }
                for token, score in zip(ids[1:], scores[1:], strict=True)
            ]
        return web.json_response(
            {
                "id": "cmpl-sim-likelihood",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.profile.model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": len(ids),
                    "completion_tokens": 1,
                    "total_tokens": len(ids) + 1,
                },
            }
        )

    async def debug_requests(self, request: web.Request) -> web.Response:
        if not self.debug:
            return _error(
                404, "ground truth is off; start the server with debug=True", "NotFoundError"
            )
        rows = [vars(t) for t in list(self.engine.truths)]
        return web.json_response({"requests": rows})


def build_app(engine: Engine, *, corpus: str = "stdlib", debug: bool = False) -> web.Application:
    """The aiohttp application serving ``engine``. The caller starts and stops the engine."""
    handlers = _Handlers(engine, load_corpus(corpus), debug)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[ENGINE_KEY] = engine
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_post("/tokenize", handlers.tokenize)
    app.router.add_post("/detokenize", handlers.detokenize)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/version", handlers.version)
    app.router.add_post("/reset_prefix_cache", handlers.reset_prefix_cache)
    app.router.add_get("/debug/requests", handlers.debug_requests)

    async def close(app: web.Application) -> None:
        handlers.close()

    app.on_cleanup.append(close)
    return app
