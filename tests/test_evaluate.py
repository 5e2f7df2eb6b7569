"""Evaluation (pipeline.evaluate): the published numbers of the shipped runs, multiple-testing corrections,
compare() with a baseline and its reports, and the treatment of judged queries a run does not answer."""
from __future__ import annotations

import json
import random

import pytest

from pipeline.core import evaluation as ev
from pipeline.core.errors import PipelineError
from pipeline.core.records import Qrel, ScoredDoc
from pipeline.core.trec import read_qrels, read_run

# ------------------------------------------------------------------------------- published numbers

MICROBLOG_QL = {  # SOURCE.md: QL id.txt vs the NIST qrels (HCAN paper Table 3 for 2013/2014)
    "2011": (0.3576, 0.4000),
    "2012": (0.2091, 0.3311),
    "2013": (0.2532, 0.4450),
    "2014": (0.3924, 0.6182),
}


@pytest.mark.slow
@pytest.mark.parametrize("year", list(MICROBLOG_QL))
def test_shipped_microblog_ql_runs(year, data_root):
    base = data_root / "trec-microblog-hcan"
    run = read_run(base / f"trec-{year}" / "id.txt")
    qrels = read_qrels(base / "topics-and-qrels" / f"qrels.microblog{year}.txt")
    result = ev.evaluate(run, qrels, "AP P@30")
    assert (round(result.aggregate["AP"], 4), round(result.aggregate["P@30"], 4)) == MICROBLOG_QL[year]


@pytest.mark.slow
def test_shipped_microblog_run_through_the_dataset_loader(data_root):
    from pipeline.core.datasets import load_dataset

    dataset = load_dataset("microblog")
    subset = dataset.subset(dataset.splits["2014"])
    result = ev.evaluate(subset.first_stage, subset.qrels, "AP P@30")
    assert (round(result.aggregate["AP"], 4), round(result.aggregate["P@30"], 4)) == MICROBLOG_QL["2014"]
    assert len(result.per_query["AP"]) == 55


@pytest.mark.slow
def test_dl19_shipped_bm25(data_root):
    from pipeline.core.datasets import load_dataset

    dataset = load_dataset("dl19")
    assert round(ev.evaluate(dataset.first_stage, dataset.qrels, "nDCG@10").aggregate["nDCG@10"], 4) == 0.5058
    # the same ranking from the TREC run file
    run = read_run(data_root / "msmarco-passage-trecdl" / "bm25-top100" / "trec_results_dl19.txt")
    qrels = read_qrels(data_root / "msmarco-passage-trecdl" / "topics-and-qrels" / "qrels.dl19-passage.txt")
    assert round(ev.evaluate(run, qrels, ["nDCG@10"]).aggregate["nDCG@10"], 4) == 0.5058


# ---------------------------------------------------------------------------------- basic scoring


def test_judged_query_missing_from_the_run_counts_zero():
    qrels = [Qrel("1", "a", 1), Qrel("1", "b", 0), Qrel("2", "c", 1)]
    run = {"1": [ScoredDoc("1", "a", 2.0), ScoredDoc("1", "b", 1.0)]}  # query 2 not answered
    result = ev.evaluate(run, qrels, "AP P@1 nDCG@10")
    assert result.per_query["AP"] == {"1": 1.0, "2": 0.0}
    assert result.aggregate == {"AP": 0.5, "P@1": 0.5, "nDCG@10": 0.5}


def test_evaluate_accepts_a_flat_list_and_graded_qrels():
    qrels = [Qrel("1", "a", 2), Qrel("1", "b", 1), Qrel("1", "c", -2)]
    flat = [ScoredDoc("1", "c", 3.0), ScoredDoc("1", "b", 2.0), ScoredDoc("1", "a", 1.0)]
    result = ev.evaluate(flat, qrels, "P@1 AP(rel=2)")
    assert result.aggregate["P@1"] == 0.0  # -2 (spam) is not relevant
    assert result.aggregate["AP(rel=2)"] == pytest.approx(1 / 3)


def test_unknown_measure_is_a_pipeline_error():
    with pytest.raises(PipelineError, match="unknown measure 'MAPP'"):
        ev.parse_measures("AP MAPP")
    with pytest.raises(PipelineError):
        ev.parse_measures("")


# ------------------------------------------------------------------------------------ corrections


