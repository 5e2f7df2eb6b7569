"""``--zero-shot-rule anchor`` replayed from recorded measurements (benchmarks/anchor_rule_replay.py): each fold's
fine-tuned combination is read at the weight the zero-shot model's safe rule chose on the same fold, folds that
are not the same are refused, and where a real ``three_way_combination.py --rule anchor`` run exists the replay
gives its per-query values."""
from __future__ import annotations

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def script():
    return load_benchmark("anchor_rule_replay")  # it puts benchmarks/ on the path (zero_shot_files below)


def zero_fold(name, tests, tuned, p_value, gain=0.05, queries=180):
    return {"fold": name, "test_queries": tests, "safe": {"weight": tuned, "tuned": tuned, "tuning_queries": queries,
                                                          "held_out_gain": gain, "p_one_sided": p_value}}


def trained_fold(name, test_values, own_weight=0.65):
    # the fine-tuned model's own safe choice (on its dev queries) is what the anchor rule does not use
    return {"fold": name, "test_queries": len(test_values["1.0"]),
            "safe": {"weight": own_weight, "tuned": 0.3, "tuning_queries": 27, "held_out_gain": 0.02,
                     "p_one_sided": 0.2}, "test_values": test_values}


def zero_file(folds, values):
    return {"folds": {"1": folds}, "results": {"bi-encoder+safe": {"seeds": [1]}},
            "per_query": {"runs": {"bi-encoder+safe": {"1": values}}}}


def test_each_fold_takes_the_fine_tuned_values_at_the_zero_shot_weight(script):
    trained = {"folds": {"1": [
        trained_fold("f1", {"1.0": {"a": 0.1, "b": 0.2}, "0.25": {"a": 0.9, "b": 0.8}, "0.65": {"a": 0.3, "b": 0.3}}),
        trained_fold("f2", {"1.0": {"c": 0.4}, "0.3": {"c": 0.2}, "0.65": {"c": 0.7}})]}}
    zero = zero_file([zero_fold("f1", 2, 0.25, 0.001), zero_fold("f2", 1, 0.3, 0.001)],
                     {"a": 0.5, "b": 0.5, "c": 0.55, "unused": 0.0})
    replay = script.anchor_replay(trained, zero)["1"]
    # neither the fine-tuned model's own weight (0.65) nor the first stage (1.0)
    assert replay["anchor"] == {"a": 0.9, "b": 0.8, "c": 0.2}
    assert replay["two_way"] == {"a": 0.5, "b": 0.5, "c": 0.55} and replay["weights"] == [0.25, 0.3]


def test_a_zero_shot_fold_without_a_proven_gain_gives_the_first_stage(script):
    trained = {"folds": {"1": [trained_fold("f", {"1.0": {"x": 0.4}, "0.3": {"x": 0.9}, "0.65": {"x": 0.1}})]}}
    zero = zero_file([zero_fold("f", 1, 0.3, 0.7, gain=-0.01)], {"x": 0.4})
    assert script.anchor_replay(trained, zero)["1"]["anchor"] == {"x": 0.4}


@pytest.mark.parametrize("zero_folds, values, message", [
    ([zero_fold("g", 1, 0.3, 0.001)], {"x": 0.4}, "not the same fold"),
    ([zero_fold("f", 2, 0.3, 0.001)], {"x": 0.4}, "not the same fold"),
    ([zero_fold("f", 1, 0.3, 0.001)], {"y": 0.4}, "not in the zero-shot file"),
])
def test_files_of_other_folds_are_refused(script, zero_folds, values, message):
    trained = {"folds": {"1": [trained_fold("f", {"1.0": {"x": 0.4}, "0.3": {"x": 0.9}})]}}
    with pytest.raises(script.AnchorReplayError, match=message):
        script.anchor_replay(trained, zero_file(zero_folds, values))


def test_a_fine_tuned_file_without_per_weight_values_is_refused(script):
    fold = trained_fold("f", {"1.0": {"x": 0.4}})
    del fold["test_values"]
    with pytest.raises(script.AnchorReplayError, match="no per-weight test values"):
        script.anchor_replay({"folds": {"1": [fold]}}, zero_file([zero_fold("f", 1, 0.3, 0.001)], {"x": 0.4}))


def test_every_recorded_anchor_row_is_replayable_and_never_below_the_first_stage(script):
    from zero_shot_files import ANCHOR_REPLAYS  # benchmarks/ is on the path once ``script`` is loaded

    for entries in ANCHOR_REPLAYS.values():
        for entry in entries:
            summary = script.anchor_summary(*entry)
            assert summary is not None, f"{entry[0]} or {entry[2]} is missing"
            assert summary["below_first_stage_seeds"] == [], entry


def test_the_replay_gives_the_real_anchor_runs_per_query(script):
    from zero_shot_files import ANCHOR_REPLAYS

    checked = 0
    for entries in ANCHOR_REPLAYS.values():
        for entry in entries:
            if entry[3] is None:
                continue
            summary = script.anchor_summary(*entry)
            assert summary is not None and "checked_against_run" in summary, f"{entry[3]} is named but missing"
            differences = summary["checked_against_run"]["max_abs_difference_per_seed"]
            assert differences and all(value < 1e-5 for value in differences.values()), (entry, differences)
            checked += 1
    assert checked, "no real --rule anchor run recorded"
