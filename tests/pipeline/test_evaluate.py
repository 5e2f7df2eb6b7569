"""Evaluation (pipeline.evaluate): the published numbers of the shipped runs, multiple-testing corrections,
compare() with a baseline and its reports, and the treatment of judged queries a run does not answer."""
from __future__ import annotations

import json
import random

import pytest

from pipeline.core import evaluation as ev
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.records import Qrel, ScoredDoc
from pipeline.core.formats import read_qrels, read_run

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


# --------------------------------------------------------------------------- trec_eval measure names

#: a hand-made graded run: distinct scores (no tie order to disagree on), an unjudged document, a query whose
#: only relevant document is ranked last, and a relevant document the run never retrieves
ALIAS_QRELS = {
    "1": {"a": 2, "b": 0, "c": 1, "d": 0, "e": 1},
    "2": {"f": 0, "g": 0, "h": 1},
    "3": {"i": 1, "j": 2, "k": 0, "z": 1},
}
ALIAS_RUN = {
    "1": {"a": 9.0, "x": 8.0, "b": 7.0, "c": 6.0, "d": 5.0, "e": 4.0},
    "2": {"f": 3.0, "g": 2.5, "h": 1.5},
    "3": {"k": 4.0, "j": 3.0, "i": 2.0},
}

# trec_eval name, ir-measures' canonical name, the key pytrec_eval reports it under
TREC_ALIASES = [
    ("map", "AP", "map"),
    ("P_10", "P@10", "P_10"),
    ("P.10", "P@10", "P_10"),
    ("P_5", "P@5", "P_5"),
    ("ndcg_cut_10", "nDCG@10", "ndcg_cut_10"),
    ("ndcg_cut.5", "nDCG@5", "ndcg_cut_5"),
    ("ndcg", "nDCG", "ndcg"),
    ("recip_rank", "RR", "recip_rank"),
    ("recall_100", "R@100", "recall_100"),
    ("recall_5", "R@5", "recall_5"),
    ("Rprec", "Rprec", "Rprec"),
    ("bpref", "Bpref", "bpref"),
    ("map_cut_5", "AP@5", "map_cut_5"),
    ("success_1", "Success@1", "success_1"),
    ("set_P", "SetP", "set_P"),
    ("num_rel_ret", "NumRet(rel=1)", "num_rel_ret"),
]


@pytest.mark.parametrize("trec_name, canonical, key", TREC_ALIASES)
def test_trec_eval_names_parse_to_the_measure_and_score_as_pytrec_eval(trec_name, canonical, key):
    import pytrec_eval

    measures = ev.parse_measures(trec_name)
    assert [str(m) for m in measures] == [canonical]
    qrels = [Qrel(q, d, r) for q, docs in ALIAS_QRELS.items() for d, r in docs.items()]
    run = {q: [ScoredDoc(q, d, s) for d, s in docs.items()] for q, docs in ALIAS_RUN.items()}
    result = ev.evaluate(run, qrels, trec_name)
    assert list(result.aggregate) == [canonical]  # reported under ir-measures' name, not the one typed
    expected = pytrec_eval.RelevanceEvaluator(ALIAS_QRELS, {trec_name}).evaluate(ALIAS_RUN)
    assert result.per_query[canonical] == pytest.approx({q: values[key] for q, values in expected.items()})
    # the values are not all equal, so a measure read under the wrong name would show
    assert len({round(v, 6) for v in result.per_query[canonical].values()}) > 1 or trec_name in {"set_P", "success_1"}


def test_trec_eval_names_mix_with_ir_measures_names_and_repeats_are_dropped():
    assert [str(m) for m in ev.parse_measures("map AP P_10 P@10 nDCG@10 ndcg_cut_10")] == ["AP", "P@10", "nDCG@10"]
    assert [str(m) for m in ev.parse_measures("P_5,10 recall")] == ["P@5", "P@10"] + [
        f"R@{k}" for k in (5, 10, 15, 20, 30, 100, 200, 500, 1000)]  # as trec_eval -m recall prints them
    assert ev.canonical_measures("map P.10 AP(rel=2)") == "AP P@10 AP(rel=2)"
    assert str(ev.parse_measures("P")[0]) == "P"  # ir-measures' own name wins where both read a name


@pytest.mark.parametrize("name, message", [
    ("MAPP", "unknown measure 'MAPP'; closest known name: 'MAP' (AP)"),
    ("ndcg_cu_10", "unknown measure 'ndcg_cu_10'; closest known name: 'ndcg_cut_10' (nDCG@10)"),
    ("nDGC@10", "unknown measure 'nDGC@10'; closest known name: 'nDCG@10'"),
    ("recip_rnak", "closest known name: 'recip_rank' (RR)"),
    ("P_10x", "unknown measure 'P_10x'"),  # ir-measures' trec parser alone would read it as P@10
    ("official", "'official' is a trec_eval measure set, not a measure"),
    ("gm_map", "'gm_map' is a trec_eval measure that ir-measures does not compute"),
    ("map_10", "bad measure 'map_10'"),
    ("AP(foo=1)", "bad measure 'AP(foo=1)': no parameter 'foo' (it takes cutoff, judged_only, rel)"),
    ("R@{k}", "{k} stands for the ranking depth"),
])
def test_bad_measure_names_are_config_errors_with_the_closest_name(name, message):
    with pytest.raises(ConfigError) as error:
        ev.parse_measures(f"AP {name}")
    assert message in str(error.value)


