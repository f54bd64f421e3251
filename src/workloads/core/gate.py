"""The correctness gate: six deterministic cases with checkable answers, and how an output is
judged. Pure: the sending is :mod:`workloads.runner.gate`.

Every rejected row of seed 000 failed on correctness, not speed (graph replay with speculative
decoding passed 2/6 coherence cases; n-gram speculation "corrupted arithmetic and code
cases"), so a run sends these greedily (temperature 0, no penalties) before and after its
measured windows. The cases are the kinds the seed's suite names: arithmetic, a code
completion that must parse, a JSON echo, a list continuation, recall of a fact planted earlier
in a long context, repeat-after-me.

Judging is strict about the answer and lenient about framing (a code fence, a trailing
period, surrounding whitespace), because a small model that answers "1591." is right. A weak
model is judged honestly: the result records what passed, nothing is retried or relaxed.
The code case checks that the completion parses as Python and defines the function with a
``return``; it never runs model output.

**Base models.** A pretrained model that was never tuned for chat (Gemma 3 270M, the small
model the tests run on llama.cpp) cannot follow an instruction: behind any chat template it
echoes the request back and runs on ("What is 37 * 43? Reply with the number only.
mendatang …"), so the chat cases fail on a healthy server. Such a model is recognised by that
echo (:func:`echoes`: most chat cases answered with their own request) and judged instead on
:data:`TEXT_CASES`: the same kinds of task written as text to continue ("Monday, Tuesday,
Wednesday," → " Thursday, Friday, Saturday"), sent to ``/v1/completions``. They check what a
base model can be asked to do greedily: the kernels, the KV cache and long-context positions
(a wrong RoPE base fails the recall case), not the chat template, which a base model has no
right answer for. A 270M base model cannot do arithmetic, so the text form counts instead.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from workloads.model.gate import ECHOED, TEXT_PREFIX, GateResult

__all__ = [
    "CASES",
    "ECHO_MAJORITY",
    "TEXT_CASES",
    "GateCase",
    "Judgement",
    "TextCase",
    "echoes",
    "judge",
    "judge_text",
    "rejudged",
]


@dataclass(frozen=True, slots=True)
class GateCase:
    """One gate case: its name, the chat to send and the most tokens it may take."""

    name: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    max_tokens: int

    def chat(self) -> list[dict[str, str]]:
        """The case's messages in OpenAI chat form."""
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether one output passed its case, and why (what was expected and what came)."""

    passed: bool
    why: str


_JSON = {"id": 7, "name": "cache", "tags": ["kv", "prefix"], "ok": True}
_SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
_CODE = "4827"


def _haystack() -> str:
    """About 1,500 tokens of plain, deterministic prose around one planted fact."""
    lines = []
    for i in range(60):
        lines.append(
            f"Note {i + 1}: the build on shelf {i % 7 + 2} was checked by the night shift, "
            f"who logged {i * 3 + 11} items and found nothing unusual."
        )
    lines.insert(4, f"Remember this: the vault code is {_CODE}.")
    return "\n".join(lines)


CASES: tuple[GateCase, ...] = (
    GateCase("arithmetic", (("user", "What is 37 * 43? Reply with the number only."),), 16),
    GateCase(
        "code",
        (
            (
                "user",
                "Complete this Python function. Reply with the whole function only.\n\n"
                'def is_even(n):\n    """Return True when n is even."""\n',
            ),
        ),
        96,
    ),
    GateCase(
        "json-echo",
        (("user", "Repeat this JSON object exactly, with nothing else: " + json.dumps(_JSON)),),
        48,
    ),
    GateCase(
        "list-continuation",
        (
            (
                "user",
                "Continue the list with the next three items, comma-separated, nothing "
                "else: Monday, Tuesday, Wednesday,",
            ),
        ),
        16,
    ),
    GateCase(
        "recall",
        (("user", _haystack() + "\n\nWhat is the vault code? Reply with the number only."),),
        16,
    ),
    GateCase("repeat", (("user", f"Repeat after me, exactly: {_SENTENCE}"),), 32),
)


@dataclass(frozen=True, slots=True)
class TextCase:
    """One gate case in text form, for a base model: a prompt to continue (sent to
    ``/v1/completions``) and the most tokens it may take. Its name starts with
    :data:`~workloads.model.gate.TEXT_PREFIX`."""

    name: str
    prompt: str
    max_tokens: int


# The text form of the cases, each checked on Gemma 3 270M (base, Q4_K_M) at greedy on
# llama.cpp: every one passes there, and the recall case fails with --rope-freq-base 10000
# (Llama 2's base instead of Gemma 3's 1,000,000), a real misconfiguration.
TEXT_CASES: tuple[TextCase, ...] = (
    TextCase(TEXT_PREFIX + "count", "1, 2, 3, 4, 5, 6,", 12),
    TextCase(TEXT_PREFIX + "code", 'def is_even(n):\n    """Return True when n is even."""\n', 48),
    TextCase(TEXT_PREFIX + "json-echo", json.dumps(_JSON) + "\n" + json.dumps(_JSON) + "\n", 48),
    TextCase(TEXT_PREFIX + "list-continuation", "Monday, Tuesday, Wednesday,", 12),
    TextCase(TEXT_PREFIX + "recall", _haystack() + "\n\nThe vault code is", 8),
    TextCase(TEXT_PREFIX + "repeat", _SENTENCE + "\n" + _SENTENCE + "\n", 24),
)

# A model that answers this many of the six chat cases with their own request is a base
# model (a healthy chat model echoes none; echoing one request can be a quirk).
ECHO_MAJORITY = 4


def _normal(text: str) -> str:
    return " ".join(text.split()).lower()


def echoes(case: GateCase, output: str) -> bool:
    """Whether ``output`` begins by echoing the case's request (its first 40 characters,
    whitespace and case aside): what a base model behind a chat template does."""
    request = _normal(case.messages[-1][1])[:40]
    return bool(request) and _normal(output).startswith(request)


def _unfenced(text: str) -> str:
    """The text inside the first code fence, or the text itself."""
    fenced = re.search(r"```[a-zA-Z]*\n(.*?)(?:```|$)", text, re.S)
    return (fenced.group(1) if fenced else text).strip()


def _short(text: str, limit: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _number(name: str, text: str, expected: str) -> Judgement:
    found = re.search(r"-?\d[\d,]*", text)
    got = found.group(0).replace(",", "") if found else None
    if got == expected:
        return Judgement(True, f"{expected}")
    return Judgement(False, f"expected {expected}, got {_short(text)!r}")


def _code(text: str) -> Judgement:
    source = _unfenced(text)
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return Judgement(False, f"does not parse: {err.msg} (line {err.lineno})")
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    mine = [f for f in functions if f.name == "is_even"]
    if not mine:
        return Judgement(False, "parses, but defines no is_even")
    if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(mine[0])):
        return Judgement(False, "defines is_even without a return value")
    return Judgement(True, "parses; defines is_even with a return")


def _json_echo(text: str) -> Judgement:
    try:
        value = json.loads(_unfenced(text))
    except json.JSONDecodeError:
        return Judgement(False, f"not JSON: {_short(text)!r}")
    if value != _JSON:
        return Judgement(False, f"a different object: {_short(json.dumps(value))!r}")
    return Judgement(True, "the same object")


def _list(text: str) -> Judgement:
    words = re.findall(r"[A-Za-z]+", text)[:3]
    expected = ["thursday", "friday", "saturday"]
    if [w.lower() for w in words] == expected:
        return Judgement(True, "Thursday, Friday, Saturday")
    return Judgement(False, f"expected Thursday, Friday, Saturday, got {_short(text)!r}")


def _repeat(text: str) -> Judgement:
    said = " ".join(text.split())
    if "Repeat after me" in said:
        # Echoing the whole request contains the sentence too; that is not repeating it
        # (Gemma 3 270M does exactly this).
        return Judgement(False, f"{ECHOED}: {_short(text)!r}")
    if " ".join(_SENTENCE.split()) in said:
        return Judgement(True, "repeated exactly")
    return Judgement(False, f"not repeated exactly: {_short(text)!r}")


def judge(case: GateCase, output: str) -> Judgement:
    """Judge ``output`` as the answer to ``case``. Pure.

    judge(CASES[0], "1591.").passed  # True
    """
    if echoes(case, output):
        return Judgement(False, f"{ECHOED}: {_short(output)!r}")
    if case.name == "arithmetic":
        return _number(case.name, output, str(37 * 43))
    if case.name == "code":
        return _code(output)
    if case.name == "json-echo":
        return _json_echo(output)
    if case.name == "list-continuation":
        return _list(output)
    if case.name == "recall":
        return _number(case.name, output, _CODE)
    if case.name == "repeat":
        return _repeat(output)
    raise ValueError(f"no judge for gate case {case.name!r}")


def _text_code(prompt: str, output: str) -> Judgement:
    """The prompt's function header with the continuation, up to the first line that leaves
    the function (a base model runs on into the next definition), must parse and return."""
    lines = output.split("\n")
    body = []
    for line in lines:
        if line.strip() and not line[:1].isspace():
            break
        body.append(line)
    return _code(prompt + "\n".join(body))


def _first_line(output: str) -> str:
    return output.strip().split("\n", 1)[0].strip()


def judge_text(case: TextCase, output: str) -> Judgement:
    """Judge ``output`` as the continuation of a text case's prompt. Pure.

    judge_text(TEXT_CASES[3], " Thursday, Friday, Saturday, Sunday").passed  # True
    """
    name = case.name.removeprefix(TEXT_PREFIX)
    if name == "count":
        numbers = re.findall(r"\d+", output)[:3]
        if numbers == ["7", "8", "9"]:
            return Judgement(True, "7, 8, 9")
        return Judgement(False, f"expected 7, 8, 9, got {_short(output)!r}")
    if name == "code":
        return _text_code(case.prompt, output)
    if name == "json-echo":
        return _json_echo(_first_line(output))
    if name == "list-continuation":
        return _list(output)
    if name == "recall":
        return _number(name, output, _CODE)
    if name == "repeat":
        line = _first_line(output)
        if line == _SENTENCE:
            return Judgement(True, "repeated exactly")
        return Judgement(False, f"not repeated exactly: {_short(output)!r}")
    raise ValueError(f"no judge for gate case {case.name!r}")


def rejudged(gate: GateResult) -> GateResult:
    """``gate`` with every answered output judged again by today's rules (a saved gate keeps
    its outputs, so ``show`` and ``compare`` recompute its verdicts as they do summaries).
    Failed requests and unknown cases stay as they were."""
    names = {c.name: c for c in CASES}
    texts = {c.name: c for c in TEXT_CASES}
    outputs = []
    for o in gate.outputs:
        case = names.get(o.case)
        text = texts.get(o.case)
        if o.error_kind is not None:
            verdict = None
        elif case is not None:
            verdict = judge(case, o.output)
        elif text is not None:
            verdict = judge_text(text, o.output)
        else:
            verdict = None
        if verdict is None:
            outputs.append(o)
            continue
        outputs.append(o.model_copy(update={"passed": verdict.passed, "why": verdict.why}))
    return gate.model_copy(update={"outputs": outputs})
