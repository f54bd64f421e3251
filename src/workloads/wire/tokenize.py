"""The target's own tokenizer over HTTP: the truth about its token counts, where it has one.

* vLLM (and servers copying it): ``POST /tokenize`` with ``messages`` renders the chat
  template, so the count includes every template token; ``prompt`` encodes plain text;
* llama.cpp: ``POST /apply-template`` renders the chat to a string and ``POST /tokenize``
  ``{"content", "add_special": true}`` encodes it the way its chat endpoint does.

Both send the request's ``tools`` (the tokenizer's ``tools`` attribute) with every render, so
the schemas the template adds are counted.

Its calls are HTTP requests to the server under test: the session makes them before a turn is
sent, never between send and first byte, and the run counts them (``calls``, ``seconds``) so
the result can say what they cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Self

import aiohttp
import orjson

from workloads.core.tokens import Message, Render, TokenizeError
from workloads.wire.errors import READ_ERRORS, describe
from workloads.wire.transport import Transport

__all__ = ["LlamaCppTokenizer", "VllmTokenizer", "probe_tokenizer"]


class _HttpTokenizer:
    """Shared plumbing: one small connection pool, a concurrency cap, call accounting."""

    def __init__(
        self,
        root_url: str,
        model: str,
        *,
        transport: Transport | None = None,  # headers, proxy, TLS (None: the defaults)
        concurrency: int = 8,  # at most this many renders queue at the target at once
        timeout_s: float = 120.0,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.root_url = root_url.rstrip("/")
        self.model = model
        self.calls = 0
        self.seconds = 0.0
        # The request's tool schemas: chat templates render them (into the system prompt), so
        # a count without them is short by their size. Set by the caller, sent with renders.
        self.tools: list[dict[str, Any]] | None = None
        self._transport = transport or Transport()
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout_s = timeout_s
        self._template_kwargs = template_kwargs
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._http = self._transport.session(self.root_url, timeout_s=self._timeout_s, limit=8)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._http is not None, "use 'async with' before calling the tokenizer"
        url = self.root_url + path
        async with self._limit:
            started = time.perf_counter()
            try:
                async with self._http.post(url, json=body) as resp:
                    if resp.status != 200:
                        detail = self._transport.redact(await resp.text())[:200]
                        raise TokenizeError(f"POST {url}: HTTP {resp.status}: {detail}")
                    # orjson: a deep prompt's answer is a list of ~100K ids, and it is
                    # parsed on the loop between turns (the stdlib's json took ~4x longer)
                    data = orjson.loads(await resp.read())
            except READ_ERRORS as err:
                raise TokenizeError(f"POST {url}: {describe(err, url)}") from err
            finally:
                self.calls += 1
                self.seconds += time.perf_counter() - started
        if not isinstance(data, dict):
            raise TokenizeError(f"POST {url}: answer is not a JSON object")
        return data

    @staticmethod
    def _ids(data: dict[str, Any], url: str) -> list[int]:
        ids = data.get("tokens")
        if not isinstance(ids, list):
            raise TokenizeError(f"{url}: answer has no 'tokens' list")
        return [int(i) for i in ids]


class VllmTokenizer(_HttpTokenizer):
    """vLLM's ``/tokenize``: ``messages`` renders the chat template server side."""

    description = "vLLM-shaped /tokenize (messages)"
    exact = True

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "add_generation_prompt": mode == "generate",
            "continue_final_message": mode == "continue",
        }
        if self._template_kwargs:
            body["chat_template_kwargs"] = self._template_kwargs
        if self.tools:
            body["tools"] = self.tools
        return self._ids(await self._post("/tokenize", body), "/tokenize")

    async def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return self._ids(await self._post("/tokenize", body), "/tokenize")


# Marks the end of the last message when llama.cpp renders a "continue" prefix: its
# /apply-template always closes the chat, so we render with the marker and cut before it.
_SENTINEL = "\u2063workloads-cut\u2063"


class LlamaCppTokenizer(_HttpTokenizer):
    """llama.cpp: ``/apply-template`` renders the chat, ``/tokenize`` encodes the string with
    ``add_special`` as its chat endpoint does (``parse_special`` is always on there)."""

    description = "llama.cpp /apply-template + /tokenize"
    exact = True

    async def _template(self, messages: Sequence[Message]) -> str:
        body: dict[str, Any] = {"messages": list(messages)}
        if self.tools:  # llama.cpp renders tools only with --jinja (else HTTP 400)
            body["tools"] = self.tools
        data = await self._post("/apply-template", body)
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise TokenizeError("/apply-template: answer has no 'prompt' string")
        return prompt

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        if mode == "generate" or not messages:
            prompt = await self._template(messages)
        else:
            marked = [*messages[:-1], {**messages[-1]}]
            marked[-1]["content"] = (marked[-1].get("content") or "") + _SENTINEL
            prompt = await self._template(marked)
            cut = prompt.rfind(_SENTINEL)
            if cut < 0:
                raise TokenizeError("/apply-template dropped the end of the last message")
            prompt = prompt[:cut]
        data = await self._post("/tokenize", {"content": prompt, "add_special": True})
        return self._ids(data, "/tokenize")

    async def encode(self, text: str) -> list[int]:
        data = await self._post("/tokenize", {"content": text, "add_special": False})
        return self._ids(data, "/tokenize")


async def probe_tokenizer(
    root_url: str,
    model: str,
    *,
    transport: Transport | None = None,
    template_kwargs: dict[str, Any] | None = None,
    timeout_s: float = 120.0,  # per call; a probe of a target that hangs still ends
) -> VllmTokenizer | LlamaCppTokenizer | None:
    """The target's tokenizer, if it has one of the shapes we know; None otherwise.

    Tries vLLM's ``/tokenize`` with ``messages`` first, then llama.cpp's ``/apply-template``.
    The returned tokenizer is not yet entered (use ``async with``).
    """
    hello = [{"role": "user", "content": "hello"}]
    for cls in (VllmTokenizer, LlamaCppTokenizer):
        candidate = cls(
            root_url,
            model,
            transport=transport,
            template_kwargs=template_kwargs,
            timeout_s=timeout_s,
        )
        async with candidate:
            try:
                ids = await candidate.render(hello, "generate")
                plain = await candidate.encode("hello")
            except TokenizeError:
                continue
        if ids and plain and len(ids) > len(plain):
            return cls(
                root_url,
                model,
                transport=transport,
                template_kwargs=template_kwargs,
                timeout_s=timeout_s,
            )
    return None
