"""SLO: the latency limits a request must stay within to count as served well, and the
percentile at which the run-level checks judge them. Pure values and parsing.

Limits carry their unit in their name (``ttft_s``, ``tpot_ms``, ``itl_ms``, ``e2e_s``), so a
value is always a bare number. Each step kind may have its own limits: a human waiting for
the first reply to a request tolerates less than an agent waiting on a tool step. A kind's
table overrides the top-level limits key by key; the others it inherits.

In a scenario::

    [slo]
    ttft_s = 2
    itl_ms = 50
    [slo.tool]
    ttft_s = 5

On the command line (the same thing): ``--slo ttft_s=2,itl_ms=50,tool.ttft_s=5``; see
:func:`parse_slo`. What each figure is, per request (docs/architecture.md, "SLO"):

* ``ttft_s`` — TTFT: request written → first content chunk, seconds;
* ``tpot_ms`` — TPOT: (last content chunk − first) / (completion tokens − 1), milliseconds;
  the inverse of the post-first rate (a one-token reply has none and meets it);
* ``itl_ms`` — the request's p90 chunk gap (:data:`ITL_REQUEST_PERCENTILE`), milliseconds: a
  stream whose gaps are mostly fine but one in ten stalls does not meet it;
* ``e2e_s`` — E2E latency: request written → end of stream, seconds.
"""

from __future__ import annotations

import difflib
import math
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from workloads.model.base import Frozen
from workloads.model.errors import OptionsError
from workloads.model.records import StepKind

__all__ = [
    "ITL_REQUEST_PERCENTILE",
    "LIMIT_KEYS",
    "STEP_KINDS",
    "Limit",
    "Limits",
    "Slo",
    "parse_slo",
]

Limit = Literal["ttft_s", "tpot_ms", "itl_ms", "e2e_s"]
LIMIT_KEYS: tuple[Limit, ...] = ("ttft_s", "tpot_ms", "itl_ms", "e2e_s")
STEP_KINDS: tuple[StepKind, ...] = ("human", "tool", "subagent", "compaction")
# A request's ITL figure is this percentile of its own chunk gaps: the median hides a stream
# that stalls every tenth token, and the maximum is one hiccup of any network.
ITL_REQUEST_PERCENTILE = 90.0

_UNITS = {
    "ttft_s": "seconds",
    "tpot_ms": "milliseconds",
    "itl_ms": "milliseconds",
    "e2e_s": "seconds",
}
# Limits above a day are typos (a value in the wrong unit), not SLOs.
_MAX = {"ttft_s": 86_400.0, "tpot_ms": 86_400_000.0, "itl_ms": 86_400_000.0, "e2e_s": 86_400.0}


class Limits(Frozen):
    """Latency limits one request must stay within; None: no limit on that figure."""

    ttft_s: float | None = Field(default=None, gt=0.0, le=_MAX["ttft_s"])
    tpot_ms: float | None = Field(default=None, gt=0.0, le=_MAX["tpot_ms"])
    itl_ms: float | None = Field(default=None, gt=0.0, le=_MAX["itl_ms"])
    e2e_s: float | None = Field(default=None, gt=0.0, le=_MAX["e2e_s"])

    def items(self) -> list[tuple[Limit, float]]:
        """The limits that are set, in :data:`LIMIT_KEYS` order."""
        return [(key, value) for key in LIMIT_KEYS if (value := getattr(self, key)) is not None]


