"""benchmarks/safe_rule_replay.py: weight rules of ``--interpolate auto`` replayed on a recorded measurement, the
paired t-test + Holm of the recorded rows, and the check that refuses a file whose recorded rows it does not
reproduce."""
import copy
import json
import statistics

import pytest
from scipy import stats

from helpers import load_benchmark
from pipeline.engine import fusion

replay = load_benchmark("safe_rule_replay")

GRID = fusion.DEFAULT_GRID
# fold "a": a positive but unproven gain (p .2), fold "b": a proven one; the old rule keeps both tuned weights
FOLDS = {"a": {"tuned": 0.4, "gain": 0.03, "p": 0.2}, "b": {"tuned": 0.3, "gain": 0.05, "p": 0.01}}


def _value(query: int, weight: float) -> float:
    """A query's metric at ``weight``: the first stage's plus a re-ranker gain that grows towards w = 0."""
    return round(0.3 + 0.02 * query + (1 - weight) * (0.1 + 0.01 * (query % 3)), 6)


def _holm_row(combined: dict, first: dict, alone: dict) -> tuple[float, float]:
    """(mean, Holm-corrected p of ``combined``) as measure's evaluation.compare computes them."""
    queries = sorted(first)
    raw = [stats.ttest_rel([run[q] for q in queries], [first[q] for q in queries]).pvalue for run in (alone, combined)]
    order = sorted(range(2), key=lambda i: raw[i])
    adjusted, running = [0.0, 0.0], 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (2 - rank) * raw[index]))
        adjusted[index] = running
    return statistics.mean(combined.values()), adjusted[1]


def _file() -> dict:
    """A one-seed measurement of two folds of 10 test queries each, its old and safe rows computed here."""
    folds, first, alone, queries = [], {}, {}, {"a": range(10), "b": range(10, 20)}
    for name, evidence in FOLDS.items():
        values = {str(w): {f"q{i}": _value(i, w) for i in queries[name]} for w in GRID}
        folds.append({"fold": name, "test_queries": 10, "dev_queries": 12, "old_weight": evidence["tuned"],
                      "safe": {"weight": evidence["tuned"] if evidence["p"] < 0.05 else 1.0,
                               "tuned": evidence["tuned"], "tuning_queries": 12,
                               "held_out_gain": evidence["gain"], "p_one_sided": evidence["p"]},
                      "test_values": values})
        first.update(values["1.0"])
        alone.update(values["0.0"])
    rows = {"alone": alone}
    for rule in ("old", "safe"):
        rows[rule] = {q: v for fold in folds for q, v in
                      fold["test_values"][str(fold["old_weight"] if rule == "old" else fold["safe"]["weight"])].items()}
    results = {"m": {"seeds": [1], "AP": [statistics.mean(alone.values())]}}
    for rule, row in (("old", "m+interp"), ("safe", "m+safe")):
        mean, p = _holm_row(rows[rule], first, alone)
        results[row] = {"seeds": [1], "AP": [mean], "p:AP": [p]}
    return {"metric": "AP", "first_stage": {"AP": statistics.mean(first.values())}, "results": results,
            "folds": {"1": folds},
            "per_query": {"metric": "AP", "runs": {"m": {"1": alone}, "m+interp": {"1": rows["old"]},
                                                   "m+safe": {"1": rows["safe"]}}}}


def test_rules_shrink_only_the_unproven_positive_gain():
    unproven, proven_fold = (_file()["folds"]["1"][i] for i in (0, 1))
    rules = {name: function for name, (_, function) in replay.RULES.items()}
    assert rules["old"](unproven) == 0.4 and rules["safe"](unproven) == 1.0
    assert rules["shrink-half"](unproven) == 0.7  # half-way from 1 to .4
    for name in rules:
        assert rules[name](proven_fold) == 0.3, name
    assert replay.t_from_one_sided_p(0.2, 12) < 1 and rules["shrink-t"](unproven) == 1.0  # 1 - 1/t^2 < 0
    nearly = copy.deepcopy(unproven)
    nearly["safe"]["p_one_sided"] = 0.08
    t = replay.t_from_one_sided_p(0.08, 12)
    assert t == pytest.approx(stats.t.isf(0.08, 11))
    assert rules["shrink-t"](nearly) == fusion.shrink_towards_first_stage(1 - (1 - 1 / t ** 2) * 0.6, 1.0) < 1.0
    assert replay.shrunk(0.35, 0.5) == 0.7  # .675 is off the grid: towards the first stage
    losing = copy.deepcopy(unproven)
    losing["safe"].update(held_out_gain=-0.01, p_one_sided=0.7)
    assert all(rules[name](losing) == 1.0 for name in rules if name != "old")


