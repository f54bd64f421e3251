"""The options a run's parts share, as small frozen values instead of the same keywords
threaded through every constructor (httpx's ``Timeout`` and ``Limits`` are the model):

* :class:`SessionIO` — what a session sends through and where what it measures goes: the
  client, the model named in every request, the record callback and the transcript
  callback. Players, repetitions, replays, trace replays and sub-agents pass it on whole.
* :class:`Stopping` — how a run stops from outside: the ``stop`` event and the grace the
  turns in flight get once it is set.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from workloads.model.records import TurnRecord
from workloads.runner.turn import Exchange
from workloads.wire.client import ChatClient

__all__ = ["SessionIO", "Stopping"]


@dataclass(frozen=True)
class SessionIO:
    """What a session sends through and where its records and transcripts go."""

    client: ChatClient
    model: str  # the model named in every request body
    on_record: Callable[[TurnRecord], None]  # every TurnRecord, the moment it is made
    on_exchange: Exchange | None = None  # a turn's messages and reply; None: not kept

    def through(self, client: ChatClient) -> SessionIO:
        """The same, sending through ``client`` (a monitor's counting wrapper)."""
        return dataclasses.replace(self, client=client)


@dataclass(frozen=True)
class Stopping:
    """How a run stops from outside: once ``event`` is set no new turn starts, and the turns
    in flight get ``grace_s`` seconds before they are cancelled (and recorded so)."""

    event: asyncio.Event = field(default_factory=asyncio.Event)  # default: never set
    grace_s: float = 30.0
