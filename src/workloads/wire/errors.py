"""What can go wrong on the wire, named once: the exceptions a plain HTTP read of a target
(models, version, metrics, tokenize) can raise, and how they are described in a message.
The streaming chat client does not use aiohttp: :mod:`workloads.wire.stream` names its
failures in the closed set of :data:`~workloads.model.errors.ErrorKind` a TurnRecord carries."""

from __future__ import annotations

import aiohttp

from workloads.wire.transport import tls_message

__all__ = ["READ_ERRORS", "describe"]

# A GET or POST that failed: no connection, a broken or stalled read, a body that was not the
# text or JSON asked for (ValueError covers json and UnicodeDecodeError).
READ_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError, ValueError)


def describe(err: BaseException, url: str = "the target") -> str:
    """``ExceptionName: message`` (aiohttp's messages alone often say only the URL); a
    certificate failure at ``url`` as the one line that names the option fixing it."""
    tls = tls_message(err, url)
    if tls is not None:
        return tls
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