class Slo(Limits):
    """The SLO of a run: limits for every request (the top-level keys), per step kind
    overrides (``human``, ``tool``, ``subagent``, ``compaction``; each inherits the keys it
    does not set), and ``percentile``, at which the run-level checks judge each limit ("p90
    TTFT ≤ 2 s holds with 95% confidence").

        slo = parse_slo("ttft_s=2,itl_ms=50,tool.ttft_s=5")
        slo.limits_for("tool").ttft_s  # 5.0
        slo.limits_for("human").itl_ms  # 50.0
    """

    percentile: float = Field(default=90.0, gt=0.0, lt=100.0)
    human: Limits | None = None
    tool: Limits | None = None
    subagent: Limits | None = None
    compaction: Limits | None = None

    @model_validator(mode="after")
    def _some_limit(self) -> Slo:
        if not self.items() and not any(
            (kind := getattr(self, k)) is not None and kind.items() for k in STEP_KINDS
        ):
            raise ValueError(
                f"an SLO needs at least one limit: {', '.join(LIMIT_KEYS)} (or per step "
                "kind, e.g. tool.ttft_s)"
            )
        return self

    def limits_for(self, kind: StepKind | None) -> Limits:
        """The limits a request of step kind ``kind`` must meet (None: a request without a
        step kind, as in fixed-shape runs: the top-level limits)."""
        own = getattr(self, kind) if kind is not None else None
        if own is None:
            return Limits(**dict(self.items()))
        return Limits(**{**dict(self.items()), **dict(own.items())})

    def kinds(self) -> list[StepKind]:
        """The step kinds with limits of their own, in :data:`STEP_KINDS` order."""
        return [k for k in STEP_KINDS if getattr(self, k) is not None]

    def describe(self) -> str:
        """One line: "TTFT ≤ 2 s, ITL ≤ 50 ms; tool steps: TTFT ≤ 5 s"."""
        parts = [_describe(self)] if self.items() else []
        for kind in self.kinds():
            parts.append(f"{kind} steps: {_describe(self.limits_for(kind))}")
        return "; ".join(parts)

    def spec(self) -> str:
        """The ``--slo`` text that gives this SLO back (parse_slo(slo.spec()) == slo)."""
        items = [f"{k}={v:g}" for k, v in self.items()]
        for kind in self.kinds():
            own = getattr(self, kind)
            items += [f"{kind}.{k}={v:g}" for k, v in own.items()]
        if self.percentile != 90.0:
            items.append(f"percentile={self.percentile:g}")
        return ",".join(items)


_NAMES = {"ttft_s": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_s": "E2E"}


def _describe(limits: Limits) -> str:
    return ", ".join(
        f"{_NAMES[k]} ≤ {v:g} {'s' if k.endswith('_s') else 'ms'}" for k, v in limits.items()
    )


def _key_error(item: str, key: str) -> OptionsError:
    known = [*LIMIT_KEYS, "percentile"]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    return OptionsError(
        f"slo {item!r}: unknown key {key!r}; {hint}keys (the unit is in the name): "
        f"{', '.join(LIMIT_KEYS)}, percentile; per step kind: KIND.KEY with KIND one of "
        f"{', '.join(STEP_KINDS)}",
        option="slo",
    )


def _number(item: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        unit = _UNITS.get(key.rpartition(".")[2], "a percent")
        raise OptionsError(
            f"slo {item!r}: {text!r} is not a number ({key} is in {unit}: write the bare number)",
            option="slo",
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise OptionsError(f"slo {item!r}: {key} must be a number greater than 0", option="slo")
    return value


def parse_slo(text: str) -> Slo:
    """An :class:`Slo` from ``--slo`` text: comma-separated ``KEY=NUMBER`` items, KEY one of
    ``ttft_s``, ``tpot_ms``, ``itl_ms``, ``e2e_s``, ``percentile``, or ``KIND.KEY`` for one
    step kind. Raises :class:`OptionsError` (``option="slo"``) with one line naming the item.

        parse_slo("ttft_s=2,itl_ms=50,tool.ttft_s=5,percentile=99")
    """
    top: dict[str, float] = {}
    kinds: dict[str, dict[str, float]] = {}
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise OptionsError(
            "slo: empty; give KEY=NUMBER items, e.g. ttft_s=2,itl_ms=50", option="slo"
        )
    for item in items:
        if not item:
            raise OptionsError(
                f"slo {text!r}: an empty item (two commas, or a trailing one)", option="slo"
            )
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise OptionsError(
                f"slo {item!r}: missing value; write {key or 'KEY'}=NUMBER", option="slo"
            )
        kind, dot, name = key.rpartition(".")
        if dot and kind not in STEP_KINDS:
            raise OptionsError(
                f"slo {item!r}: unknown step kind {kind!r}; kinds: {', '.join(STEP_KINDS)}",
                option="slo",
            )
        if name not in LIMIT_KEYS and not (name == "percentile" and not dot):
            raise _key_error(item, name if dot else key)
        into = kinds.setdefault(kind, {}) if dot else top
        if name in into:
            raise OptionsError(f"slo {item!r}: {key} is given twice", option="slo")
        number = _number(item, key, value)
        if name == "percentile" and not number < 100:
            raise OptionsError(f"slo {item!r}: percentile must be below 100", option="slo")
        if name in _MAX and number > _MAX[name]:
            raise OptionsError(
                f"slo {item!r}: {key} over a day: is the unit right? ({name} is in {_UNITS[name]})",
                option="slo",
            )
        into[name] = number
    try:
        return Slo(**top, **{k: Limits(**v) for k, v in kinds.items()})
    except ValidationError as err:  # only what the checks above cannot see
        raise OptionsError(f"slo {text!r}: {err.errors()[0]['msg']}", option="slo") from err
