"""The saved outcome of the correctness gate (:mod:`workloads.core.gate` has the cases and
the judging): each case's output before and after the measured windows, pass or fail, and why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workloads.model.base import Frozen

__all__ = ["GateMode", "GateOutput", "GateResult"]

GateMode = Literal["off", "report", "required"]


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
    """The gate of one run. A case passes when it passed in every phase it was sent in."""

    mode: GateMode
    outputs: list[GateOutput] = Field(default_factory=list)

    @property
    def cases(self) -> list[str]:
        """Case names, in the order sent."""
        return list(dict.fromkeys(o.case for o in self.outputs))

    @property
    def passed_cases(self) -> list[str]:
        """Cases that passed in every phase."""
        return [c for c in self.cases if all(o.passed for o in self.outputs if o.case == c)]

    @property
    def failed_cases(self) -> list[str]:
        """Cases that failed in some phase."""
        passed = set(self.passed_cases)
        return [c for c in self.cases if c not in passed]

    @property
    def passed(self) -> bool:
        """Every case passed in every phase (and there was at least one)."""
        return bool(self.outputs) and not self.failed_cases
