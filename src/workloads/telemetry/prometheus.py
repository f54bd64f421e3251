"""Prometheus ``/metrics`` text → a :class:`Snapshot` of samples, on prometheus_client's parser.

We never match metric lines with regexes of our own: prometheus_client's parser handles
escaping, ``+Inf``/``NaN``, llama.cpp's ``1.23457e+06`` and OpenMetrics. A snapshot is a
value: sample name → [(labels, value)], looked up by the *exported* name, summed over the
labels we do not filter on (``engine``, ``tp_rank``, ...), as the reference prescribes.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["LabelFilter", "Snapshot", "parse_metrics"]

# label → allowed values; a sample is kept when every named label has one of them.
LabelFilter = Mapping[str, frozenset[str]]

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Snapshot:
    """All samples of one scrape. ``unix`` and ``perf_ns`` say when it was taken."""

    samples: Mapping[str, tuple[tuple[Labels, float], ...]]
    types: Mapping[str, str] = field(default_factory=dict)  # sample name → family type
    unix: float = 0.0
    perf_ns: int = 0

    def has(self, name: str) -> bool:
        return name in self.samples

    def value(self, name: str, where: LabelFilter | None = None) -> float | None:
        """Σ of the samples called ``name`` that pass ``where``; None when ``name`` is absent.

        A name that is present but has no sample passing the filter sums to 0: the family is
        exported, it just never counted that label value (vLLM's ``finished_reason="error"``).
        NaN samples make the figure unknown (None).
        """
        rows = self.samples.get(name)
        if rows is None:
            return None
        total = 0.0
        for labels, value in rows:
            if where and not _passes(labels, where):
                continue
            if math.isnan(value):
                return None
            total += value
        return total

    def rows(self, name: str, where: LabelFilter | None = None) -> dict[Labels, float] | None:
        """The samples called ``name`` that pass ``where``, per label set; None if absent."""
        rows = self.samples.get(name)
        if rows is None:
            return None
        return {labels: v for labels, v in rows if not where or _passes(labels, where)}

    def by_label(self, name: str, label: str) -> dict[str, float] | None:
        """Σ of ``name`` per value of ``label`` (e.g. per ``finished_reason``)."""
        rows = self.samples.get(name)
        if rows is None:
            return None
        out: dict[str, float] = defaultdict(float)
        for labels, value in rows:
            key = dict(labels).get(label)
            if key is not None and not math.isnan(value):
                out[key] += value
        return dict(out)

    def names(self) -> Iterable[str]:
        return self.samples.keys()


def _passes(labels: Labels, where: LabelFilter) -> bool:
    have = dict(labels)
    return all(have.get(k) in allowed for k, allowed in where.items())


def parse_metrics(
    text: str,
    *,
    openmetrics: bool = False,
    only: frozenset[str] | None = None,
    unix: float | None = None,
    perf_ns: int | None = None,
) -> Snapshot:
    """Parse exposition text. ``only`` keeps just these sample names (the periodic gauge
    samples need three names out of vLLM's ~100 KB of histograms). Raises ValueError on text
    that is not Prometheus exposition format."""
    # Imported here, at the first /metrics read: a run whose target serves none (and every
    # process that only imports the library) does not pay for prometheus_client's imports.
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families

    if only is not None:
        text = _keep_families(text, only)
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    samples: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
    types: dict[str, str] = {}
    try:
        for family in parse(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                samples[sample.name].append((labels, float(sample.value)))
                types[sample.name] = family.type
    except (KeyError, IndexError) as err:
        # prometheus_client's OpenMetrics parser fails so on some malformed lines (a
        # histogram without its count, a line that starts with a space): found by fuzzing.
        raise ValueError(f"malformed exposition text ({type(err).__name__}: {err})") from err
    # The text parser renames a counter sample without "_total" (TGI's tgi_request_count) to
    # "<name>_total". Index it under its exported name as well, so tables can use the names
    # servers actually print.
    for name in list(samples):
        base = name[: -len("_total")] if name.endswith("_total") else None
        if base and types.get(name) == "counter" and base not in samples:
            samples[base] = samples[name]
            types[base] = "counter"
    return Snapshot(
        samples={k: tuple(v) for k, v in samples.items()},
        types=types,
        unix=time.time() if unix is None else unix,
        perf_ns=time.perf_counter_ns() if perf_ns is None else perf_ns,
    )


def _keep_families(text: str, only: frozenset[str]) -> str:
    """Drop lines of families not in ``only`` before parsing. Not a parser: it only looks at
    the first token of each line (the metric name, or the name after ``# HELP``/``# TYPE``),
    and prometheus_client still parses every line we keep."""
    wanted = set(only)
    for name in only:  # a counter's TYPE line names the family without "_total"
        if name.endswith("_total"):
            wanted.add(name[: -len("_total")])
    kept: list[str] = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("#"):
            if stripped == "# EOF":  # OpenMetrics' required last line
                kept.append(line)
                continue
            parts = stripped.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in wanted:
                kept.append(line)
            continue
        end = len(stripped)
        for stop in ("{", " ", "\t"):
            at = stripped.find(stop)
            if at != -1:
                end = min(end, at)
        if stripped[:end] in wanted:
            kept.append(line)
    return "\n".join(kept) + "\n"