def test_one_default_metric_set_for_run_and_evaluate():
    from pipeline.engine import config

    assert ev.DEFAULT_MEASURES == config.DEFAULT_METRICS == "AP nDCG@10 P@30 R@{k}"


# ---------------------------------------------------------------------------------------- figures


def test_delta_figure_has_one_panel_per_measure_titled_with_mean_delta_and_pvalue(tmp_path):
    qrels, runs = synthetic_runs(12)
    comparison = ev.compare(runs, qrels, "AP P@3 nDCG@10", baseline="base", correction="bonferroni")
    figure = ev.delta_figure_object(comparison)
    assert len(figure.axes) == 3
    base = comparison.evaluation("base")
    for axis, measure in zip(figure.axes, ["AP", "P@3", "nDCG@10"]):
        title = axis.get_title(loc="left")
        assert title.startswith(f"{measure}: per-query delta vs base")
        for name in ("better", "same"):
            run = comparison.evaluation(name)
            mean = sum(run.per_query[measure][q] - base.per_query[measure][q] for q in base.per_query[measure]) / 12
            assert f"{name}: mean delta {mean:+.4f}, p={comparison.pvalues[name][measure]:.3g}" in title
        assert len(axis.get_lines()) >= 2  # one line per compared run (plus the zero line)
    assert comparison.pvalues["better"]["AP"] < comparison.alpha and "p=" in figure.axes[0].get_title(loc="left")
    assert "*" in figure.axes[0].get_title(loc="left").split("better:")[1].split("\n")[0]


