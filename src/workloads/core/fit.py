"""The engine's step time fitted from what a client sees (``workloads fit``). Pure: stamps
and token counts in, estimates with their intervals out; runner/fit.py sends the probes.

The model is the simulated engine's (servers/simulated/profiles.py)::

    step time = step_fixed_s + decode_s_per_seq * streams decoding
                + attend_s_per_token * context tokens they attend
    TTFT of a lone cold prompt = overhead + step_fixed_s + prefill_s_per_token * uncached

A streamed reply's chunk gap is one engine step, so the mean gap of a stream while the same
streams decode (:func:`decode_points`) is a step time at that batch and context; least
squares over such points gives the step's three coefficients, and over lone cold prompts'
TTFTs the prefill cost per token (the intercept is the fixed step plus the HTTP round trip,
split by the decode fit). Every coefficient comes with its 95% interval (Student's t on the
residuals) and the probe requests it was fitted from.

    fitted = fit_engine(prefill_points, decode_points)
    fitted["prefill_s_per_token"].value, fitted["prefill_s_per_token"].interval
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from workloads.core.stats import t_quantile

__all__ = [
    "DecodePoint",
    "Estimate",
    "PrefillPoint",
    "StreamStamps",
    "decode_points",
    "first_wave",
    "fit_engine",
    "least_squares",
]

CONFIDENCE = 0.95  # every interval the fit writes
# A stream's gaps at one batch size make a point only from this many: a mean of fewer is
# one step's jitter (a late wake-up of the server's or the client's loop).
MIN_GAPS = 4


@dataclass(frozen=True, slots=True)
class Estimate:
    """One fitted number: its value, its 95% interval (None where one side is not bounded),
    the probe requests it was measured from (their indices in the fit's records) and how."""

    value: float
    low: float | None
    high: float | None
    requests: tuple[int, ...]
    how: str

    def contains(self, truth: float) -> bool:
        """Whether ``truth`` lies in the interval (an open side holds anything)."""
        return (self.low is None or self.low <= truth) and (self.high is None or truth <= self.high)


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """A cold prompt sent alone: its uncached tokens and its TTFT."""

    request: int
    uncached_tokens: int
    ttft_s: float


@dataclass(frozen=True, slots=True)
class DecodePoint:
    """One stream's mean chunk gap while ``streams`` streams decoded together, attending
    ``context`` tokens between them (the mean over those gaps)."""

    request: int
    streams: int
    context: float
    step_s: float


@dataclass(frozen=True, slots=True)
class StreamStamps:
    """What :func:`decode_points` needs of one streamed reply: its prompt tokens, each
    content chunk's arrival (ns) and the tokens a chunk carried on average."""

    request: int
    prompt_tokens: int
    content_ns: Sequence[int]
    tokens_per_chunk: float = 1.0


def least_squares(
    rows: Sequence[Sequence[float]], ys: Sequence[float]
) -> tuple[list[float], list[float | None]]:
    """Ordinary least squares: coefficients and their half-widths at 95% (None where the
    residuals leave no degree of freedom). Columns are scaled before solving the normal
    equations, since a batch size (~8) and a context (~10⁴ tokens) share a row."""
    n, k = len(rows), len(rows[0])
    if n < k:
        raise ValueError(f"{n} points cannot fit {k} coefficients")
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    x = [[r[j] / scale[j] for j in range(k)] for r in rows]
    xtx = [[sum(r[a] * r[b] for r in x) for b in range(k)] for a in range(k)]
    xty = [sum(r[a] * y for r, y in zip(x, ys, strict=True)) for a in range(k)]
    inverse = _inverse(xtx)
    beta = [sum(inverse[a][b] * xty[b] for b in range(k)) for a in range(k)]
    dof = n - k
    halves: list[float | None] = [None] * k
    if dof > 0:
        rss = sum(
            (y - sum(b * v for b, v in zip(beta, r, strict=True))) ** 2
            for r, y in zip(x, ys, strict=True)
        )
        t = t_quantile(1 - (1 - CONFIDENCE) / 2, dof)
        halves = [t * math.sqrt(max(0.0, rss / dof * inverse[j][j])) / scale[j] for j in range(k)]
    return [b / s for b, s in zip(beta, scale, strict=True)], halves


def _inverse(m: list[list[float]]) -> list[list[float]]:
    """Gauss–Jordan with partial pivoting; ValueError when the columns are collinear."""
    k = len(m)
    a = [[*row, *(1.0 if i == j else 0.0 for j in range(k))] for i, row in enumerate(m)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            raise ValueError("the probe's points cannot tell these coefficients apart")
        a[col], a[pivot] = a[pivot], a[col]
        lead = a[col][col]
        a[col] = [v / lead for v in a[col]]
        for r in range(k):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col], strict=True)]
    return [row[k:] for row in a]


