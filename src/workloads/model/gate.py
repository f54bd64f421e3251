"""The saved outcome of the correctness gate (:mod:`workloads.core.gate` has the cases and
the judging): each case's output before and after the measured windows, pass or fail, and why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workloads.model.base import Frozen

__all__ = ["ECHOED", "TEXT_PREFIX", "GateForm", "GateMode", "GateOutput", "GateResult"]

GateMode = Literal["off", "report", "required"]
# "chat": the six chat cases; "text": their text form, sent to /v1/completions, for a base
# model that echoes chat requests (workloads.core.gate says why).
GateForm = Literal["chat", "text"]
# The names of the text-form cases start with this ("text:recall").
TEXT_PREFIX = "text:"
# What a chat case's ``why`` says when the model answered with its own request (a base model),
# judged or cut short by the deadline: GateResult.echoed counts these.
ECHOED = "echoed the request"


class GateOutput(Frozen):
    """One gate case sent once (greedy): what came back and the judgement."""

    case: str
    phase: Literal["before", "after"]  # the measured windows
    passed: bool
    why: str  # what was expected and what came, or the request's error
    output: str = ""  # the completion text, verbatim
    error_kind: str | None = None  # the request failed: nothing to judge
    finish_reason: str | None = None
    completion_tokens: int | None = None


class GateResult(Frozen):
    """The gate of one run. A case passes when it passed in every phase it was sent in.

    When the chat cases were echoed (a base model) and the text form was sent, the verdict is
    the text form's; the chat outputs stay in ``outputs``, as sent."""

    mode: GateMode
    outputs: list[GateOutput] = Field(default_factory=list)

    @property
    def form(self) -> GateForm:
        """ "text" when the text form was sent (the model echoed the chat cases), else
        "chat"."""
        return "text" if any(o.case.startswith(TEXT_PREFIX) for o in self.outputs) else "chat"

    @property
    def judged(self) -> list[GateOutput]:
        """The outputs the verdict is made of: those of :attr:`form`."""
        text = self.form == "text"
        return [o for o in self.outputs if o.case.startswith(TEXT_PREFIX) == text]

    @property
    def echoed(self) -> int:
        """Chat cases answered with their own request in the first phase, cut short or not
        (what made the gate send the text form)."""
        return sum(
            1
            for o in self.outputs
            if o.phase == "before" and not o.case.startswith(TEXT_PREFIX) and ECHOED in o.why
        )

    @property
    def cases(self) -> list[str]:
        """Case names of :attr:`form`, in the order sent."""
        return list(dict.fromkeys(o.case for o in self.judged))

    @property
    def passed_cases(self) -> list[str]:
        """Cases that passed in every phase."""
        return [c for c in self.cases if all(o.passed for o in self.judged if o.case == c)]

    @property
    def failed_cases(self) -> list[str]:
        """Cases that failed in some phase."""
        passed = set(self.passed_cases)
        return [c for c in self.cases if c not in passed]

    @property
    def passed(self) -> bool:
        """Every case passed in every phase (and there was at least one)."""
        return bool(self.judged) and not self.failed_cases
