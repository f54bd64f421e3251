"""Sub-agents: a tool step of a session spawns sessions that share its system message (the
prompt and the tools), not its history, play their own plans concurrently, each on its own
clock, and hand their final replies back as the step's tool result.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from workloads.core.agent import child_session, top_sessions
from workloads.core.clock import sleep_until_or
from workloads.core.conversation import Conversation
from workloads.core.tokens import TokenizeError
from workloads.runner.session import Session

__all__ = ["play_alone", "spawn"]


async def spawn(parent: Session, turn: int, stop: asyncio.Event, end: float | None = None) -> None:
    """Run the sub-agents ``parent``'s turn ``turn`` spawns, concurrently, each on its own
    clock; their final replies become the start of the step's tool result. Call before
    ``parent.prepare(turn)``. ``end``: a fleet's last window's end (perf_counter s): no
    sub-agent step starts after it."""
    step = parent.step(turn)
    if not step.children:
        return
    head = parent.conversation.messages[:1]
    system = head if head and head[0]["role"] == "system" else []
    kids = []
    for plan in step.children:
        index = len(parent.children)
        me = parent.conversation
        conversation = Conversation(
            corpus=me.corpus,
            style=me.style,
            seed=me.seed,
            session=child_session(top_sessions(parent.scenario), me.session, index),
            nonce=f"{me.nonce}/{index}",
            run_nonce=me.run_nonce,
        )
        conversation.set_opening(system)
        script = (parent.kid_scripts or {}).get(conversation.session)
        if script is not None and any(s.turn not in script for s in plan):
            script = None  # not recorded whole: played afresh
        kid = Session(
            io=parent.io,
            scenario=parent.scenario,
            conversation=conversation,
            sizing=parent.sizing,
            repetition=parent.repetition,
            warmup=parent.warmup,
            cell=parent.cell,
            plan=plan,
            parent=me.session,
            script=script,
        )
        kid.window = parent.window  # a fleet's windows
        parent.children.append(kid)
        kids.append(kid)
    results = await asyncio.gather(*(play_alone(kid, stop, end) for kid in kids))
    parent.conversation.heads[turn] = "\n\n".join(r for r in results if r)


async def play_alone(kid: Session, stop: asyncio.Event, end: float | None = None) -> str:
    """Play every step of a sub-agent's plan on its own clock, none starting after ``end``
    (perf_counter s; None: no end); the final reply's text (what it hands back)."""
    if kid.conversation.messages:
        # The system message is the parent's: the server has seen it (turn 1's share).
        tok = (
            kid.sizing.tokenizer
            if kid.sizing.exact and not (kid.sizing.quiet and not kid.warmup)
            else kid.sizing.estimate
        )
        with contextlib.suppress(TokenizeError):
            kid.opening_tokens = len(await tok.render(kid.conversation.messages, "continue"))
            kid.opening_exact = tok.exact
            kid.peer_shared = kid.opening_tokens
            kid.peer_shared_exact = tok.exact
    since = time.perf_counter()
    for step in kid.plan:
        await kid.prepare(step.turn)
        late = await sleep_until_or(since + step.pause_s, stop)
        if late is None or (end is not None and time.perf_counter() >= end):
            break
        await kid.send(step.turn, lag_ns=round(late * 1e9))
        since = time.perf_counter()
    return kid.last.reply
