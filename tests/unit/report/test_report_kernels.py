"""Feature effects, tuning spreads and the winner's chain on hand-built lineages."""

from __future__ import annotations

import pandas as pd
import pytest

from fsr.report import kernels
from tests.support.lineage_rows import frame, row


def featured() -> pd.DataFrame:
    # baseline 40 us: speedups 4 and 1 with VEC4, 2 without it; one VEC4 kernel is wrong
    return frame([
        row(candidate_id="a", median_us=10.0, features_detected=["VEC4", "UNROLL"]),
        row(candidate_id="b", median_us=40.0, features_detected=["VEC4"]),
        row(candidate_id="c", median_us=20.0, features_detected=["UNROLL"]),
        row(candidate_id="d", verdict="WRONG", median_us=None, features_detected=["VEC4"]),
    ])


def effect(effects: pd.DataFrame, feature: str) -> pd.Series:
    return effects.set_index("feature").loc[feature]


def test_feature_effect_compares_geomean_speedups_with_and_without_it() -> None:
    vec4 = effect(kernels.feature_effects(featured()), "VEC4")
    assert (vec4["kernels_with"], vec4["kernels_without"]) == (3, 1)
    assert vec4["speedup_with"] == pytest.approx(2.0)  # sqrt(4 * 1); the wrong kernel has no speedup
    assert vec4["speedup_without"] == pytest.approx(2.0)
    assert vec4["effect"] == pytest.approx(1.0)
    assert vec4["ok_share_with"] == pytest.approx(2 / 3)
    assert vec4["ok_share_without"] == pytest.approx(1.0)


def test_a_feature_only_fast_kernels_have_shows_an_effect_above_one() -> None:
    unroll = effect(kernels.feature_effects(featured()), "UNROLL")
    assert unroll["speedup_with"] == pytest.approx((4 * 2) ** 0.5)
    assert unroll["speedup_without"] == pytest.approx(1.0)
    assert unroll["effect"] > 2.8


def test_features_no_kernel_had_are_left_out() -> None:
    assert set(kernels.feature_effects(featured())["feature"]) == {"VEC4", "UNROLL"}


def trial(cid: str, n: int, block: int, median_us: float | None, feasible: bool = True) -> dict:
    return {"run_id": "r", "candidate_id": cid, "trial": n, "defines": [{"name": "BLOCK", "value": block}],
            "feasible": feasible, "reason": "" if feasible else "smem", "median_us": median_us, "cached": False,
            "finished_at": pd.Timestamp("2026-11-23", tz="UTC")}


def test_tuning_spread_rates_each_value_against_the_same_candidates_best_trial() -> None:
    evaluations = frame([row(candidate_id="a", tuned_defines=[{"name": "BLOCK", "value": 256}]),
                         row(candidate_id="b", tuned_defines=[{"name": "BLOCK", "value": 256}])])
    # a is 10x slower than b overall; the ratio to each one's own best makes them comparable
    trials = pd.DataFrame([trial("a", 0, 256, 100.0), trial("a", 1, 128, 150.0), trial("a", 2, 1024, None, False),
                           trial("b", 0, 256, 10.0), trial("b", 1, 128, 20.0)])
    spread = kernels.tuning_spread(trials, evaluations).set_index("value")
    assert spread.loc[128, "median_ratio"] == pytest.approx(1.75)
    assert spread.loc[256, "median_ratio"] == pytest.approx(1.0)
    assert (spread.loc[256, "chosen"], spread.loc[128, "chosen"]) == (2, 0)
    assert (spread.loc[1024, "infeasible"], spread.loc[1024, "trials"]) == (1, 1)


def chained() -> pd.DataFrame:
    return frame([
        row(candidate_id="seed", median_us=40.0, move="template", source="int x;\n"),
        row(candidate_id="mid", parents=["seed"], median_us=20.0, move="toggle +VEC4", source="int x;\n",
            defines=[{"name": "VEC4", "value": 1}]),
        row(candidate_id="best", parents=["mid", "other"], median_us=10.0, move="unroll", source="int y;\n",
            defines=[{"name": "VEC4", "value": 1}], features_detected=["VEC4", "UNROLL"]),
        row(candidate_id="other", median_us=30.0),
        row(candidate_id="fast_but_wrong", parents=["best"], verdict="WRONG", median_us=None),
    ])


def test_winner_chain_walks_first_parents_back_to_the_seed() -> None:
    chain = kernels.winner_chain(chained(), "softmax")
    assert chain["candidate_id"].tolist() == ["seed", "mid", "best"]
    assert chain["speedup"].tolist() == pytest.approx([1.0, 2.0, 4.0])
    assert chain.iloc[-1]["features"] == "UNROLL, VEC4"


def test_winner_chain_diffs_what_the_compiler_saw_defines_included() -> None:
    chain = kernels.winner_chain(chained(), "softmax")
    assert chain.iloc[0]["diff"] == ""
    assert "+#define VEC4 1" in chain.iloc[1]["diff"]
    assert "-int x;" in chain.iloc[2]["diff"] and "+int y;" in chain.iloc[2]["diff"]
    assert "#define" not in chain.iloc[2]["diff"].replace(" #define VEC4 1", "")


def test_winner_chain_stops_at_a_parent_the_lineage_lost() -> None:
    rows = chained()
    chain = kernels.winner_chain(rows[rows["candidate_id"] != "seed"], "softmax")
    assert chain["candidate_id"].tolist() == ["mid", "best"]


def test_no_correct_kernel_no_chain() -> None:
    assert kernels.winner_chain(frame([row(verdict="WRONG", median_us=None)]), "softmax").empty
