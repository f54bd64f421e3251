"""Who sends turn 1 first in a repetition. With nonce = "run" the sessions' openings share a
prefix, and the first opening to reach the server finds none of it computed: its shareable
prefix is 0, the others' is what they have in common with another session.

Within one process a list answers it; across worker processes the run's coordinator does
(:mod:`workloads.runner.workers.pool`).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["LocalOpeningOrder", "OpeningOrder"]


class OpeningOrder(Protocol):
    """The order in which a repetition's sessions send turn 1."""

    async def first(self, session: int) -> bool:
        """Note that ``session`` sends turn 1 now; True when no session sent it before."""
        ...


class LocalOpeningOrder:
    """:class:`OpeningOrder` within one process."""

    def __init__(self) -> None:
        self.sent: list[int] = []  # sessions that have sent turn 1, in send order

    async def first(self, session: int) -> bool:
        self.sent.append(session)
        return len(self.sent) == 1
