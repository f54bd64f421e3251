"""The simulated model's greedy answers to short checkable tasks: a scripted "correct model".

A greedy request (temperature 0, no forced length) whose last user message is one of a few
task forms gets the right answer, computed by rule from the message itself: arithmetic on two
integers, repeat-after-me, echo a JSON object, continue a list of weekdays, months or an
arithmetic progression, complete a Python function stub, recall "the X is Y" stated earlier
in the context. Everything else gets an agent-like reply (:mod:`.replies`).

This exists so the correctness gate (:mod:`workloads.core.gate`) is tested end to end: the
simulator passes it unless ``faults.rate_corrupt`` corrupts its output. It proves nothing
about any real model; what a real server answers is judged by the same rules.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["answer"]

_WEEK = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_OPS: dict[str, Callable[[int, int], int]] = {
    "*": operator.mul,
    "×": operator.mul,
    "x": operator.mul,
    "+": operator.add,
    "-": operator.sub,
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _arithmetic(task: str) -> str | None:
    found = re.search(r"What is (-?\d+) ?([*×x+-]) ?(-?\d+)\?", task)
    if not found:
        return None
    a, op, b = found.groups()
    return str(_OPS[op](int(a), int(b)))


def _continue(items: list[str]) -> list[str] | None:
    for cycle in (_WEEK, _MONTHS):
        if items and all(i in cycle for i in items):
            start = cycle.index(items[-1])
            return [cycle[(start + k) % len(cycle)] for k in (1, 2, 3)]
    if len(items) >= 2 and all(re.fullmatch(r"-?\d+", i) for i in items):
        values = [int(i) for i in items]
        step = values[1] - values[0]
        if all(b - a == step for a, b in itertools.pairwise(values)):
            return [str(values[-1] + step * k) for k in (1, 2, 3)]
    return None


def _list(task: str) -> str | None:
    found = re.search(r"Continue the list[^:]*:\s*(.+)$", task, re.S)
    if not found:
        return None
    items = [i.strip() for i in found.group(1).split(",") if i.strip()]
    following = _continue(items)
    return None if following is None else ", ".join(following)


def _code(task: str) -> str | None:
    found = re.search(r"^def (\w+)\(([^)]*)\):\n((?:[ \t]+.*\n?)*)", task, re.M)
    if not found or "Complete this Python function" not in task:
        return None
    name, params, body = found.groups()
    first = params.split(",")[0].split(":")[0].strip() or "None"
    # A body that parses and returns: this "model" does not pretend to understand docstrings
    # beyond parity, the one it is asked about in the gate's wording.
    value = f"{first} % 2 == 0" if "even" in body else first
    return f"def {name}({params}):\n{body.rstrip()}\n    return {value}\n"


def _recall(messages: Sequence[dict[str, Any]], task: str) -> str | None:
    found = re.search(r"What is the ([\w ]+?)\?", task)
    if not found:
        return None
    subject = re.escape(found.group(1))
    context = "\n".join(_text(m.get("content")) for m in messages)
    fact = re.search(rf"the {subject} is ([\w-]+)", context, re.I)
    return fact.group(1) if fact else None


def answer(messages: Sequence[dict[str, Any]]) -> str | None:
    """The right answer to the last user message when it is one of the task forms, else
    None (the caller plans an ordinary reply)."""
    if not messages or messages[-1].get("role") != "user":
        return None
    task = _text(messages[-1].get("content"))
    repeat = re.search(r"Repeat after me, exactly: (.+)$", task, re.S)
    if repeat:
        return repeat.group(1).strip()
    echo = re.search(r"Repeat this JSON object exactly[^:]*: (\{.*\})\s*$", task, re.S)
    if echo:
        try:
            return json.dumps(json.loads(echo.group(1)))
        except json.JSONDecodeError:
            return None
    for rule in (_arithmetic, _list, _code):
        found = rule(task)
        if found is not None:
            return found
    return _recall([*messages[:-1], {"content": task.rsplit("\n\n", 1)[0]}], task)