def test_replay_reproduces_the_recorded_rows_with_the_paired_t_test_and_holm():
    data = _file()
    worst = replay.check(data)
    assert worst["mean"] < 1e-12 and worst["p"] < 1e-12
    half = replay.replay(data, replay.RULES["shrink-half"][1])
    assert half["weights"] == {"1": [0.7, 0.3]}
    assert half["per_query"]["1"]["q0"] == _value(0, 0.7) and half["per_query"]["1"]["q10"] == _value(10, 0.3)
    mean, p = _holm_row(half["per_query"]["1"], {f"q{i}": _value(i, 1.0) for i in range(20)},
                        {f"q{i}": _value(i, 0.0) for i in range(20)})
    assert half["AP"] == [pytest.approx(mean, abs=1e-12)] and half["p:AP"] == [pytest.approx(p, rel=1e-9)]
    assert replay.marks(half, "AP", data["first_stage"]["AP"]) == ["above"]


@pytest.mark.parametrize("tamper", ["per_query", "weight", "mean"])
def test_a_file_that_does_not_reproduce_is_refused(tamper, tmp_path, capsys):
    data = _file()
    if tamper == "per_query":
        data["per_query"]["runs"]["m+safe"]["1"]["q3"] += 0.001
    elif tamper == "weight":
        data["folds"]["1"][0]["safe"]["weight"] = 0.4
    else:
        data["results"]["m+interp"]["AP"][0] += 0.01
    with pytest.raises(replay.ReplayError):
        replay.check(data)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "m-safe.json").write_text(json.dumps(data))
    assert replay.main(["--results", str(tmp_path), "--output", "-", "x/m-safe.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("safe_rule_replay: x/m-safe.json") and "\n" not in err


def test_summary_counts_every_rule_and_says_why_a_file_needs_no_replay(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "m-safe.json").write_text(json.dumps(_file()))
    proven_only = _file()
    proven_only["folds"]["1"] = [{k: v for k, v in proven_only["folds"]["1"][1].items() if k != "test_values"}]
    (tmp_path / "x" / "kept-safe.json").write_text(json.dumps(proven_only))
    output = tmp_path / "replay.json"
    assert replay.main(["--results", str(tmp_path), "--output", str(output), "x/m-safe.json",
                        "x/kept-safe.json"]) == 0
    summary = json.loads(output.read_text())
    (row,) = summary["rows"]
    assert set(row["rules"]) == set(replay.RULES)
    assert row["rules"]["shrink-half"]["weights"] == {"1": [0.7, 0.3]}
    assert summary["totals_over_replayed_rows"]["old"]["seeds"] == 1
    (other,) = summary["not_replayed"]
    assert other["file"] == "x/kept-safe.json" and other["status"].startswith("unchanged")


def test_the_kept_replay_is_what_the_script_gives_from_the_result_files():
    kept = json.loads(replay.OUTPUT.read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(replay.summarise(replay.safe_files())))
    for key, value in fresh.items():
        assert kept.get(key) == value, f"{replay.OUTPUT.name} stale ({key}): run python benchmarks/safe_rule_replay.py"
    # the rows the rule was chosen on are among the replayed ones, and at least one row tests it afresh
    assert set(replay.CHOSEN_ON) <= {row["file"] for row in fresh["rows"]}
    assert fresh["totals_on_rows_measured_after_the_choice"]["current"]["rows"] > 0
