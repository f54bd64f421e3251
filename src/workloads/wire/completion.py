"""One plain completion: ``POST {base}/completions`` (not streamed), for the correctness
gate's text form (:data:`workloads.core.gate.TEXT_CASES`). A failure is an answer with an
error kind, never an exception, and is not re-sent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from workloads.model.errors import ErrorKind
from workloads.wire.transport import Transport

__all__ = ["TextAnswer", "complete"]


@dataclass(frozen=True, slots=True)
class TextAnswer:
    """What one completion request gave: the text, or the error kind and message."""

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None


def _status_kind(status: int) -> ErrorKind:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "http_other"


async def complete(
    base_url: str, body: dict[str, Any], *, transport: Transport, timeout_s: float,
    session: aiohttp.ClientSession | None = None,
) -> TextAnswer:
    """Send ``body`` (with ``"prompt"``) to ``{base_url}/completions`` and read the first
    choice's text, finish_reason and ``usage.completion_tokens``. ``session``: one from
    ``transport.session`` to reuse (else one of its own); each request is capped at
    ``timeout_s``."""
    url = base_url.rstrip("/") + "/completions"
    try:
        if session is None:
            async with transport.session(url, timeout_s=timeout_s, limit=1) as own:
                return await _post(own, url, body, transport, timeout_s)
        return await _post(session, url, body, transport, timeout_s)
    except TimeoutError:
        return TextAnswer(error_kind="turn_deadline",
                          error_message=f"no answer within {timeout_s:g} s")
    except aiohttp.ClientConnectorError as err:
        return TextAnswer(error_kind="connect_failed",
                          error_message=transport.redact(f"{type(err).__name__}: {err}"))
    except aiohttp.ClientError as err:
        return TextAnswer(error_kind="disconnected",
                          error_message=transport.redact(f"{type(err).__name__}: {err}"))


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                transport: Transport, timeout_s: float) -> TextAnswer:
    async with session.post(url, json=body,
                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        status = response.status
        raw = await response.read()
    text = raw.decode("utf-8", "replace")
    if status != 200:
        return TextAnswer(error_kind=_status_kind(status),
                          error_message=transport.redact(f"{url} answered {status}: "
                                                         f"{' '.join(text.split())[:300]}"))
    try:
        data = json.loads(text)
        choice = data["choices"][0]
        out = choice["text"]
        if not isinstance(out, str):
            raise TypeError("text is not a string")
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return TextAnswer(error_kind="malformed",
                          error_message=f"not a completion ({type(err).__name__}): "
                          f"{' '.join(text.split())[:120]}")
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return TextAnswer(text=out, finish_reason=reason if isinstance(reason, str) else None,
                      completion_tokens=tokens if isinstance(tokens, int) else None)
