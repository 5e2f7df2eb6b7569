"""``--zero-shot-rule fallback`` replayed from recorded measurements (benchmarks/fallback_rule_replay.py): a fold whose
fine-tuned combination is proven on its dev queries takes that combination at the kept weight, any other fold the
zero-shot safe combination; and where a real ``three_way_combination.py --rule fallback`` run exists, the replay
gives its per-query values."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("fallback_rule_replay", ROOT / "benchmarks" / "fallback_rule_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fold(name, p_value, gain, test_values):
    return {"fold": name, "safe": {"weight": 0.3, "tuned": 0.3, "tuning_queries": 27, "held_out_gain": gain,
                                   "p_one_sided": p_value}, "test_values": test_values}


def test_a_proven_fold_takes_the_fine_tuned_combination_and_any_other_the_zero_shot_one(script):
    trained = {"folds": {"1": [
        fold("proven", 0.01, 0.05, {"1.0": {"a": 0.1, "b": 0.2}, "0.3": {"a": 0.9, "b": 0.8}}),
        fold("shrunk", 0.2, 0.05, {"1.0": {"c": 0.1}, "0.3": {"c": 0.7}, "0.65": {"c": 0.6}}),
        fold("no gain", 0.7, -0.01, {"1.0": {"d": 0.4}, "0.3": {"d": 0.1}})]},
        "per_query": {"runs": {"ft+safe": {"1": {}}}}}
    zero_values = {"a": 0.5, "b": 0.5, "c": 0.55, "d": 0.45, "unused": 0.0}
    zero = {"results": {"bi-encoder+safe": {"seeds": [1]}}, "per_query": {"runs": {"bi-encoder+safe": {"1": zero_values}}}}
    replay = script.fallback_replay(trained, zero, "ft")["1"]
    # neither the first stage (1.0) nor the shrunk weight (0.65) of the plain safe rule: the zero-shot combination
    assert replay["fallback"] == {"a": 0.9, "b": 0.8, "c": 0.55, "d": 0.45}
    assert replay["two_way"] == {"a": 0.5, "b": 0.5, "c": 0.55, "d": 0.45} and replay["kept"] == 1


def test_a_test_query_the_zero_shot_file_lacks_is_refused(script):
    trained = {"folds": {"1": [fold("f", 0.2, 0.05, {"1.0": {"x": 0.1}, "0.3": {"x": 0.2}})]},
               "per_query": {"runs": {"ft+safe": {"1": {}}}}}
    zero = {"results": {"bi-encoder+safe": {"seeds": [1]}}, "per_query": {"runs": {"bi-encoder+safe": {"1": {"y": 1.0}}}}}
    with pytest.raises(ValueError, match="not in the zero-shot file"):
        script.fallback_replay(trained, zero, "ft")


def test_the_replay_gives_the_real_fallback_runs_per_query(script):
    from zero_shot_files import FALLBACK_REPLAYS  # benchmarks/ is on the path once ``script`` is loaded

    checked = 0
    for entries in FALLBACK_REPLAYS.values():
        for entry in entries:
            summary = script.fallback_summary(*entry)
            if entry[3] is None:
                continue
            assert summary is not None and "checked_against_run" in summary, f"{entry[3]} is named but missing"
            differences = summary["checked_against_run"]["max_abs_difference_per_seed"]
            assert differences and all(value < 1e-5 for value in differences.values()), (entry, differences)
            checked += 1
    if checked == 0:
        pytest.skip("no real --rule fallback run recorded yet")