def test_delta_figure_with_one_compared_run_draws_a_bar_per_query(tmp_path):
    import matplotlib.image

    qrels, runs = synthetic_runs(10)
    comparison = ev.compare({"base": runs["base"], "better": runs["better"]}, qrels, "AP P@3", baseline="base")
    figure = ev.delta_figure_object(comparison)
    assert [len(axis.patches) for axis in figure.axes] == [10, 10]
    ap = comparison.evaluation("better").aggregate["AP"] - comparison.evaluation("base").aggregate["AP"]
    assert comparison.mean_delta("better", "AP") == pytest.approx(ap)  # every query paired: delta of the means
    assert f"mean delta {ap:+.4f}" in figure.axes[0].get_title(loc="left")
    # the saved PNG holds every panel: two measures are about twice as tall as one
    one = matplotlib.image.imread(ev.delta_figure(comparison, tmp_path / "one.png", "AP"))
    two = matplotlib.image.imread(ev.delta_figure(comparison, tmp_path / "two.png"))
    assert two.shape[1] == one.shape[1] and two.shape[0] > 1.8 * one.shape[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.png", "two.png"]  # no temporary files left
    with pytest.raises(PipelineError, match="not among the evaluated"):
        ev.delta_figure_object(comparison, ["nDCG@10"])


def test_report_json_has_mean_deltas_and_sources(tmp_path):
    qrels, runs = synthetic_runs(6)
    comparison = ev.compare(runs, qrels, "AP", baseline="base")
    comparison.sources = {"base": "runs/base.run"}
    report = json.loads(ev.save_report(comparison, tmp_path, "r")["json"].read_text())
    assert report["runs"]["better"]["mean_delta"]["AP"] == pytest.approx(comparison.mean_delta("better", "AP"))
    assert report["runs"]["same"]["mean_delta"] == {"AP": 0.0}
    assert "mean_delta" not in report["runs"]["base"] and report["runs"]["base"]["source"] == "runs/base.run"


# ------------------------------------------------------------------------------------- run labels


def test_run_labels_tell_same_named_files_apart_by_their_nearest_folders(tmp_path):
    assert ev.run_labels(["runs/a/x.run", "runs/b/x.run", "y.run"]) == ["a/x", "b/x", "y"]
    # a/x would still clash between runs/a and other/a: those two take one more folder, b/x does not
    assert ev.run_labels(["runs/a/x.run", "runs/b/x.run", "other/a/x.run"]) == ["runs/a/x", "b/x", "other/a/x"]
    assert ev.run_labels(["d/x.run", "d/x.txt"]) == ["d/x.run", "d/x.txt"]  # no folder tells them apart
    assert ev.run_labels(["x.run", "./x.run"]) == ["x", "x (2)"]  # the same file twice
    assert ev.run_labels([str(tmp_path / "x.run"), "/x.run"]) == [f"{tmp_path.name}/x", "/x.run"]


# ---------------------------------------------------------------------------------- command line


def write_eval_files(tmp_path):
    """qrels for 6 queries, a baseline ranking the relevant document second and a better run ranking it
    first on 5 of them, both named ``x.run`` in two folders, and a third run ``y.run`` (reversed baseline)."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"{q} 0 d{q}a 1\n{q} 0 d{q}b 0\n{q} 0 d{q}c 0\n" for q in range(1, 7)))
    paths = {"base": tmp_path / "runs" / "base" / "x.run", "good": tmp_path / "runs" / "good" / "x.run",
             "y": tmp_path / "runs" / "y.run"}
    orders = {"base": "bac", "good": "abc", "y": "cab"}
    for key, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for q in range(1, 7):
            order = "bac" if key == "good" and q == 6 else orders[key]
            lines += [f"{q} Q0 d{q}{d} {r} {10 - r} t\n" for r, d in enumerate(order, 1)]
        path.write_text("".join(lines))
    return qrels, paths


def table_rows(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_evaluate_cli_labels_same_named_runs_by_folder_and_draws_every_measure(tmp_path, capsys):
    from pipeline.evaluate import main

    qrels, paths = write_eval_files(tmp_path)
    out = tmp_path / "eval"
    argv = [str(paths["base"]), str(paths["good"]), str(paths["y"]), "--qrels", str(qrels),
            "--baseline", str(paths["base"]), "--metrics", "map P_1 recip_rank", "--output-dir", str(out)]
    assert main(argv) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows[0] == "| run | AP | P@1 | RR |"  # trec_eval names in, canonical names out
    assert rows[2].startswith("| base/x (baseline) | 0.5000 | 0.0000 | 0.5000 |")
    assert rows[3].startswith("| good/x | 0.9167") and rows[4].startswith("| y |")
    report = json.loads((out / "evaluation.json").read_text())
    assert set(report["runs"]) == {"base/x", "good/x", "y"}
    assert report["runs"]["good/x"]["source"] == str(paths["good"])
    assert sorted(p.name for p in out.iterdir()) == ["evaluation.json", "evaluation.md", "evaluation.png"]


def test_evaluate_cli_names_label_runs_and_the_baseline_may_be_a_name(tmp_path, capsys):
    from pipeline.evaluate import main

    qrels, paths = write_eval_files(tmp_path)
    argv = [str(paths["base"]), str(paths["good"]), "--qrels", str(qrels), "--metrics", "AP",
            "--names", "BM25", "KNRM", "--baseline", "BM25"]
    assert main(argv) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows[2].startswith("| BM25 (baseline) | 0.5000 |") and rows[3].startswith("| KNRM | 0.9167")
    # the baseline as a file name still works
    assert main(argv[:-1] + [str(paths["base"])]) == 0
    assert "| BM25 (baseline) |" in capsys.readouterr().out


def test_evaluate_cli_default_metrics_are_pipeline_runs(tmp_path, capsys):
    from pipeline.evaluate import main

    qrels, paths = write_eval_files(tmp_path)
    assert main([str(paths["base"]), "--qrels", str(qrels)]) == 0
    # R@{k}: k is the deepest ranking, 3 documents per query here
    assert table_rows(capsys.readouterr().out)[0] == "| run | AP | nDCG@10 | P@30 | R@3 |"


@pytest.mark.parametrize("extra, message", [
    (["--names", "A", "A"], "error: --names 'A' is given twice; each run needs its own name"),
    (["--names", "A"], "error: --names gives 1 name(s) for 2 run(s); give one per run, in the same order"),
    (["--names", "A", "B", "C"], "error: --names gives 3 name(s) for 2 run(s)"),
    (["--names", "A", "a|b"], "error: --names 'a|b': a name may not hold '|'"),
    (["--baseline", "z.run"], "error: --baseline 'z.run' is not one of the runs; give one of the run files or its label (base/x, good/x)"),
    (["--baseline", "x.run"], "error: --baseline 'x.run' is not one of the runs"),  # two runs are x.run
    (["--metrics", "AP MAPP"], "error: unknown measure 'MAPP'; closest known name: 'MAP' (AP)"),
])
def test_evaluate_cli_bad_names_baselines_and_metrics_are_one_error_line(tmp_path, capsys, extra, message):
    from pipeline.evaluate import main

    qrels, paths = write_eval_files(tmp_path)
    out = tmp_path / "eval"
    assert main([str(paths["base"]), str(paths["good"]), "--qrels", str(qrels), "--output-dir", str(out), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message) and captured.err.count("\n") == 1 and captured.out == ""
    assert not out.exists()


@pytest.mark.slow
def test_evaluate_cli_with_a_dataset_uses_its_recipe_metrics(tmp_path, capsys, data_root):
    from pipeline.evaluate import main

    run = data_root / "trec-microblog-hcan" / "trec-2014" / "id.txt"
    assert main([str(run), "--dataset", "microblog", "--split", "2014", "--names", "QL"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert rows[0] == "| run | AP | P@30 |"  # the recipe's metrics, as pipeline.run prints them
    assert rows[2] == "| QL | %.4f | %.4f |" % MICROBLOG_QL["2014"]
