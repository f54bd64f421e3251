"""Depth control: cut each session's text so its prompts have the configured number of the
*target's* tokens.

Size: past 400 lines on purpose. The opening, turn and shared-prefix fits share one
memo, one pad search and one fallback rule; split apart they would pass that state around.

What is made exact (with a target ``/tokenize``), per session and repetition:

* the opening — ``opening_tokens`` = the rendered chat before turn 1's new content
  (``continue_final_message``: up to the end of the opening user text);
* every turn's prompt — turn 1: ``opening_tokens + turn_tokens``; turn k > 1: the previous
  prompt + the previous completion + ``turn_tokens``. So with exact-length replies, turn k's
  prompt is exactly ``opening_tokens + k·turn_tokens + (k-1)·output_tokens``, and the turn's
  new content absorbs the template's framing;
* with ``nonce = "run"`` and ``shared_prefix_tokens``: the prefix common to the sessions.

How: a secant search over the text length (:func:`workloads.core.tokens.fit`). A turn's content
is first fitted with cheap plain-text encodes of the content alone, then checked with one
render of the whole chat; sizes learned on one repetition seed the next (the text is the same,
only the nonces differ, and nonce words have a stable token count), so after the first
repetition a turn usually costs one full render and two small encodes.

A cut can miss by a token: one tiktoken token may be two of the target's, so some counts
fall between two cuts. A short pad ("." or "..", after a slightly shorter cut) closes the
gap; it is chosen with the same cheap encodes.

Without a target ``/tokenize`` the same search runs on tiktoken estimates; the warm-up's
``usage.prompt_tokens`` then gives, per session and turn, the ratio of the target's tokens to
estimated ones (the warm-up sends the same text, only the nonces differ), and measured
repetitions are sized with it (:meth:`CellSizing.learn`).

Quiet sizing: a ``/tokenize`` call is a request to the server under test. In lock-step every
turn is sized between barriers, with no stream in flight; with free or arrivals pacing a
session sizes its next turn while other sessions' streams are in flight, so in a measured
repetition (inside the window: it opens before a cell's first measured request and closes
after its last response) such turns are sized by tiktoken instead, corrected per session and
turn by the ratios the warm-up's exact sizing taught (:meth:`CellSizing.teach`; with drawn
sizes, whose warm-up drew other content, by one ratio pooled over every taught turn), unless
``sizing_during_window = "exact"`` (:attr:`CellSizing.quiet`).
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from workloads.core import tokens
from workloads.core.agent import tool_schemas
from workloads.core.clock import pace
from workloads.core.conversation import Conversation
from workloads.core.tokens import EstimateTokenizer, Message, TargetTokenizer, TokenizeError
from workloads.model.records import TurnRecord
from workloads.model.results import Sizing
from workloads.model.scenario import Scenario, Sizes, nominal

__all__ = ["CellSizing", "PreparedTurn", "SessionMemo", "sizing_warnings"]

# Template tokens a turn adds around its content before anything is measured: "\n\n" plus
# end-of-message and generation prompt when appended to the opening's user message; role
# markers on both sides when it is a new message (ChatML, Llama 3: 5 + 5).
_FRAMING_GUESS = {"append": 6, "message": 10, "tool": 12}
# Suffixes that add one to four tokens in common tokenizers, tried after cuts up to four
# tokens short of the target: a cut can land in a plateau (a run of indentation is trimmed
# away) followed by a jump of several tokens. Several spellings per length, because a
# punctuation mark can merge with the character before it.
_PADS = (".", ";", " ok.", " ok;", " ok ok.", " ok ok;", " ok ok ok.", "\n.", " .")


@dataclass
class SessionMemo:
    """What sizing learned about one session's text; kept across a cell's repetitions."""

    n_user: int | None = None
    user_pad: str = ""
    n_system: int | None = None  # when the opening is too small for the whole system text
    content: dict[int, tuple[int, str]] = field(default_factory=dict)  # turn -> (n, pad)
    framing: dict[str, int] = field(default_factory=dict)  # "append" | "message" -> tokens


@dataclass(frozen=True)
class PreparedTurn:
    """A turn ready to send: its messages and what sizing knows about them."""

    messages: list[Message]
    # The target's ids, compact (tokens.compact), when ``exact``: its shareable prefix and
    # the what-if trace read them. Empty for a turn sized by estimate, of which only the
    # count is ever read (the sessions' estimate ids were 117 MB of the client's peak at C256
    # in the agent shape, as lists: benchmarks/RESULTS.md).
    ids: array[int]
    exact: bool  # sized with the target's tokenizer
    target: int  # in the units sized in
    base: int  # what the server had seen before this turn, in the same units
    tokens: int  # the rendered prompt's length, in the same units


@dataclass
class CellSizing:
    """Sizing state for one cell: the tokenizer, learned sizes and warm-up corrections."""

    scenario: Scenario  # the cell's scenario (users and opening_tokens set)
    tokenizer: TargetTokenizer
    estimate: EstimateTokenizer = field(default_factory=EstimateTokenizer)
    memos: dict[int, SessionMemo] = field(default_factory=dict)
    # Estimate mode: target tokens per estimated token, per turn (median over sessions) and
    # per (session, turn), learned from the warm-up.
    scale: dict[int, float] = field(default_factory=dict)
    session_scale: dict[tuple[int, int], float] = field(default_factory=dict)
    shared_n_system: int | None = None
    fallbacks: int = 0  # turns sized by estimate because a /tokenize call failed
    # Exact mode: target tokens per estimated token seen in the warm-up, per turn (the
    # median of these is ``scale[turn]``).
    _taught: dict[int, list[float]] = field(default_factory=dict)
    # Σ target tokens and Σ estimated tokens over every turn learned from. With drawn sizes
    # the warm-up's (session, turn) drew other content than a measured repetition's, so its
    # own ratio, learned on a 20-token step, can be 4% off and then scale a 9,000-token tool
    # result (coding-agents on the simulator: 13 of 264 quietly sized turns 1-1.5% short);
    # such runs use this pooled, token-weighted ratio instead.
    _pooled: list[int] = field(default_factory=lambda: [0, 0])

    def __post_init__(self) -> None:
        if isinstance(self.tokenizer, EstimateTokenizer):
            self.estimate = self.tokenizer  # one memo of what was already encoded
        # The tool schemas every request carries are rendered into its prompt: count them.
        tools = tool_schemas(self.scenario.tools)
        self.tokenizer.tools = tools
        self.estimate.tools = tools

    @property
    def exact(self) -> bool:
        return self.tokenizer.exact

    @property
    def quiet(self) -> bool:
        """Quiet sizing: the measured repetitions' turns after the first are sized by the
        corrected estimate, calling no ``/tokenize``, and the warm-up's exactly sized turns
        teach that correction (:meth:`teach`). True for a target tokenizer with pacing that
        lets streams overlap while a session sizes its next turn (free, arrivals; lock-step
        sizes between barriers) unless ``sizing_during_window = "exact"``. Openings and
        turn 1 are sized before a repetition's first request, so they stay exact."""
        s = self.scenario
        return self.exact and s.pacing.mode != "lockstep" and s.sizing_during_window == "estimate"

    def memo(self, session: int) -> SessionMemo:
        return self.memos.setdefault(session, SessionMemo())

    def _units(self, target_tokens: int, turn: int, tok: TargetTokenizer, session: int) -> int:
        """Target tokens -> the units ``tok`` counts in (estimates are scaled)."""
        if tok.exact:
            return target_tokens
        ratio = self.session_scale.get((session, turn), self.scale.get(turn, 1.0))
        if self.scenario.sizes_vary and self._pooled[1] > 0:
            ratio = self._pooled[0] / self._pooled[1]
        return round(target_tokens / ratio)

    # --- the shared prefix (nonce = "run") -------------------------------------------------

    async def fit_shared(self, conversation: Conversation, probe: str) -> int:
        """``n_system``: the system text every session of the repetition sends.

        With ``nonce = "run"`` it is shared, so it is fitted here, once, not per session:
        to make the sessions' common prefix ``shared_prefix_tokens``, or, without that, the
        natural system prompt, cut only if the opening cannot hold it.
        """
        s = self.scenario
        natural = conversation.corpus.natural_system_tokens(s.content.style)
        if s.nonce != "run":
            return natural
        tok = self.tokenizer

        async def common(n: int) -> int:
            a = await tok.render(conversation.opening(n, 0), "continue")
            if not tok.exact:
                return len(a) - 4  # the user message's markers are not shared
            b = await tok.render(conversation.opening(n, 0, nonce=probe), "continue")
            return tokens.common_prefix_length(a, b)

        async def whole(n: int) -> int:
            return len(await tok.render(conversation.opening(n, 0), "continue"))

        try:
            if s.shared_prefix_tokens is None:
                low = (
                    s.opening_tokens.low
                    if isinstance(s.opening_tokens, Sizes)
                    else s.opening_tokens
                )
                opening = self._units(low, 1, tok, conversation.session)
                if await whole(natural) <= opening:
                    return natural
                measure, target = whole, opening - 2  # room for another session's nonce
            else:
                measure, target = common, s.shared_prefix_tokens
                if not tok.exact:
                    target = round(target / self.scale.get(1, 1.0))
            guess = self.shared_n_system if self.shared_n_system is not None else target - 30
            found = await tokens.fit(measure, target, guess=guess, max_calls=8)
        except TokenizeError:
            self.fallbacks += 1
            return self.shared_n_system if self.shared_n_system is not None else natural
        self.shared_n_system = found.n
        return found.n

    # --- the opening -----------------------------------------------------------------------

    async def fit_opening(
        self, conversation: Conversation, n_system: int, opening: int | None = None
    ) -> tuple[list[Message], array[int], bool]:
        """The opening messages, their ids (continue rendering, compact) and whether exact.
        ``opening``: this session's opening in target tokens (drawn; default the
        scenario's)."""
        opening = nominal(self.scenario.opening_tokens) if opening is None else opening
        if opening == 0:
            return [], array("i"), True
        try:
            return await self._fit_opening(conversation, n_system, self.tokenizer, opening)
        except TokenizeError:
            self.fallbacks += 1
            return await self._fit_opening(conversation, n_system, self.estimate, opening)

    async def _fit_opening(
        self, conversation: Conversation, n_system: int, tok: TargetTokenizer, opening: int
    ) -> tuple[list[Message], array[int], bool]:
        s = self.scenario
        memo = self.memo(conversation.session)
        target = self._units(opening, 1, tok, conversation.session)
        pinned = s.nonce == "run"  # the system text is shared: fit_shared chose it
        renders: dict[tuple[int, int, str], Sequence[int]] = {}

        async def by_pad(n_sys: int, n_user: int, pad: str) -> int:
            ids = await tok.render(conversation.opening(n_sys, n_user, pad), "continue")
            renders[(n_sys, n_user, pad)] = ids
            return len(ids)

        async def by_user(n: int) -> int:
            return await by_pad(n_system, n, "")

        async def by_system(n: int) -> int:
            return await by_pad(n, 0, "")

        key = (n_system, 0, "")
        if memo.n_system is None:
            guess = memo.n_user if memo.n_user is not None else target - n_system - 40
            last = (n_system, guess, memo.user_pad)
            if memo.n_user is not None and await by_pad(*last) == target:
                # as last time
                return conversation.opening(*last), tokens.compact(renders[last]), tok.exact
            found = await tokens.fit(by_user, target, guess=guess, max_calls=8)
            key = (n_system, found.n, "")
            if found.value != target and found.n > 0:
                key = await self._pad_opening(conversation, tok, n_system, found, target, by_pad)
            memo.n_user, memo.user_pad = key[1], key[2]
            if found.value > target and found.n == 0 and not pinned:
                memo.n_system = target - 30  # smaller than the system prompt: cut that instead
        if memo.n_system is not None:  # a short opening: cheap to render, pad directly
            found = await tokens.fit(by_system, target, guess=memo.n_system, max_calls=8)
            key = (found.n, 0, "")
            if found.value != target:

                async def system_pad(n: int, pad: str) -> int:
                    return await by_pad(n, 0, pad)

                n_sys, pad = await _padded(system_pad, found.n, target)
                key = (n_sys, 0, pad)
            memo.n_system = key[0]
        ids = renders.get(key) or await tok.render(conversation.opening(*key), "continue")
        return conversation.opening(*key), tokens.compact(ids), tok.exact

    async def _pad_opening(
        self,
        conversation: Conversation,
        tok: TargetTokenizer,
        n_system: int,
        found: tokens.Fit,
        target: int,
        measure: Callable[[int, int, str], Awaitable[int]],
    ) -> tuple[int, int, str]:
        """A cut a few tokens shorter plus a pad, found with encodes of the text's tail (a
        pad only changes the end), checked with one render; else the closest cut."""
        texts = {
            n: conversation.opening(n_system, n)[1]["content"]
            for n in range(max(0, found.n - 4), found.n + 1)
        }
        start = max(0, len(texts[min(texts)]) - 400)  # the cuts share everything before
        base = found.value - len(await tok.encode(texts[found.n][start:]))

        async def predicted(n: int, pad: str) -> int:
            return base + len(await tok.encode(texts[n][start:] + pad))

        n, pad = await _padded(predicted, found.n, target)
        if pad and await measure(n_system, n, pad) == target:
            return (n_system, n, pad)
        return (n_system, found.n, "")

    # --- a turn ----------------------------------------------------------------------------

    async def fit_turn(
        self,
        conversation: Conversation,
        turn: int,
        base: int | None,
        *,
        exact: bool,
        new_tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> PreparedTurn:
        """Size turn ``turn``'s content.

        ``base`` is what the server has already seen, in the units of the tokenizer in use
        (``exact``: the target's): the opening for turn 1, the previous prompt + completion
        later. None: measure it by rendering the history. The prompt aimed at is
        ``prompt_tokens`` when given (target tokens: a session's turn 1, opening + new),
        else ``base`` + ``new_tokens`` (default the scenario's ``turn_tokens``).
        """
        tok: TargetTokenizer = self.tokenizer if exact else self.estimate
        aim = (new_tokens, prompt_tokens)
        try:
            return await self._fit_turn(conversation, turn, base, tok, aim)
        except TokenizeError:
            self.fallbacks += 1
            return await self._fit_turn(conversation, turn, None, self.estimate, aim)

    async def replayed(self, messages: Sequence[Message], *, exact: bool = True) -> PreparedTurn:
        """A recorded turn (replay), sent as it is: only its ids are measured (by estimate
        when ``exact`` is False: quiet sizing)."""
        tok: TargetTokenizer = self.tokenizer if self.exact and exact else self.estimate
        try:
            ids = await tok.render(list(messages), "generate")
        except TokenizeError:
            self.fallbacks += 1
            tok = self.estimate
            ids = await tok.render(list(messages), "generate")
        return PreparedTurn(list(messages), _kept(ids, tok), tok.exact, len(ids), 0, len(ids))

    def turn_target(
        self,
        turn: int,
        base: int,
        tok: TargetTokenizer,
        session: int = 0,
        aim: tuple[int | None, int | None] = (None, None),
    ) -> int:
        """``aim`` = (new tokens, prompt tokens), in target tokens: the prompt when given,
        else what was seen + the new tokens. Default: turn 1 the configured prompt, later
        what was seen + ``turn_tokens``."""
        s = self.scenario
        new, prompt = aim
        if prompt is not None:
            return self._units(prompt, turn, tok, session)
        if new is None and turn == 1:
            return self._units(s.configured_prompt_tokens(1), 1, tok, session)
        new = nominal(s.turn_tokens) if new is None else new
        return base + self._units(new, turn, tok, session)

    async def _fit_turn(
        self,
        conversation: Conversation,
        turn: int,
        base: int | None,
        tok: TargetTokenizer,
        aim: tuple[int | None, int | None] = (None, None),
    ) -> PreparedTurn:
        memo = self.memo(conversation.session)
        kind = conversation.framing()
        if base is None:
            history = conversation.messages
            base = await tokens.count_rendered(tok, history, "continue") if history else 0
        target = self.turn_target(turn, base, tok, conversation.session, aim)
        renders: dict[tuple[int, str], Sequence[int]] = {}
        counts: dict[tuple[int, str], int] = {}

        async def full(n: int, pad: str = "") -> int:
            ids = await tok.render(conversation.with_turn(turn, n, pad), "generate")
            renders[(n, pad)] = ids
            return len(ids)

        async def content(n: int, pad: str = "") -> int:
            if (n, pad) not in counts:
                counts[(n, pad)] = len(await tok.encode(conversation.content(turn, n, pad)))
            return counts[(n, pad)]

        framing = memo.framing.get(kind, _FRAMING_GUESS[kind])
        guess, pad = memo.content.get(turn, (None, ""))
        key = (0, "")
        for _ in range(3):  # fit the content alone with small encodes; one full render checks
            await pace()
            want = max(0, target - base - framing)
            if guess is not None and await content(guess, pad) == want:
                n = guess  # what worked last repetition still does: one small call
            else:
                n = (
                    await tokens.fit(
                        content, want, guess=want if guess is None else guess, max_calls=5
                    )
                ).n
                pad = ""
                if counts[(n, "")] != want:
                    n, pad = await _padded(content, n, want)
            key = (n, pad)
            value = await full(n, pad)
            framing = value - base - counts[key]
            if value == target or (n == 0 and value > target):
                break
            guess = n
        else:  # a merge at the boundary the content-only count cannot see: search whole renders
            key = ((await tokens.fit(full, target, guess=key[0], max_calls=4)).n, "")
        memo.content[turn] = key
        memo.framing[kind] = framing
        return PreparedTurn(
            messages=conversation.with_turn(turn, *key),
            ids=_kept(renders[key], tok),
            exact=tok.exact,
            target=target,
            base=base,
            tokens=len(renders[key]),
        )

    # --- warm-up correction (quiet sizing) ------------------------------------------------

    async def teach(self, conversation: Conversation, turn: int, prepared: PreparedTurn) -> None:
        """Learn from an exactly sized warm-up turn what quiet sizing needs: the target's
        tokens this turn adds per estimated token (``session_scale``; ``scale`` holds the
        median over sessions). Call before the turn is committed to the history. The
        estimate's base is the history rendered as quiet sizing renders it (its own units:
        quiet turns measure the history with the estimate, never with the target)."""
        if not prepared.exact:
            return  # a fallback turn: nothing exact to learn from
        est = self.estimate
        added = prepared.tokens - (prepared.base if turn > 1 else 0)
        history = conversation.messages
        est_base = await est.count(history, "continue") if turn > 1 and history else 0
        est_added = await est.count(prepared.messages, "generate") - est_base
        if added <= 0 or est_added <= 0:
            return
        ratio = added / est_added
        self._pooled[0] += added
        self._pooled[1] += est_added
        self.session_scale[(conversation.session, turn)] = ratio
        ratios = self._taught.setdefault(turn, [])
        ratios.append(ratio)
        self.scale[turn] = statistics.median(ratios)

    # --- warm-up correction (estimate mode) ------------------------------------------------

    def learn(self, observations: Sequence[tuple[int, int, int, int]]) -> None:
        """Learn scales from ``(session, turn, actual added tokens, estimated added)``
        observations of a warm-up repetition; only used when sizing by estimate."""
        by_turn: dict[int, list[float]] = {}
        for session, turn, actual, estimated in observations:
            if actual > 0 and estimated > 0:
                self._pooled[0] += actual
                self._pooled[1] += estimated
                by_turn.setdefault(turn, []).append(actual / estimated)
                self.session_scale[(session, turn)] = actual / estimated
        for turn, ratios in by_turn.items():
            self.scale[turn] = statistics.median(ratios)


def _kept(ids: Sequence[int], tok: TargetTokenizer) -> array[int]:
    """What a PreparedTurn keeps of a prompt's ids: all of them, compact, when ``tok`` is
    the target's; none of an estimate's."""
    return tokens.compact(ids) if tok.exact else array("i")


async def _padded(
    count: Callable[[int, str], Awaitable[int]], n: int, want: int
) -> tuple[int, str]:
    """A cut at most four tokens shorter than ``n`` plus a pad, counting ``want`` exactly;
    else ``(n, "")``."""
    for cut in range(n, max(-1, n - 5), -1):
        for pad in _PADS:
            if await count(cut, pad) == want:
                return cut, pad
    return n, ""


MISS_WARN_FRACTION = 0.01  # a sizing miss worth a warning: over 1% of the configured prompt
LATE_NS = 100_000_000  # a turn sent this long after it was due: its pause ran long


def plural_turns(n: int) -> str:
    return "1 measured turn" if n == 1 else f"{n} measured turns"


def _miss(record: TurnRecord) -> int:
    return (record.prompt_tokens or 0) - (record.configured_prompt_tokens or 0)


def sizing_warnings(
    records: Sequence[TurnRecord],
    sizing: Sizing,
    scenario: Scenario,
    *,
    replayed: bool = False,  # a replay: its shareable prefixes are whole prompts
    block_tokens: int = 16,
    loop_lag_max_ms: float | None = None,
) -> list[str]:
    """What the result should say about how prompts were sized. ``block_tokens``: the
    server's KV block size (what its prefix cache holds whole; vLLM's default 16).
    ``loop_lag_max_ms``: the client's longest event-loop stall (ClientHealth), which can
    make a turn late as sizing can. Pure."""
    out: list[str] = []
    measured = [r for r in records if not r.warmup and r.prompt_tokens is not None]
    mismatched = [
        r
        for r in measured
        if r.tokenized_prompt_tokens is not None and r.tokenized_prompt_tokens != r.prompt_tokens
    ]
    if mismatched:
        r = mismatched[0]
        out.append(
            f"{plural_turns(len(mismatched))}: the target's /tokenize counted a different "
            f"prompt than its usage reports (first: {r.tokenized_prompt_tokens} vs "
            f"{r.prompt_tokens}); its /tokenize does not render chats as its chat endpoint "
            "does, so depths and shareable prefixes are not exact"
        )
    if not sizing.exact:
        first = [
            abs(r.prompt_tokens - r.configured_prompt_tokens) / r.configured_prompt_tokens
            for r in measured
            if r.turn == 1 and r.prompt_tokens is not None and r.configured_prompt_tokens
        ]
        worst = f"; first-turn prompts within {max(first):.1%} of configured" if first else ""
        if scenario.repetitions.warmup == 0:
            how = "with no warm-up to correct them from"
            if not first or max(first) > MISS_WARN_FRACTION:  # the advice only where it helps
                how += ": set repetitions.warmup = 1"
        else:
            how = "corrected from the warm-up's usage.prompt_tokens"
        out.append(
            f"prompts were sized with tiktoken estimates, {how}{worst}; shareable prefixes "
            "are estimates (the target has no /tokenize of a known shape, or tokenizer = "
            '"tiktoken")'
        )
        ratios = [v for cell in sizing.scale.values() for v in cell.values()]
        far = max((abs(v - 1) for v in ratios), default=0.0)
        if far > 0.1 and scenario.repetitions.warmup == 1:
            out.append(
                f"the target counts up to {far:.0%} more or fewer tokens than tiktoken: one "
                "warm-up corrects that to a few percent; repetitions.warmup = 2 refines it "
                "(the second warm-up is sized with the first one's correction)"
            )
    else:
        off = [
            r
            for r in _as_configured(records, measured, scenario)
            if r.prompt_tokens != r.configured_prompt_tokens
            and not _quietly_sized(r, scenario)  # said below, with their own accuracy
        ]
        # A miss of a token or two in twelve thousand is noise (a pad that tokenizes across
        # a boundary); warn only when it moves the depth by more than 1%.
        off = [
            r for r in off if abs(_miss(r)) > MISS_WARN_FRACTION * (r.configured_prompt_tokens or 0)
        ]
        if off:
            r = max(off, key=lambda r: abs(_miss(r)))
            configured = r.configured_prompt_tokens or 0
            out.append(
                f"{plural_turns(len(off))} missed their configured prompt by more than "
                f"{MISS_WARN_FRACTION:.0%} (worst: turn {r.turn}, {r.prompt_tokens:,} tokens "
                f"for {configured:,}: {_miss(r):+,}, {_miss(r) / configured:+.1%}): is "
                "turn_tokens smaller than the chat template's framing, or opening_tokens "
                "smaller than the system prompt and nonce?"
            )
        out += _window_sizing_warnings(records, measured, scenario)
    lags = [r.pacing_lag_ns for r in measured if r.pacing_lag_ns is not None]
    late = [lag for lag in lags if lag > LATE_NS]
    if late:
        why = "sizing them took longer than their think and tool time"
        if loop_lag_max_ms is not None and loop_lag_max_ms > LATE_NS / 1e6:
            why = (
                f"the client's event loop stalled for up to {loop_lag_max_ms:,.0f} ms (see "
                f"the client line), or {why}"
            )
        out.append(
            f"{len(late)} measured turns were sent more than 100 ms after they were due "
            f"(worst {max(late) / 1e9:.2f} s): {why}, so pauses ran long (pacing_lag_ns in "
            "records.jsonl)"
        )
    if sizing.fallbacks:
        out.append(
            f"{sizing.fallbacks} openings or turns were sized by estimate because a /tokenize "
            "call failed"
        )
    if not replayed:  # a replay's shareable − cached is what the target never saw, not a reply
        out += _resampled_reply_warning(measured, scenario, block_tokens)
    return out


def _as_configured(
    records: Sequence[TurnRecord], measured: Sequence[TurnRecord], scenario: Scenario
) -> list[TurnRecord]:
    """The measured records whose history is as configured, so a miss is their sizing's.

    A turn after an invalid one (failed, cut short) has a history of another length than
    configured: that is the earlier turn's story, not a sizing miss."""
    invalid = {(r.cell, r.repetition, r.session, r.turn) for r in records if not r.valid}
    # A sub-agent's configured prior counts from an approximate system size, and after a
    # compaction the plan's prior assumes one: neither is a sizing miss.
    compacted = {
        (r.cell, r.repetition, r.session): r.turn
        for r in reversed(records)
        if r.step_kind == "compaction"
    }
    return [
        r
        for r in measured
        if r.configured_prompt_tokens is not None
        and (r.turn == 1 or scenario.exact_output)
        and not any((r.cell, r.repetition, r.session, t) in invalid for t in range(1, r.turn))
        and r.parent_session is None
        and r.turn <= compacted.get((r.cell, r.repetition, r.session), r.turn)
    ]


def _quietly_sized(record: TurnRecord, scenario: Scenario) -> bool:
    """Whether an exact run sized this record by estimate inside the window (quiet sizing)
    rather than with the target's /tokenize. Turn 1 is sized before a repetition's first
    request: never quietly. (A turn whose /tokenize call failed reads the same: it was sized
    by estimate too.)"""
    return (
        scenario.pacing.mode != "lockstep"
        and scenario.sizing_during_window == "estimate"
        and record.turn > 1
        and record.tokenized_prompt_tokens is None
    )


def _window_sizing_warnings(
    records: Sequence[TurnRecord], measured: Sequence[TurnRecord], scenario: Scenario
) -> list[str]:
    """With an exact target tokenizer and pacing that lets streams overlap: how the turns
    sized inside the measured windows were sized (quiet sizing, or /tokenize calls that
    overlapped measured streams when the user asked for them)."""
    if scenario.pacing.mode == "lockstep" or scenario.turns == 1 or not measured:
        return []  # every turn sized with nothing in flight
    if scenario.sizing_during_window == "exact":
        return [
            f"turns after the first were sized with the target's /tokenize while other "
            f"sessions' measured streams were in flight (pacing {scenario.pacing.mode}, "
            'sizing_during_window = "exact"): those calls loaded the server under test '
            "inside the window"
        ]
    estimated = [r for r in measured if _quietly_sized(r, scenario)]
    # Quiet sizing is the default for these pacings, and the sizing line names its turns
    # (shareable prefixes ~): a warning only when it missed a depth by more than sizing's
    # own tolerance, which is when the figures are not at the configured depth.
    off = [
        r
        for r in _as_configured(records, estimated, scenario)
        if r.prompt_tokens is not None
        and abs(_miss(r)) > MISS_WARN_FRACTION * (r.configured_prompt_tokens or 0)
    ]
    if not off:
        return []
    if scenario.repetitions.warmup == 0:
        how = (
            "uncorrected: no warm-up taught them the target's tokens per estimated token "
            "(set repetitions.warmup = 1)"
        )
    else:
        how = "corrected by what the warm-up's exact sizing taught"
    r = max(off, key=lambda r: abs(_miss(r)) / (r.configured_prompt_tokens or 1))
    configured = r.configured_prompt_tokens or 0
    return [
        f"{len(off)} of {plural_turns(len(estimated))} sized by tiktoken estimate (so that "
        f"no /tokenize call overlapped measured streams: pacing {scenario.pacing.mode}, "
        f'sizing_during_window = "estimate") missed their configured prompt by more than '
        f"{MISS_WARN_FRACTION:.0%} (worst: turn {r.turn}, {r.prompt_tokens:,} tokens for "
        f"{configured:,}: {_miss(r) / configured:+.1%}); the estimates were {how}; "
        'sizing_during_window = "exact" sizes them exactly, at the cost of /tokenize calls '
        "to the server during the window"
    ]


# A reply re-tokenized differently goes uncached for at most itself (plus the partial block
# the gap is measured from): a median gap past this many replies and a block is not a reply's
# but the prefix's, dropped between turns. 2, not 1: reasoning and drawn reply lengths put a
# reply's own gap around one reply, never twice it.
EVICTED_REPLIES = 2


def _resampled_reply_warning(
    measured: Sequence[TurnRecord], scenario: Scenario, block_tokens: int
) -> list[str]:
    """A sampled reply is cached as the token ids the server sampled; the next prompt holds
    the reply as text, which the server tokenizes again, and the two agree only up to the
    first token the sampler chose off the tokenizer's own split. Exact shareable prefixes
    count the re-tokenized reply, so when most of each reply goes uncached, say why.
    Seen on llama.cpp with an 8B model at temperature 0.7: 2-6 of 500 reply tokens reused.

    A prefix cache holds whole blocks, and the server never computed KV for a reply's last
    token: of a shareable prefix of s tokens it can hold ``block * ((s - 1) // block)``. The
    gap is measured from that, so with short replies the partial last block (up to a block
    per turn: 16-token replies on 16-token blocks) does not read as a reply gone uncached.

    A gap far larger than a reply (:data:`EVICTED_REPLIES`) is no reply's: the server kept
    less than the earlier turns' prefix (evicted it, or caches none), at any temperature.
    It read "low by about one reply" at 9,872 tokens against 128-token replies (issue 35)."""
    block = max(1, block_tokens)
    later = [
        r
        for r in measured
        if r.valid
        and r.turn > 1
        and r.shareable_exact
        and r.shareable_tokens is not None
        and r.cached_tokens is not None
    ]
    gaps = [
        block * (max(0, (r.shareable_tokens or 0) - 1) // block) - (r.cached_tokens or 0)
        for r in later
    ]
    if not gaps:
        return []
    gap, reply = statistics.median(gaps), nominal(scenario.output_tokens)
    if gap > EVICTED_REPLIES * reply + block:
        cold = sum(1 for r in later if not r.cached_tokens)
        none = f"; {cold} of {len(later)} later turns got no cached tokens" if cold else ""
        return [
            f"cache effectiveness reads low by far more than a reply per turn (median "
            f"cacheable − cached = {gap:,.0f} tokens, the shareable prefix in whole "
            f"{block}-token blocks; replies are {reply}{none}): the server did not keep the "
            "earlier turns' prefixes between turns: it evicted them (a KV cache too small "
            "for the sessions' contexts: see the KV usage and the what-if table), or it "
            "caches no prefixes. A reply re-tokenized differently costs about one reply at most"
        ]
    if scenario.sampling.temperature == 0 or gap < reply / 2:
        return []
    return [
        f"cache effectiveness reads low by about one reply per turn (median cacheable − "
        f"cached = {gap:,.0f} tokens, the shareable prefix in whole "
        f"{block}-token blocks; replies are {reply}): the server "
        "caches a sampled reply as the ids it sampled, and the next prompt's copy of that "
        "text tokenizes differently after the first few tokens (or, from a reasoning model, "
        "the reply it cached began with reasoning the next prompt does not carry). Greedy "
        "sampling (sampling.temperature = 0) shows the cache's own behaviour"
    ]
