"""Plain completions: ``POST {base}/completions`` (not streamed), for the correctness gate's
text form (:data:`workloads.core.gate.TEXT_CASES`) and the likelihood probe
(:mod:`workloads.wire.likelihood`). A failed text case is an answer with an error kind, never
an exception, and is not re-sent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from workloads.model.errors import ErrorKind
from workloads.wire.failures import connect_kind, status_kind
from workloads.wire.transport import Transport

__all__ = ["TextAnswer", "complete", "post_completions"]


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


async def post_completions(
    base_url: str,
    body: dict[str, Any],
    *,
    transport: Transport,
    timeout_s: float,
) -> tuple[int, bytes]:
    """``POST {base_url}/completions`` with ``body``, through ``transport`` (headers, proxy,
    TLS), capped at ``timeout_s``: the status and the body. Raises what aiohttp raises, and
    TimeoutError; the gate's text form and the likelihood probe read the answer their way."""
    url = base_url.rstrip("/") + "/completions"
    async with (
        transport.session(url, timeout_s=timeout_s, limit=1) as session,
        session.post(url, json=body) as response,
    ):
        return response.status, await response.read()


async def complete(
    base_url: str,
    body: dict[str, Any],
    *,
    transport: Transport,
    timeout_s: float,
) -> TextAnswer:
    """Send ``body`` (with ``"prompt"``) to ``{base_url}/completions`` and read the first
    choice's text, finish_reason and ``usage.completion_tokens``."""
    try:
        status, raw = await post_completions(
            base_url, body, transport=transport, timeout_s=timeout_s
        )
    except TimeoutError:
        return TextAnswer(
            error_kind="turn_deadline", error_message=f"no answer within {timeout_s:g} s"
        )
    except aiohttp.ClientConnectorError as err:
        return TextAnswer(
            error_kind=connect_kind(err.os_error),
            error_message=transport.redact(f"{type(err).__name__}: {err}"),
        )
    except aiohttp.ClientError as err:
        return TextAnswer(
            error_kind="disconnected",
            error_message=transport.redact(f"{type(err).__name__}: {err}"),
        )
    text = raw.decode("utf-8", "replace")
    if status != 200:
        return TextAnswer(
            error_kind=status_kind(status),
            error_message=(
                f"{base_url.rstrip('/')}/completions answered {status}: "
                f"{' '.join(transport.redact(text).split())[:300]}"
            ),
        )
    try:
        data = json.loads(text)
        choice = data["choices"][0]
        out = choice["text"]
        if not isinstance(out, str):
            raise TypeError("text is not a string")
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return TextAnswer(
            error_kind="malformed",
            error_message=f"not a completion ({type(err).__name__}): "
            f"{' '.join(text.split())[:120]}",
        )
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return TextAnswer(
        text=out,
        finish_reason=reason if isinstance(reason, str) else None,
        completion_tokens=tokens if isinstance(tokens, int) else None,
    )
