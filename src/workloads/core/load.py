"""A saved run read back the way ``show`` reads it: the files as
:func:`workloads.model.results.read_result` reads them, with every summary computed from the
records (:func:`workloads.core.aggregate.summarized`). A file's summaries are a cache; the
records are what was measured, so a run killed before it wrote result.json, rebuilt from
records.jsonl, carries the same figures as one that finished."""

from __future__ import annotations

from pathlib import Path

from workloads.core.aggregate import summarized
from workloads.model.results import RunResult, read_result

__all__ = ["load_result"]


def load_result(path: str | Path) -> RunResult:
    """Load a saved run from its directory (or its ``result.json``), with its records and
    every summary computed from them, as ``show`` prints it.

        result = workloads.load_result("runs/today")
        print(result.summary.run.aggregate_rate, len(result.records))

    A run killed before it wrote result.json is rebuilt from records.jsonl: ``complete`` is
    False and a warning in ``warnings`` says so. Without records.jsonl the saved summaries
    are kept. Files of every older format load; a newer format's fields this version does
    not know are dropped with one :class:`~workloads.ResultFormatWarning` naming them. Raises
    :class:`~workloads.ResultFormatError` when the files cannot be read or come from a
    newer major format (upgrade workloads).
    """
    return summarized(read_result(path, stacklevel=2))  # warnings name the caller's line
