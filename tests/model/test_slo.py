"""The SLO value: parsing ``--slo`` text and the scenario's ``[slo]`` table, one line per
mistake, and the limits each step kind gets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.model.errors import OptionsError, ScenarioError
from workloads.model.scenario import load_scenario
from workloads.model.slo import LIMIT_KEYS, STEP_KINDS, Limits, Slo, parse_slo


def test_the_slo_string_sets_limits_kinds_and_the_percentile():
    slo = parse_slo("ttft_s=2, itl_ms=50,tool.ttft_s=5,percentile=99")
    assert (slo.ttft_s, slo.itl_ms, slo.tpot_ms, slo.e2e_s) == (2.0, 50.0, None, None)
    assert slo.percentile == 99.0
    assert slo.kinds() == ["tool"]


def test_a_kind_overrides_key_by_key_and_inherits_the_rest():
    slo = parse_slo("ttft_s=2,itl_ms=50,tool.ttft_s=5,human.e2e_s=60")
    assert slo.limits_for("tool") == Limits(ttft_s=5, itl_ms=50)
    assert slo.limits_for("human") == Limits(ttft_s=2, itl_ms=50, e2e_s=60)
    assert slo.limits_for("subagent") == Limits(ttft_s=2, itl_ms=50)
    assert slo.limits_for(None) == Limits(ttft_s=2, itl_ms=50)


def test_a_kind_alone_is_an_slo():
    slo = parse_slo("tool.tpot_ms=80")
    assert slo.limits_for("tool").tpot_ms == 80 and slo.limits_for("human").items() == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ttft_ms=2000", ["'ttft_ms'", "did you mean ttft_s?"]),
        ("ttft=2", ["unknown key 'ttft'"]),
        ("tools.ttft_s=5", ["unknown step kind 'tools'", "human, tool, subagent, compaction"]),
        ("tool.percentile=99", ["unknown key 'percentile'"]),
        ("ttft_s", ["missing value", "ttft_s=NUMBER"]),
        ("ttft_s=", ["missing value"]),
        ("ttft_s=-1", ["greater than 0"]),
        ("ttft_s=0", ["greater than 0"]),
        ("ttft_s=nan", ["greater than 0"]),
        ("ttft_s=2s", ["'2s' is not a number", "seconds"]),
        ("itl_ms=50ms", ["'50ms' is not a number", "milliseconds"]),
        ("ttft_s=2000000", ["over a day", "seconds"]),
        ("ttft_s=1,ttft_s=2", ["given twice"]),
        ("ttft_s=1,,itl_ms=2", ["empty item"]),
        ("", ["empty"]),
        ("percentile=100", ["below 100"]),
        ("percentile=90", ["at least one limit"]),
    ],
)
def test_a_malformed_slo_is_one_line_naming_it(text, words):
    with pytest.raises(OptionsError) as info:
        parse_slo(text)
    message = str(info.value)
    assert "\n" not in message and message.startswith("slo")
    assert info.value.option == "slo"
    for word in words:
        assert word in message


limit_values = st.floats(min_value=0.001, max_value=10_000, allow_nan=False)


@given(
    st.dictionaries(st.sampled_from(LIMIT_KEYS), limit_values, min_size=1),
    st.dictionaries(
        st.sampled_from(STEP_KINDS),
        st.dictionaries(st.sampled_from(LIMIT_KEYS), limit_values, min_size=1),
        max_size=2,
    ),
    st.sampled_from([50.0, 90.0, 99.0, 99.9]),
)
def test_spec_gives_the_slo_back(top, kinds, percentile):
    slo = Slo(**top, **{k: Limits(**v) for k, v in kinds.items()}, percentile=percentile)
    again = parse_slo(slo.spec())
    assert again.spec() == slo.spec()
    for kind in (None, *STEP_KINDS):
        for (k1, v1), (k2, v2) in zip(
            again.limits_for(kind).items(), slo.limits_for(kind).items(), strict=True
        ):
            assert k1 == k2 and v1 == pytest.approx(v2, rel=1e-5)


def test_describe_names_units_and_kinds():
    slo = parse_slo("ttft_s=2,itl_ms=50,tool.ttft_s=5")
    assert slo.describe() == "TTFT ≤ 2 s, ITL ≤ 50 ms; tool steps: TTFT ≤ 5 s, ITL ≤ 50 ms"


def write(tmp_path, table):
    path = tmp_path / "s.toml"
    path.write_text("users = 1\nturns = 1\nturn_tokens = 10\noutput_tokens = 8\n" + table)
    return path


def test_a_scenario_carries_its_slo_table(tmp_path):
    scenario = load_scenario(write(tmp_path, "[slo]\nttft_s = 2\n[slo.tool]\nttft_s = 5\n"))
    assert scenario.slo == parse_slo("ttft_s=2,tool.ttft_s=5")
    assert load_scenario(write(tmp_path, "")).slo is None


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("[slo]\nttft_ms = 2000\n", "slo.ttft_ms"),
        ("[slo]\nttft_s = -2\n", "slo.ttft_s"),
        ("[slo.tools]\nttft_s = 5\n", "slo.tools"),
        ('[slo]\nttft_s = "2s"\n', "slo.ttft_s"),
        ("[slo]\n", "slo"),
    ],
)
def test_a_bad_slo_table_names_the_file_and_the_field(tmp_path, table, field):
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, table))
    message = str(info.value)
    assert message.count("\n") == 0
    assert str(tmp_path / "s.toml") in message and f"'{field}'" in message
