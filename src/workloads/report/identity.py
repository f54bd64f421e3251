"""What two compared arms' outputs say beside their speed: greedy byte-identity of the gate
outputs and measured completions, the correctness gates side by side, and the likelihood
probes. Pure; :func:`workloads.report.compare.compare` puts them in its Comparison."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from workloads.model.likelihood import Likelihood
from workloads.model.results import RunResult

__all__ = ["Completions", "Identity", "correctness", "identities", "likelihood"]


@dataclass(frozen=True)
class Identity:
    """Greedy byte-identity of one kind of output between the arms."""

    what: str  # "gate outputs", "measured completions"
    compared: int
    identical: int
    first_difference: str | None = None  # where the first differing output first differs
    note: str = ""  # why it was not compared, when compared is 0

    def line(self) -> str:
        """ "identity of gate outputs: 12/12 byte-identical", or the differences."""
        if not self.compared:
            return f"identity of {self.what}: not compared ({self.note})"
        head = f"identity of {self.what}: {self.identical}/{self.compared} byte-identical"
        if self.identical == self.compared:
            return head
        where = f"; first difference at {self.first_difference}" if self.first_difference else ""
        return f"{head}, {self.compared - self.identical} differ{where}"


def _first_difference(x: str, y: str) -> int:
    """The first character position at which ``x`` and ``y`` differ."""
    for i, (p, q) in enumerate(zip(x, y, strict=False)):
        if p != q:
            return i
    return min(len(x), len(y))


def _greedy(result: RunResult) -> bool:
    return result.scenario.sampling.temperature == 0


Completions = dict[tuple[int, int, int, int], str | None]  # (cell, repetition, session, turn)


def identities(
    a: RunResult,
    b: RunResult,
    *,
    completions_a: Completions | None = None,
    completions_b: Completions | None = None,
) -> list[Identity]:
    """Byte-identity of the gate outputs (always greedy) and, where both arms ran greedy, of
    every measured completion, paired by (cell, measured repetition, session, turn). The first
    differing position needs the texts (the runs' transcripts); hashes give the counts."""
    out = []
    if a.gate is not None and b.gate is not None:
        ga = {(o.case, o.phase): o.output for o in a.gate.outputs if o.error_kind is None}
        gb = {(o.case, o.phase): o.output for o in b.gate.outputs if o.error_kind is None}
        common = sorted(ga.keys() & gb.keys())
        differing = [k for k in common if ga[k] != gb[k]]
        first = None
        if differing:
            k = differing[0]
            first = f"{k[0]} ({k[1]}), character {_first_difference(ga[k], gb[k])}"
        out.append(
            Identity(
                "gate outputs",
                len(common),
                len(common) - len(differing),
                first,
                "" if common else "no gate case answered in both arms",
            )
        )
    else:
        out.append(Identity("gate outputs", 0, 0, note="an arm ran without the gate"))
    if not (_greedy(a) and _greedy(b)):
        out.append(
            Identity(
                "measured completions",
                0,
                0,
                note="an arm did not run greedy (sampling.temperature = 0)",
            )
        )
        return out

    Key = tuple[int, int, int, int]

    def keyed(result: RunResult) -> dict[Key, tuple[str, Key]]:
        reps: dict[int, list[int]] = defaultdict(list)
        for r in result.records:
            if not r.warmup and r.repetition not in reps[r.cell]:
                reps[r.cell].append(r.repetition)
        return {
            (r.cell, sorted(reps[r.cell]).index(r.repetition), r.session, r.turn): (
                r.completion_sha256,
                (r.cell, r.repetition, r.session, r.turn),
            )
            for r in result.records
            if not r.warmup and r.completion_sha256 is not None
        }

    ka, kb = keyed(a), keyed(b)
    paired = sorted(ka.keys() & kb.keys())
    unequal = [k for k in paired if ka[k][0] != kb[k][0]]
    where = None
    if unequal:
        key = unequal[0]
        where = f"cell {key[0]}, measured repetition {key[1] + 1}, session {key[2]}, turn {key[3]}"
        x = (completions_a or {}).get(ka[key][1])
        y = (completions_b or {}).get(kb[key][1])
        if x is not None and y is not None:
            where += f", character {_first_difference(x, y)}"
    out.append(
        Identity(
            "measured completions",
            len(paired),
            len(paired) - len(unequal),
            where,
            "" if paired else "no completion hashes in both arms",
        )
    )
    return out


def likelihood(a: RunResult, b: RunResult) -> str | None:
    """The likelihood probes side by side (mean NLL of the same fixed text), as seed 000
    compared MTP profiles; None when neither arm ran it."""
    x, y = a.likelihood, b.likelihood
    if x is None and y is None:
        return None

    def one(p: Likelihood | None) -> str:
        if p is None:
            return "not run"
        if p.mean_nll is None:
            return p.reason or "not measured"
        return f"{p.mean_nll:.4f}"

    line = f"likelihood (mean NLL of the fixed text): A {one(x)} · B {one(y)}"
    if x is not None and y is not None and x.mean_nll is not None and y.mean_nll is not None:
        line += f" · Δ {y.mean_nll - x.mean_nll:+.4f} over {y.tokens} tokens"
        if x.tokens != y.tokens:
            line += f" (A scored {x.tokens}: different tokenizers)"
    return line


def correctness(a: RunResult, b: RunResult) -> str | None:
    """The gates side by side, judged against A's own pass set: a case A failed too is not
    held against B (a weak model is judged honestly, not to an absolute bar)."""
    if a.gate is None and b.gate is None:
        return None
    if a.gate is None or b.gate is None:
        return "correctness: " + ("A" if a.gate is None else "B") + " ran without the gate"
    pa, pb = set(a.gate.passed_cases), set(b.gate.passed_cases)
    line = f"correctness: A {len(pa)}/{len(a.gate.cases)}, B {len(pb)}/{len(b.gate.cases)}"
    lost = [c for c in a.gate.cases if c in pa and c not in pb]
    gained = [c for c in b.gate.cases if c in pb and c not in pa]
    if lost:
        line += " · B FAILS where A passed: " + ", ".join(lost)
    if gained:
        line += " · B passes where A failed: " + ", ".join(gained)
    if not lost and not gained:
        line += " · the same cases pass"
    return line
