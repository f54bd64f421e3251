"""The saved likelihood probe: the mean negative log-likelihood the target's model gives a
fixed text (:mod:`workloads.core.likelihood`), as seed 000's teacher-forced check did."""

from __future__ import annotations

import math

from workloads.model.base import Frozen

__all__ = ["Likelihood"]


class Likelihood(Frozen):
    """Mean NLL of the fixed text over its scored tokens, or why it was not measured."""

    supported: bool
    reason: str | None = None  # why not, when not supported ("not supported by this server")
    source: str | None = None  # "echo+logprobs" or "prompt_logprobs"
    tokens: int | None = None  # tokens scored (the first has no logprob)
    mean_nll: float | None = None  # nats per token

    @property
    def perplexity(self) -> float | None:
        """exp(mean NLL)."""
        return None if self.mean_nll is None else math.exp(self.mean_nll)