def decode_points(streams: Sequence[StreamStamps]) -> list[DecodePoint]:
    """Per stream and batch size, the mean chunk gap: a gap counts the streams decoding at
    its midpoint (between their first and last content chunk; a queued or prefilling one is
    not decoding) and the context they hold then (prompt + chunks so far × tokens a chunk).
    A stream's gaps at a batch size make a point only from MIN_GAPS on."""
    spans = [(s.content_ns[0], s.content_ns[-1]) for s in streams if len(s.content_ns) > 1]
    live = [s for s in streams if len(s.content_ns) > 1]
    points: list[DecodePoint] = []
    for s in live:
        groups: dict[int, list[tuple[float, float]]] = {}
        for a, b in zip(s.content_ns, s.content_ns[1:], strict=False):
            mid = (a + b) / 2
            together = [
                o for o, (first, last) in zip(live, spans, strict=True) if first <= mid <= last
            ]
            context = sum(
                o.prompt_tokens + o.tokens_per_chunk * sum(1 for t in o.content_ns if t <= mid)
                for o in together
            )
            groups.setdefault(len(together), []).append(((b - a) / 1e9, context))
        for n, gaps in sorted(groups.items()):
            if len(gaps) >= MIN_GAPS:
                points.append(
                    DecodePoint(
                        request=s.request,
                        streams=n,
                        context=statistics.fmean(c for _, c in gaps),
                        step_s=statistics.fmean(g for g, _ in gaps),
                    )
                )
    return points


def first_wave(spans: Sequence[tuple[int, int]]) -> int:
    """How many of streams sent together decoded together at first: those whose first
    content chunk came before any stream had ended (the others waited for a place in the
    running batch). ``spans`` are (first, last) content-chunk arrivals."""
    if not spans:
        return 0
    end = min(last for _, last in spans)
    return sum(1 for first, _ in spans if first <= end)


def _estimate(value: float, half: float | None, requests: Sequence[int], how: str) -> Estimate:
    if value < 0 and (half is None or value + half < 0):
        # below 0 with its whole interval: the points do not follow the model (a server
        # starved of CPU while probed, a step cost the model has not got); said, not hidden
        how += f"; fitted {value:.3g}, below 0 with its whole interval: the model does not fit"
    if half is None:
        return Estimate(max(0.0, value), None, None, tuple(sorted(set(requests))), how)
    # The engine's costs are not negative: an interval reaching below 0 is cut there.
    return Estimate(
        max(0.0, value),
        max(0.0, value - half),
        max(0.0, value + half),
        tuple(sorted(set(requests))),
        how,
    )


def fit_engine(
    prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint]
) -> dict[str, Estimate]:
    """The step-time coefficients (step_fixed_s, decode_s_per_seq, attend_s_per_token), the
    prefill cost (prefill_s_per_token) and the round trip a TTFT adds (overhead_s), each an
    :class:`Estimate`; a group of points too small to fit is left out (not measured)."""
    out: dict[str, Estimate] = {}
    fixed = 0.0
    if len(decode) >= 4 and len({p.streams for p in decode}) >= 2:
        rows = [[1.0, float(p.streams), p.context] for p in decode]
        beta, halves = least_squares(rows, [p.step_s for p in decode])
        used = [p.request for p in decode]
        how = (
            f"mean chunk gap = fixed + per sequence × streams + per token × context, least "
            f"squares over {len(decode)} (stream, batch size) points, batches "
            f"{min(p.streams for p in decode)}-{max(p.streams for p in decode)}, contexts "
            f"{min(p.context for p in decode):,.0f}-{max(p.context for p in decode):,.0f} tokens"
        )
        names = ("step_fixed_s", "decode_s_per_seq", "attend_s_per_token")
        for name, b, h in zip(names, beta, halves, strict=True):
            out[name] = _estimate(b, h, used, how)
        fixed = out["step_fixed_s"].value
    if len(prefill) >= 3 and len({p.uncached_tokens for p in prefill}) >= 2:
        rows = [[1.0, float(p.uncached_tokens)] for p in prefill]
        (a, b), (ha, hb) = least_squares(rows, [p.ttft_s for p in prefill])
        used = [p.request for p in prefill]
        how = (
            f"TTFT of a lone cold prompt = round trip + fixed step + per token × uncached "
            f"tokens, least squares over {len(prefill)} prompts of "
            f"{min(p.uncached_tokens for p in prefill):,}-"
            f"{max(p.uncached_tokens for p in prefill):,} tokens"
        )
        out["prefill_s_per_token"] = _estimate(b, hb, used, how)
        out["overhead_s"] = _estimate(a - fixed, ha, used, how + ", less the fixed step")
    return out