def test_bonferroni_against_hand_computed_values():
    assert ev.correct_pvalues([0.01, 0.04, 0.03, 0.005], "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert ev.correct_pvalues([0.5, 0.2], "bonferroni") == pytest.approx([1.0, 0.4])  # capped at 1


def test_holm_against_hand_computed_values():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> kept monotone: 0.06
    assert ev.correct_pvalues([0.01, 0.04, 0.03, 0.005], "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # 0.02*3 = 0.06, 0.3*2 = 0.6, 0.9*1 = 0.9
    assert ev.correct_pvalues([0.9, 0.02, 0.3], "holm") == pytest.approx([0.9, 0.06, 0.6])
    assert ev.correct_pvalues([0.6, 0.7], "holm") == pytest.approx([1.0, 1.0])


def test_no_correction_and_unknown_correction():
    assert ev.correct_pvalues([0.01, 0.2], "none") == [0.01, 0.2]
    assert ev.correct_pvalues([], "holm") == []
    with pytest.raises(PipelineError, match="holm"):
        ev.correct_pvalues([0.1], "sidak")


def test_paired_test_values():
    from scipy import stats

    a, b = [0.5, 0.7, 0.2, 0.9, 0.4], [0.4, 0.5, 0.25, 0.6, 0.35]
    assert ev.paired_test(a, b) == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert ev.paired_test(a, b, "wilcoxon") == pytest.approx(stats.wilcoxon(a, b).pvalue)
    assert ev.paired_test(a, a) == 1.0
    with pytest.raises(PipelineError):
        ev.paired_test(a, b, "sign")


# ---------------------------------------------------------------------------------------- compare


def synthetic_runs(n_queries: int = 30):
    """A baseline, a run that is better on almost every query, and a run that equals the baseline."""
    rng = random.Random(7)
    qrels, base, better, same = [], {}, {}, {}
    for q in range(1, n_queries + 1):
        qid = str(q)
        docs = [f"d{q}-{i}" for i in range(10)]
        relevant = set(rng.sample(docs, 3))
        qrels += [Qrel(qid, d, 1 if d in relevant else 0) for d in docs]
        shuffled = docs[:]
        rng.shuffle(shuffled)
        base[qid] = [ScoredDoc(qid, d, float(10 - i)) for i, d in enumerate(shuffled)]
        same[qid] = list(base[qid])
        # move the relevant docs to the top for all but two queries
        order = sorted(shuffled, key=lambda d: d not in relevant) if q > 2 else shuffled
        better[qid] = [ScoredDoc(qid, d, float(10 - i)) for i, d in enumerate(order)]
    return qrels, {"base": base, "better": better, "same": same}


def test_compare_with_a_baseline_tests_and_reports(tmp_path):
    qrels, runs = synthetic_runs()
    comparison = ev.compare(runs, qrels, "AP P@3", baseline="base", correction="holm")
    assert comparison.measures == ["AP", "P@3"]
    assert set(comparison.pvalues) == {"better", "same"}
    assert comparison.pvalues["better"]["AP"] < 0.001
    assert comparison.pvalues["same"]["AP"] == 1.0
    assert comparison.paired_queries == {"better": 30, "same": 30}

    table = comparison.markdown().splitlines()
    assert table[0] == "| run | AP | P@3 |"
    base_row = next(row for row in table if row.startswith("| base (baseline) |"))
    better_row = next(row for row in table if row.startswith("| better |"))
    same_row = next(row for row in table if row.startswith("| same |"))
    assert "*" in better_row and "*" not in same_row and "*" not in base_row and "p=" not in base_row
    assert f"{comparison.evaluations[1].aggregate['AP']:.4f}*" in better_row

    paths = ev.save_report(comparison, tmp_path / "reports", "cmp")
    assert set(paths) == {"markdown", "json", "figure"}
    assert paths["markdown"].read_text() == comparison.markdown() + "\n"
    report = json.loads(paths["json"].read_text())
    assert report["baseline"] == "base" and report["correction"] == "holm"
    assert report["runs"]["better"]["pvalues"]["AP"] == pytest.approx(comparison.pvalues["better"]["AP"])
    assert report["runs"]["base"]["per_query"]["AP"].keys() == {str(q) for q in range(1, 31)}
    assert paths["figure"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["cmp.json", "cmp.md", "cmp.png"]


def test_corrections_change_compare_pvalues():
    qrels, runs = synthetic_runs(8)
    runs["worse"] = {q: list(reversed(hits)) for q, hits in runs["better"].items()}
    raw = ev.compare(runs, qrels, "AP", baseline="base", correction="none").pvalues
    bonf = ev.compare(runs, qrels, "AP", baseline="base", correction="bonferroni").pvalues
    for name in ("better", "worse"):
        assert bonf[name]["AP"] == pytest.approx(min(1.0, 3 * raw[name]["AP"]))


def test_compare_pairs_only_the_queries_both_runs_answer():
    qrels, runs = synthetic_runs(10)
    # ir-measures scores a judged query a run lacks as 0, so per-query values exist for all judged queries
    partial = {q: hits for q, hits in runs["better"].items() if q not in {"9", "10"}}
    comparison = ev.compare({"base": runs["base"], "partial": partial}, qrels, "AP", baseline="base")
    assert comparison.paired_queries["partial"] == 10
    partial_eval = comparison.evaluations[1]
    assert partial_eval.per_query["AP"]["9"] == 0.0


def test_compare_without_baseline_and_with_a_bad_one(tmp_path):
    qrels, runs = synthetic_runs(5)
    comparison = ev.compare({"base": runs["base"]}, qrels, "AP")
    assert comparison.pvalues == {} and "p=" not in comparison.markdown()
    paths = ev.save_report(comparison, tmp_path, "single")
    assert "figure" not in paths and not (tmp_path / "single.png").exists()
    with pytest.raises(PipelineError, match="baseline"):
        ev.compare(runs, qrels, "AP", baseline="nope")


def test_run_name():
    assert ev.run_name("runs/x/cranfield-bm25.run") == "cranfield-bm25"
    assert ev.run_name("a.txt") == "a" and ev.run_name("b.res") == "b.res"
