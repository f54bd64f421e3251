"""The capacity search's policy on tables of load → verdict: which loads it measures, in
which order, and where it says the knee is."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from workloads.core.knee import Next, knee, next_load
from workloads.model.capacity import PointVerdict

Truth = Callable[[float], PointVerdict]


def search(
    truth: Truth, start: float, *, ceiling: float = 4096, axis: str = "concurrency"
) -> tuple[list[float], float | None, float | None, str | None]:
    """Measure as the runner does: the loads in order, the knee, the first failing, why."""
    verdicts: dict[float, PointVerdict] = {}
    order: list[float] = []
    load: float | None = start
    step = Next(None)
    while load is not None:
        assert load not in verdicts, f"{load} measured twice: {order}"
        assert len(order) < 100
        order.append(load)
        verdicts[load] = truth(load)
        floor = 1.0 if axis == "concurrency" else 1e-3
        step = next_load(verdicts, floor=floor, ceiling=ceiling, axis=axis)  # type: ignore[arg-type]
        load = step.load
    return (order, *knee(verdicts), step.stopped)


def threshold(top: float, *, provable_from: float = 1) -> Truth:
    """Meets up to ``top``, fails above; below ``provable_from`` too few sessions to tell."""

    def truth(load: float) -> PointVerdict:
        if load > top:
            return "fails"
        return "meets" if load >= provable_from else "cannot tell"

    return truth


def test_the_issue_knee_c3_below_the_start_is_found():
    # TPOT ≈ 10 + 16·C ms at 62 ms: C3 meets, C4 fails; C1-C2 cannot show a 95% goal
    # within 30 repetitions. The old search went C5 → C2 → C1 and said "not found".
    order, found, first_failing, stopped = search(threshold(3, provable_from=3), 5)
    assert order == [5, 3, 4]
    assert (found, first_failing, stopped) == (3, 4, None)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({5: "fails"}, 3),  # halve (the upper half first), not to 2
        ({5: "fails", 3: "meets"}, 4),
        ({5: "fails", 3: "meets", 4: "fails"}, None),
        ({5: "fails", 2: "cannot tell"}, 4),  # C2 closes nothing: C3-C4 are untested
        ({5: "fails", 3: "cannot tell", 4: "cannot tell"}, 2),
        ({5: "fails", 3: "cannot tell", 4: "cannot tell", 2: "cannot tell"}, 1),
        ({5: "fails", 4: "cannot tell", 3: "cannot tell", 2: "fails"}, 1),
        ({5: "meets"}, 10),
        ({5: "cannot tell"}, 10),  # nothing failed yet: up
        ({5: "meets", 10: "fails"}, 8),
        ({5: "meets", 10: "fails", 8: "cannot tell"}, 9),
        ({5: "meets", 10: "fails", 8: "cannot tell", 9: "fails"}, 7),
        ({2: "meets", 3: "fails"}, None),
        ({1: "fails"}, None),
        ({1: "cannot tell", 2: "fails"}, None),
    ],
)
def test_the_next_load_after_a_table_of_verdicts(table, expected):
    verdicts: dict[float, PointVerdict] = {float(k): v for k, v in table.items()}
    assert next_load(verdicts, floor=1, ceiling=4096).load == expected


def test_every_load_below_the_lowest_failing_is_measured_before_not_found():
    order, found, first_failing, _ = search(lambda load: "cannot tell" if load < 6 else "fails", 6)
    assert sorted(order) == [1, 2, 3, 4, 5, 6]
    assert (found, first_failing) == (None, 1)


@pytest.mark.parametrize("start", [1, 2, 3, 5, 8, 13, 20, 32])
def test_any_single_threshold_is_found_from_any_start(start):
    for top, provable in itertools.product(range(0, 33), (1, 2, 3, 5)):
        order, found, first_failing, _ = search(
            threshold(top, provable_from=provable), start, ceiling=32
        )
        expected = top if provable <= top else None
        assert found == expected, (start, top, provable, order)
        if top < 32 and expected is not None:
            assert first_failing == top + 1
        assert len(order) <= 12 or provable > 1, (start, top, order)  # bisection's cost


def test_the_ceiling_ends_a_search_that_never_failed():
    order, found, _, stopped = search(lambda load: "meets", 5, ceiling=16)
    assert order == [5, 10, 16] and found == 16
    assert stopped == "the highest load allowed (16) meets the goal"
    order, found, _, stopped = search(threshold(16, provable_from=17), 16, ceiling=16)
    assert found is None and sorted(order) == list(range(1, 17))
    assert stopped == "the highest load allowed (16) was not shown to fail"


def test_a_rate_bisects_to_its_resolution():
    order, found, first_failing, _ = search(threshold(30.0), 20.0, axis="rate")
    assert order[:3] == [20.0, 40.0, pytest.approx(28.28, abs=0.01)]
    assert found is not None and first_failing is not None
    assert found <= 30 < first_failing and first_failing / found <= 1.1
    order, found, _, _ = search(lambda load: "fails", 1.0, axis="rate")
    assert found is None and order[-1] == 1e-3


def test_knee_ignores_meets_above_the_lowest_failing():
    assert knee({3.0: "meets", 4.0: "fails", 6.0: "meets"}) == (3.0, 4.0)
    assert knee({3.0: "meets", 4.0: "cannot tell", 5.0: "fails"}) == (3.0, 4.0)
    assert knee({2.0: "cannot tell"}) == (None, 2.0)
    with pytest.raises(ValueError, match="at least one"):
        next_load({}, floor=1, ceiling=2)
