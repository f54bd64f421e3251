"""The line between a run's coordinator and its worker processes: one TCP connection per
worker, a JSON object per line (orjson), every message a dict with an ``op``.

A worker proves it was started by this run with the run's secret token in its first message;
a connection that does not is closed. Nothing on the wire is executed: messages are data
(records as their JSON dump), never pickles.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from typing import Any

import orjson

__all__ = ["LINE_LIMIT", "Channel", "ChannelClosed", "authentic"]

LINE_LIMIT = 1 << 30  # a message may carry a 100K-token history or token trace


class ChannelClosed(ConnectionError):
    """The other end went away (a worker exited, or the coordinator did)."""


class Channel:
    """Messages over one stream pair. ``send`` queues (records go out as they are made, from
    synchronous callbacks); ``flush`` waits until the kernel took them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, op: str, **fields: Any) -> None:
        if self.writer.is_closing():
            raise ChannelClosed("the channel is closed")
        self.writer.write(orjson.dumps({"op": op, **fields}) + b"\n")

    async def flush(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError as err:
            raise ChannelClosed(str(err)) from err

    async def recv(self) -> dict[str, Any]:
        """The next message; ChannelClosed at the end of the stream."""
        try:
            line = await self.reader.readline()
        except (ConnectionError, asyncio.IncompleteReadError) as err:
            raise ChannelClosed(str(err)) from err
        if not line:
            raise ChannelClosed("the other end closed the channel")
        message = orjson.loads(line)
        if type(message) is not dict or not isinstance(message.get("op"), str):
            raise ChannelClosed(f"not a message: {line[:80]!r}")
        return message

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def authentic(message: dict[str, Any], token: str) -> bool:
    """Whether a worker's hello carries the run's token (compared in constant time)."""
    given = message.get("token")
    return (
        message.get("op") == "hello"
        and isinstance(given, str)
        and hmac.compare_digest(given.encode(), token.encode())
    )
