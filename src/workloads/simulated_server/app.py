"""The simulated server's HTTP surface: an OpenAI-compatible aiohttp app shaped like vLLM.

Endpoints: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``,
``POST /tokenize`` (``prompt`` or ``messages``), ``GET /metrics``, ``GET /health``,
``GET /version``, and ``GET /debug/requests`` (ground truth; only when enabled).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from aiohttp import web

from workloads import __version__
from workloads.content import Corpus, load_corpus
from workloads.simulated_server import tokenizer
from workloads.simulated_server.engine import Engine, Sequence
from workloads.simulated_server.metrics import render_metrics
from workloads.simulated_server.profiles import Profile

ENGINE_KEY = web.AppKey("engine", Engine)


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


class _Handlers:
    def __init__(self, engine: Engine, corpus: Corpus, debug: bool) -> None:
        self.engine = engine
        self.corpus = corpus
        self.debug = debug
        self.created = time.time()
        profile = engine.profile
        config = hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:8]
        self.fingerprint = f"workloads-sim-{__version__}-{profile.name}-{config}"

    @property
    def profile(self) -> Profile:
        return self.engine.profile

    def _plan(self, prompt: list[int], body: dict[str, Any], max_tokens: int) -> list[int]:
        """The reply this request will get: agent-like text of exactly the right length."""
        seed = body.get("seed")
        key = f"{seed}" if seed is not None else f"{self.profile.seed}:{prompt[-64:]}"
        rng = self.corpus.rng(len(prompt), int(hashlib.sha256(key.encode()).hexdigest()[:8], 16))
        if body.get("ignore_eos"):
            length = max_tokens
        else:
            low = min(max_tokens, max(1, int(body.get("min_tokens") or 1)))
            length = rng.randint(low, max_tokens) if rng.random() < 0.5 else max_tokens
        text = self.corpus.reply_text(rng, length + 8)
        return tokenizer.stable_completion(text, length)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' must be a list")
        if body.get("model") not in (self.profile.model, None):
            return _error(
                404, f"The model `{body.get('model')}` does not exist.", "NotFoundError"
            )
        prompt = tokenizer.render(body["messages"])
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "max_tokens must be a positive integer")
        if len(prompt) + max_tokens > self.profile.max_model_len:
            return _error(
                400,
                f"This model's maximum context length is {self.profile.max_model_len} tokens. "
                f"However, you requested {len(prompt) + max_tokens} tokens.",
            )
        seq = self.engine.submit(prompt, self._plan(prompt, body, max_tokens), max_tokens)
        try:
            if body.get("stream"):
                return await self._stream(request, body, seq)
            return await self._whole(body, seq)
        finally:
            self.engine.abort(seq)  # no-op when finished; frees the slot on disconnect

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
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def _usage(self, seq: Sequence) -> dict[str, Any]:
        t = seq.truth
        return {
            "prompt_tokens": t.prompt_tokens,
            "total_tokens": t.prompt_tokens + t.completion_tokens,
            "completion_tokens": t.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": t.cached_tokens},
        }

    async def _stream(
        self, request: web.Request, body: dict[str, Any], seq: Sequence
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        await resp.write(self._chunk(seq, [role]))
        pending = b""
        while (ids := await seq.out.get()) is not None:
            pending += b"".join(tokenizer.token_bytes(i) for i in ids)
            text = pending.decode("utf-8", "ignore")
            if text.encode() != pending:
                continue  # a multi-byte character is split across tokens; wait for the rest
            pending = b""
            delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
            await resp.write(self._chunk(seq, [delta]))
        final = {"index": 0, "delta": {}, "finish_reason": seq.truth.finish_reason}
        await resp.write(self._chunk(seq, [final]))
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            await resp.write(self._chunk(seq, [], usage=self._usage(seq)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _whole(self, body: dict[str, Any], seq: Sequence) -> web.Response:
        ids: list[int] = []
        while (part := await seq.out.get()) is not None:
            ids += part
        message = {"role": "assistant", "content": tokenizer.decode(ids)}
        return web.json_response(
            {
                "id": seq.truth.request_id,
                "object": "chat.completion",
                "created": int(self.created),
                "model": self.profile.model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": seq.truth.finish_reason}
                ],
                "usage": self._usage(seq),
                "system_fingerprint": self.fingerprint,
            }
        )

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
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "request body is not valid JSON")
        if isinstance(body.get("messages"), list):
            ids = tokenizer.render(
                body["messages"],
                add_generation_prompt=body.get("add_generation_prompt", True),
                continue_final_message=body.get("continue_final_message", False),
            )
        elif isinstance(body.get("prompt"), str):
            ids = tokenizer.encode(body["prompt"])
        else:
            return _error(400, "give 'prompt' (a string) or 'messages' (a list)")
        return web.json_response(
            {
                "count": len(ids),
                "max_model_len": self.profile.max_model_len,
                "tokens": ids,
                "token_strs": None,
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.engine, self.created)
        return web.Response(body=text, content_type="text/plain", charset="utf-8")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"workloads-sim-{__version__}"})

    async def debug_requests(self, request: web.Request) -> web.Response:
        if not self.debug:
            return _error(404, "ground truth is off; start the server with debug=True")
        rows = [vars(t) for t in self.engine.truths]
        return web.json_response({"requests": rows})


def build_app(engine: Engine, *, corpus: str = "stdlib", debug: bool = False) -> web.Application:
    """The aiohttp application serving ``engine``. The caller starts and stops the engine."""
    handlers = _Handlers(engine, load_corpus(corpus), debug)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[ENGINE_KEY] = engine
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_post("/tokenize", handlers.tokenize)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/version", handlers.version)
    app.router.add_get("/debug/requests", handlers.debug_requests)
    return app
