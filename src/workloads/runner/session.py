"""One simulated user: opens its conversation at the configured depth, prepares each turn
(sizing and shareable prefix, with the target's /tokenize where it has one), streams it, and
turns the response into a TurnRecord. A failed request is a record, never an exception; the
session goes on.

Preparing and sending are separate steps so that the tokenizer calls of :meth:`prepare` are
never on a turn's timed path: in lock-step every session prepares turn k before any sends it.
With free or arrivals pacing a session prepares its next turn while others stream; in a
measured repetition (inside the window) it then sizes quietly (:attr:`CellSizing.quiet`: no
``/tokenize`` call), and the exact token ids the what-if oracle needs are rendered after the
window (:meth:`Session.finish_trace`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from array import array
from collections.abc import Callable, Mapping, Sequence

from workloads.core import tokens
from workloads.core.agent import Step, session_plan, tool_schemas
from workloads.core.clock import pace
from workloads.core.conversation import Conversation, complete_calls
from workloads.core.send_slice import send_slice
from workloads.core.tokens import Message, TokenizeError
from workloads.model.records import TurnRecord
from workloads.model.scenario import Scenario
from workloads.runner.options import SessionIO
from workloads.runner.order import OpeningOrder
from workloads.runner.plan import (
    LastTurn,
    Seen,
    TurnPlan,
    estimated_shareable,
    observation,
    turn_base,
)
from workloads.runner.sizing import CellSizing, PreparedTurn
from workloads.runner.turn import (
    PromptHasher,
    RecordHead,
    TokenTrace,
    build_body,
    identity,
    record_from_response,
    step_fields,
)
from workloads.wire.client import ChatResponse, partial_response

__all__ = ["Session"]


class Session:
    """One user's conversation in one repetition.

    Call :meth:`open` once, then for turns 1, 2, ... in order :meth:`prepare` and
    :meth:`send` (or :meth:`turn`, which does both).
    """

    def __init__(
        self,
        *,
        io: SessionIO,
        scenario: Scenario,
        conversation: Conversation,
        sizing: CellSizing,
        repetition: int,
        warmup: bool,
        cell: int = 0,
        script: Mapping[int, Sequence[Message]] | None = None,
        plan: tuple[Step, ...] | None = None,
        parent: int | None = None,
        kid_scripts: Mapping[int, Mapping[int, Sequence[Message]]] | None = None,
    ) -> None:
        self.io = io  # the client, the model, where records and transcripts go
        self.scenario = scenario
        self.conversation = conversation
        self.sizing = sizing
        self.repetition = repetition
        self.warmup = warmup
        self.cell = cell
        self.script = script  # replay: each turn's recorded messages, sent as they are
        # The steps this session plays (core/agent.py): sizes, kinds, pauses, sub-agents.
        self.plan = (
            plan
            if plan is not None
            else session_plan(scenario, cell, repetition, conversation.session)
        )
        self.parent = parent  # a sub-agent's: the session that spawned it
        self.kid_scripts = kid_scripts  # replay: the recorded sub-agents' turns, by session
        self.tools = tool_schemas(scenario.tools)
        # A fleet's (runner/fleet.py): the window (repetition, warm-up) a step sized or sent
        # now belongs to; its sub-agents take it too. None: this session's repetition.
        self.window: Callable[[float], tuple[int, bool]] | None = None
        self.children: list[Session] = []  # sub-agents spawned, in order
        self._compacted = False  # the last step sent was a compaction
        self._opening: list[Message] = []  # the opening messages (set by open)
        # nonce = "run": who of this repetition's sessions sent turn 1 first (shared); the
        # first to send has nothing the server has seen.
        self.order: OpeningOrder | None = None
        # The opening's length, and its ids where they are read (nonce = "run": the prefix
        # the sessions share, repetition.share_opening); else only the length is.
        self.opening_tokens = 0
        self.opening_ids: array[int] = array("i")
        self.opening_exact = sizing.exact
        # Turn 1's shareable prefix: the part of the opening other sessions of this
        # repetition also send (nonce = "run"); set by the runner once all have opened.
        self.peer_shared: int | None = 0
        self.peer_shared_exact = True
        # (session, turn, actual added tokens, estimated added), for the warm-up correction
        self.observations: list[tuple[int, int, int, int]] = []
        self.seen = Seen()  # what the server has computed KV for
        self._prompt_hash = PromptHasher()  # the records' prompt hashes, by new messages
        self.last = LastTurn()  # what this session sent last
        self._plan: TurnPlan | None = None
        # Exact token ids of the turns sent, in the target's tokenizer, for the what-if cache
        # oracle; only kept when the target tokenizes (turns sized by estimate are rendered
        # after the window, by finish_trace).
        self.token_log: list[TokenTrace] = []

    async def open(self, n_system: int) -> None:
        """Build the opening context at this session's (drawn) opening of the target's
        tokens: its plan's first prior context."""
        messages, ids, exact = await self.sizing.fit_opening(
            self.conversation, n_system, self.plan[0].prior_tokens if self.plan else None
        )
        self.conversation.set_opening(messages)
        self.opening_tokens, self.opening_exact = len(ids), exact
        self.opening_ids = ids if self.scenario.nonce == "run" else array("i")
        self._opening = messages  # what a rebuilt history keeps (Step: a shrunk prior)

    async def _shareable(self, turn: int, prepared: PreparedTurn) -> tuple[int | None, bool]:
        """What of this turn's prompt the server has already seen, and whether that is exact.

        Exact: the longest common prefix of this prompt's ids and the ids the server computed
        KV for (the last prompt that reached it, followed by its reply's ids). Estimated: the
        previous turn's usage prompt + completion tokens.
        """
        if turn == 1:
            return self.peer_shared, self.peer_shared_exact and prepared.exact
        seen = self.seen
        if prepared.exact and seen.exact:
            try:
                reply_ids = await self.sizing.tokenizer.encode(seen.reply)
            except TokenizeError:
                pass
            else:
                if self.token_log:
                    self.token_log[-1].completion = array("i", reply_ids)
                seen_ids = seen.ids + tokens.compact(reply_ids)
                return tokens.common_prefix_length(prepared.ids, seen_ids), True
        elif prepared.exact and not seen.tokens:
            return 0, True  # nothing of this session reached the server yet
        return estimated_shareable(self.last), False

    def _take_window(self) -> None:
        """A fleet's session: its repetition and warm-up are those of the window now."""
        if self.window is not None:
            self.repetition, self.warmup = self.window(time.perf_counter())

    def tool_choice(self, turn: int) -> str | None:
        """What turn ``turn``'s request asks of tool calls (scenario ``tool_choice``): with
        "plan", "required" when the plan's next step is a tool result (or a sub-agent's
        next step), "none" when it is a human request or a compaction, or the session ends
        there; a compaction's own request is "none" (the summary is text: the tools stay in
        the prompt, its cached prefix holds them). None: send none ("auto"). A model that
        disobeys is not corrected: the next step is sent as planned (a tool result after a
        reply without calls goes in a user message; a human request answers stray calls with
        a short result), and the per-kind report counts how often steps followed replies."""
        if self.step(turn).kind == "compaction":
            return "none"
        if self.scenario.tool_choice != "plan":
            return None
        following = self.plan[turn] if turn < len(self.plan) else None
        if following is not None and following.kind in ("tool", "subagent"):
            return "required"
        return "none"

    def step(self, turn: int) -> Step:
        """Turn ``turn``'s step of the plan."""
        return self.plan[turn - 1]

    async def prepare(self, turn: int) -> None:
        """Size turn ``turn`` and work out its shareable prefix (tokenizer calls, untimed).

        Turn 1 is always prepared before the repetition's first request; a later turn may be
        prepared while other sessions stream, so in a measured repetition (the window is open
        from before its first request to after its last response) it is sized quietly when
        :attr:`CellSizing.quiet`, and in a warm-up it teaches quiet sizing. A sub-agent's
        turns all run while others stream."""
        await pace()  # sizing is turn-end work: the loop reads its sockets first
        self._take_window()  # quiet sizing or not: the window the sizing happens in
        step = self.step(turn)
        inside = turn > 1 or self.parent is not None
        quiet = inside and not self.warmup and self.sizing.quiet
        if self.scenario.agent is not None:
            self.conversation.kinds[turn] = step.kind
        base, exact = turn_base(
            turn,
            self.last,
            opening=self.opening_tokens,
            opening_exact=self.opening_exact,
            sizing_exact=self.sizing.exact,
        )
        shrunk = self._shrunk(turn)
        if shrunk:  # a prior below the running context: the history rebuilt to it
            self.conversation.messages = self._rebuilt(step.prior_tokens)
        if self._compacted or shrunk:  # the history is no longer the last prompt and reply
            base = None
        if quiet:  # the history measured by the estimate, as the warm-up's teaching did
            base, exact = None, False
        teach = self.warmup and self.sizing.quiet and self.script is None
        if self.script is not None:
            prepared = await self.sizing.replayed(self.script[turn], exact=not quiet)
        elif step.kind == "compaction":
            assert self.scenario.agent is not None and self.scenario.agent.compaction
            text = self.scenario.agent.compaction.instruction
            messages = self.conversation.with_text(text, "compaction")
            prepared = await self.sizing.replayed(messages, exact=exact and not quiet)
            teach = False
        else:
            # Turn 1 is sized to its whole prompt; a sub-agent's too (its opening is its
            # parent's system message: the plan's prompt, or that message alone when more).
            first = turn == 1
            whole = step.prior_tokens + step.new_tokens
            prepared = await self.sizing.fit_turn(
                self.conversation,
                turn,
                base,
                exact=exact,
                new_tokens=step.new_tokens,
                prompt_tokens=whole if first or shrunk else None,
            )
        if teach:
            await self.sizing.teach(self.conversation, turn, prepared)
        await pace()
        shareable, shareable_exact = await self._shareable(turn, prepared)
        if (self._compacted or shrunk) and not shareable_exact:
            shareable = None  # the estimate (last prompt + reply) does not hold after it
        self._plan = TurnPlan(prepared, shareable, shareable_exact)

    def _shrunk(self, turn: int) -> bool:
        """Whether turn ``turn``'s prior is below the running context its plan gives (the
        previous step's prior + new + output; a compaction's follow-up is its own case)."""
        if turn == 1:
            return False
        step, last = self.step(turn), self.step(turn - 1)
        running = last.prior_tokens + last.new_tokens + last.output_tokens
        return last.kind != "compaction" and step.prior_tokens < running

    def _rebuilt(self, prior: int) -> list[Message]:
        """The history a shrunk step starts from: the opening when the prior holds it, else
        the system message alone (a sub-agent's opening is its parent's system message)."""
        opening = self._opening or self.conversation.messages[:1]
        system = [m for m in opening[:1] if m["role"] == "system"]
        return list(opening if prior >= self.opening_tokens else system)

    def family(self) -> list[Session]:
        """This session and every sub-agent it spawned (theirs too), in spawn order."""
        return [self, *(s for kid in self.children for s in kid.family())]

    async def send(self, turn: int, *, lag_ns: int | None = None) -> TurnRecord:
        """Stream the prepared turn ``turn`` and record it; ``lag_ns``: how late after its
        due time it is being sent (the send slice's wait is added to it)."""
        if self._plan is None:
            await self.prepare(turn)
        assert self._plan is not None
        # Sends that fall due together (a repetition's first turns) go out a slice per loop
        # iteration, so the sockets are read between them; the wait is pacing lag.
        waiting = time.perf_counter_ns()
        self._take_window()
        await send_slice()
        if lag_ns is not None:
            lag_ns += time.perf_counter_ns() - waiting
        plan, self._plan = self._plan, None
        prepared = plan.prepared
        step = self.step(turn)
        self.conversation.commit(prepared.messages)
        io = self.io
        body = build_body(
            self.scenario,
            io.model,
            prepared.messages,
            output_tokens=step.output_tokens,
            tools=self.tools,
        )
        if self.tools:
            choice = self.tool_choice(turn)
            if choice is not None:
                body["tool_choice"] = choice
        sent = list(prepared.messages)  # the history list grows with the reply below
        head = RecordHead(
            repetition=self.repetition,
            warmup=self.warmup,
            session=self.conversation.session,
            turn=turn,
            configured_prior_tokens=step.prior_tokens,
            configured_prompt_tokens=step.prior_tokens + step.new_tokens,
            tokenized_prompt_tokens=prepared.tokens if prepared.exact else None,
            cell=self.cell,
            pacing_lag_ns=lag_ns,
        )
        shareable = plan.shareable
        if (
            turn == 1
            and self.order is not None
            and await self.order.first(self.conversation.session)
        ):
            shareable = 0  # no other session's opening has reached the server yet
        started = time.perf_counter_ns()
        try:
            response = await io.client.stream_chat(body)
        except asyncio.CancelledError as err:
            # The run ended with this turn in flight: keep it as an incomplete record, with
            # what the client measured before the cancellation when it kept it, and the
            # shareable prefix as a completed turn would have it (corrected above).
            partial = partial_response(err)
            if partial is not None:
                io.on_record(self._record(partial, head, step=step, plan=plan, shareable=shareable))
                raise
            io.on_record(
                TurnRecord(
                    **head.fields(),
                    status="incomplete",
                    error_kind="cancelled",
                    error_message="the run ended while this turn was in flight",
                    started_ns=started,
                    shareable_tokens=shareable,
                    shareable_exact=plan.shareable_exact,
                    **step_fields(step, self.parent),
                )
            )
            raise
        # What follows (the record, transcripts, the history) is turn-end work: in slices, so
        # sessions ending together do not hold the loop while others' chunks wait for stamps.
        # The response is complete: a stop that comes between slices still gets its record,
        # and the cancellation goes on after it.
        stopped = False

        async def slice_() -> None:
            nonlocal stopped
            if not stopped:
                try:
                    await pace()
                except asyncio.CancelledError:
                    stopped = True

        await slice_()
        record = self._record(response, head, step=step, plan=plan, shareable=shareable)
        session = self.conversation.session
        if (seen := observation(turn, session, prepared, record, self.last)) is not None:
            self.observations.append(seen)
        reached = response.http_status == 200 and (
            response.first_content_ns is not None or response.usage is not None
        )
        if reached:
            self.seen = Seen(prepared.ids, prepared.exact, response.text, prepared.tokens)
            if (prepared.exact or self.sizing.exact) and record.sent_ns is not None:
                self.token_log.append(
                    TokenTrace(
                        record.sent_ns,
                        turn,
                        prepared.ids,  # shared (never changed); empty when sized by estimate
                        # a fleet's warm-up turns are traced (sessions span windows),
                        # not counted; other warm-ups are not traced at all. A sub-agent's
                        # steps are replayed, not counted: the observed per-turn hit rate
                        # is the users' own sessions' (aggregate.users_own), and counting
                        # them put it above "unlimited" in 11 of 40 turns of a fleet.
                        counted=record.valid
                        and not record.warmup
                        and record.cached_tokens is not None
                        and self.parent is None,
                        messages=None if prepared.exact else sent,
                        reply=response.text,
                        calls_tokens=record.completion_tokens if response.tool_calls else None,
                    )
                )
        # The server's real reply goes into the history, even a partial one, but for tool
        # calls cut before their arguments closed (complete_calls); a turn with no reply at
        # all keeps the roles alternating with a marker.
        calls = complete_calls(response.tool_calls)
        cut = "a tool call cut off" if response.tool_calls else response.error_kind or "empty"
        self._compacted = step.kind == "compaction" and reached
        if self._compacted:  # the summary replaces the history after the system message
            self.conversation.compact(response.text)
        else:
            marker = f"(no reply: {cut})"
            self.conversation.add_reply(response.text if calls else response.text or marker, calls)
        reply = response.text if reached else None
        await slice_()
        record = record.model_copy(update=identity(sent, reply, self._prompt_hash))
        self.last = LastTurn(record, prepared.tokens, prepared.exact, response.text)
        if io.on_exchange is not None:
            await slice_()
            io.on_exchange(record, sent, reply, self._prompt_hash.digests)
        await slice_()
        io.on_record(record)
        if stopped:
            raise asyncio.CancelledError
        return record

    def _record(
        self,
        response: ChatResponse,
        head: RecordHead,
        *,
        step: Step,
        plan: TurnPlan,
        shareable: int | None,
    ) -> TurnRecord:
        return record_from_response(
            response,
            head,
            output_tokens=step.output_tokens,
            exact_output=self.scenario.exact_output,
            shareable_tokens=shareable,
            shareable_exact=plan.shareable_exact,
            step=step,
            parent_session=self.parent,
            tools_offered=bool(self.tools),
            replayed=self.script is not None,
        )

    async def finish_trace(self) -> None:
        """Complete the token trace for the what-if oracle; call after the window, where
        these tokenizer calls overlap no measured stream. Turns sized by estimate get their
        prompt rendered by the target; every turn whose reply's ids no later exact turn
        encoded (the last one, one before a quiet turn) gets them."""
        if not self.token_log or not self.sizing.exact:
            return
        tok = self.sizing.tokenizer

        async def complete(trace: TokenTrace) -> None:
            # On a failed call the trace stays incomplete: a prompt left empty keeps the
            # oracle from running on a partial trace; a reply without ids, as before, is
            # replayed uncached.
            with contextlib.suppress(TokenizeError):
                if trace.messages is not None:
                    trace.prompt = array("i", await tok.render(trace.messages, "generate"))
                    trace.messages = None
                if not trace.completion and trace.reply:
                    trace.completion = array("i", await tok.encode(trace.reply))
                trace.reply = ""  # the run keeps traces to its end: not their texts

        async with asyncio.TaskGroup() as tg:  # the tokenizer bounds its own concurrency
            for trace in self.token_log:
                tg.create_task(complete(trace))
        for trace, after in itertools.pairwise(self.token_log):
            n, start = trace.calls_tokens, len(trace.prompt)
            if n and start and after.prompt[:start] == trace.prompt:
                # The reply's text lacks its calls, which the server generated and cached
                # and the next prompt carries: without them the "unlimited" cache read below
                # the observed hit rate in 5 of 6 turns of a run with tools (issue 35).
                trace.completion = after.prompt[start : start + n]

    async def turn(self, turn: int) -> TurnRecord:
        """Prepare and send turn ``turn``."""
        await self.prepare(turn)
        return await self.send(turn)
