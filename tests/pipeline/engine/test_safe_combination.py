"""The safe combination of ``--interpolate auto`` (pipeline.engine.fusion.choose_weight): a tuned weight is kept only
when its cross-validated gain over the first stage clears its noise, else the first stage is kept; weights
are never tuned on test queries; and benchmarks/results/combination/beyond-zero-shot.json is what its script builds."""
from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

import rerankers
from pipeline.engine import fusion
from pipeline.core.datasets import Dataset
from pipeline.core.plugins import Registry
from pipeline.core.records import Qrel, ScoredDoc
from pipeline.engine.protocols import Fold

from helpers import Noise, graded_dataset, toy_dataset

ROOT = Path(__file__).resolve().parents[3]
SUMMARY_PATH = ROOT / "benchmarks" / "results" / "combination" / "beyond-zero-shot.json"


def synthetic(queries: int, seed: int, skill: float):
    """``(first, reranked, qrels)``: per query 20 candidates and one relevant document, which the first stage
    ranks somewhere in its top 10; the re-ranker's score is ``skill`` for the relevant document plus uniform
    noise in [0, 1] (``skill`` 0: pure noise, no information at all)."""
    rng = random.Random(seed)
    first, reranked, qrels = {}, {}, []
    for number in range(queries):
        qid = f"q{number}"
        docs = [f"{qid}-d{i}" for i in range(20)]
        relevant = docs[rng.randrange(10)]
        first[qid] = [ScoredDoc(qid, d, 20.0 - i) for i, d in enumerate(docs)]
        reranked[qid] = [ScoredDoc(qid, d, rng.random() + (skill if d == relevant else 0.0)) for d in docs]
        qrels += [Qrel(qid, d, int(d == relevant)) for d in docs]
    return first, reranked, qrels


def test_a_gain_that_is_noise_is_never_kept():
    choices = [fusion.choose_weight(*synthetic(40, seed, skill=0.0), "AP") for seed in range(5)]
    assert all(c.queries == 40 and (c.p_value >= fusion.SAFE_LEVEL or c.held_out_gain <= 0) for c in choices)
    assert not any(c.kept for c in choices)
    for c in choices:  # no held-out gain: the first stage; a positive unproven one: at most SHRINK of the share
        if c.held_out_gain <= 0:
            assert c.weight == 1.0 and c.verdict == fusion.FIRST_STAGE and "first stage alone" in c.describe()
        else:
            assert 1.0 - c.weight <= fusion.SHRINK * (1.0 - c.tuned) + 1e-9
    assert [c.weight for c in choices] == [1.0, 0.8, 1.0, 1.0, 0.7]  # seeds 1 and 4: gains +.007, +.025
    # the reason for the rule: on some draws plain tuning (the best weight on the tuning queries, which is
    # choice.tuned) gives the noise a share
    assert any(c.tuned < 1.0 for c in choices)
    assert all(c.tuned == fusion.tune_weight(*synthetic(40, seed, skill=0.0), "AP")[0]
               for seed, c in enumerate(choices[:2]))


def test_a_real_gain_is_kept():
    first, reranked, qrels = synthetic(40, 0, skill=0.8)
    choice = fusion.choose_weight(first, reranked, qrels, "AP")
    assert choice.kept and choice.weight < 1.0
    assert choice.held_out_gain > 0.1 and choice.p_value < 0.001
    assert choice.weight == fusion.tune_weight(first, reranked, qrels, "AP")[0]  # the tuned weight itself
    assert "kept" in choice.describe() and "40 tuning queries" in choice.describe()


@pytest.mark.parametrize("tuned, queries, gain, p, weight, verdict, says", [
    (0.4, 30, 0.02, 0.01, 0.4, fusion.KEPT, "kept 0.40"),
    (0.4, 30, 0.02, 0.2, 0.7, fusion.SHRUNK, "shrunk to 0.70 (half-way from the first stage to the tuned 0.40)"),
    (0.35, 30, 0.02, 0.2, 0.7, fusion.SHRUNK, "shrunk to 0.70"),  # .675 is off the grid: towards w = 1
    (0.95, 30, 0.02, 0.2, 1.0, fusion.FIRST_STAGE, "rounds to 1"),
    (0.4, 30, -0.01, 0.8, 1.0, fusion.FIRST_STAGE, "no positive held-out gain"),
    (0.4, 30, 0.0, 1.0, 1.0, fusion.FIRST_STAGE, "no positive held-out gain"),
    (0.4, 4, 0.05, 0.001, 1.0, fusion.FIRST_STAGE, "fewer than 5 tuning queries"),
])
def test_the_rule_keeps_a_significant_gain_shrinks_an_unproven_one_and_drops_no_gain(tuned, queries, gain, p, weight,
                                                                                     verdict, says):
    choice = fusion.decide_weight(tuned, queries, gain, p)
    assert (choice.weight, choice.verdict) == (weight, verdict)
    assert says in choice.describe() and f"{queries} tuning queries" in choice.describe()


def test_too_few_tuning_queries_keep_the_first_stage_even_with_a_perfect_re_ranker():
    first, reranked, qrels = synthetic(fusion.MIN_TUNING_QUERIES - 1, 0, skill=5.0)
    choice = fusion.choose_weight(first, reranked, qrels, "AP")
    assert choice.tuned < 1.0 and choice.weight == 1.0 and "not kept" in choice.describe()
    first, reranked, qrels = synthetic(fusion.MIN_TUNING_QUERIES + 3, 0, skill=5.0)
    assert fusion.choose_weight(first, reranked, qrels, "AP").kept


def test_held_out_gains_tune_each_query_on_the_others():
    # two weights; q1 and q2 gain at w=0, q3 loses there: leaving q3 out still picks w=0 (gain -1 on q3);
    # leaving q1 out, the others tie (mean 0 at both weights) and the tie goes to the smaller weight
    values = {0.0: {"q1": 1.0, "q2": 1.0, "q3": 0.0}, 1.0: {"q1": 0.0, "q2": 0.0, "q3": 1.0}}
    assert fusion.held_out_gains(values) == {"q1": 1.0, "q2": 1.0, "q3": -1.0}
    assert fusion.best_weight(values) == 0.0 and fusion.best_weight(values, leave_out="q1") == 0.0
    assert fusion.one_sided_p([0.0, 0.0]) == 1.0 and fusion.one_sided_p([0.5, 0.5, 0.5]) == 0.0
    assert fusion.one_sided_p([1.0, 1.0, -1.0]) > 0.05


def test_the_grid_must_hold_the_first_stage():
    with pytest.raises(Exception, match="must hold 1.0"):
        fusion.choose_weight(*synthetic(10, 0, skill=1.0), "AP", grid=(0.0, 0.5))


# --------------------------------------------------------------------- folds: test queries are never used

class Recording:
    """A re-ranker that remembers every query it scores; scores favour the relevant document (``-d0``)."""

    name = "recording"

    def __init__(self):
        self.scored: set[str] = set()

    def score(self, query, docs):
        self.scored.add(query.query_id)
        return [1.0 if doc.doc_id.endswith("-d0") else 0.0 for doc in docs]


def shipped_dataset(queries: int = 30) -> Dataset:
    """``queries`` queries, four candidates each, the relevant ``-d0`` ranked last by the shipped run."""
    return toy_dataset("shipped-toy", queries, 4, lambda ids: ids[0], float)


@pytest.mark.parametrize("given_model", [False, True])
def test_fold_weights_never_score_a_test_query(given_model):
    dataset = shipped_dataset()
    ids = sorted(dataset.queries)
    folds = [Fold("fold1", ids[:16], ids[16:24], ids[24:]), Fold("fold2", ids[6:22], ids[:6], ids[22:])]
    model = Recording()
    weights = fusion.fold_weights(folds, model, dataset, "shipped", 4, given_model=given_model)
    tuned = {q for fold in folds for q in fusion.tuning_queries(fold, given_model)}
    assert model.scored == tuned
    assert set(weights) == set(ids[22:])
    # fold2's tuning queries ids[:6] (dev) or ids[:22] (given model) hold no test query of fold2
    assert all(not set(fusion.tuning_queries(f, given_model)) & set(f.test) for f in folds)
    assert all(w < 1.0 for w in weights.values())  # a perfect re-ranker's gain is proven on 6 or more queries


# ------------------------------------------------------------------ the command line, from an empty home

def test_auto_with_an_uninformative_model_gives_back_the_first_stage(monkeypatch, tmp_path):
    from pipeline.run import parse_config, run_pipeline

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))  # empty, as a new user's
    monkeypatch.setattr(rerankers, "REGISTRY", Registry("re-ranker", "neural_rerank.rerankers", rerankers.BUILTIN))
    rerankers.register("noise", Noise)
    dataset = graded_dataset(40)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    checkpoint = tmp_path / "noise.model"
    checkpoint.write_text("noise")
    # default --interpolate (the recipe's auto), 5 folds by query
    result = run_pipeline(parse_config(["--dataset", "graded-toy", "--reranker", "noise", "--model", str(checkpoint),
                                        "--first-stage", "shipped", "--metrics", "AP", "--output-dir",
                                        str(tmp_path / "runs")]))
    for query_id, hits in result.run.items():
        assert [h.doc_id for h in hits] == [h.doc_id for h in dataset.first_stage[query_id]], query_id
    aggregate = {e.name: e.aggregate["AP"] for e in result.comparison.evaluations}
    first_name = next(name for name in aggregate if "(top" in name)
    assert aggregate[result.run_path.stem] == pytest.approx(aggregate[first_name])


# --------------------------------------------------------------------------------- the summary JSON

def load_script(name: str = "beyond_zero_shot"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_beyond_zero_shot_json_is_what_the_script_builds_from_the_result_files():
    script = load_script()
    kept = json.loads(SUMMARY_PATH.read_text(encoding="utf-8"))
    assert kept == json.loads(json.dumps(script.build())), \
        "stale: run python benchmarks/beyond_zero_shot.py build"


def test_the_summary_has_every_shipped_collection_and_its_required_keys():
    kept = json.loads(SUMMARY_PATH.read_text(encoding="utf-8"))
    names = [c["collection"] for c in kept["collections"]]
    assert {"Cranfield", "Vaswani", "NFCorpus", "Microblog 2014", "DL19", "DL20"} <= set(names)
    for entry in kept["collections"]:
        for key in ("first_stage", "zero_shot_combined", "best_trained", "best_trained_combined",
                    "p_vs_zero_shot", "seeds"):
            assert key in entry, (entry["collection"], key)
        if entry["p_vs_zero_shot"] is None:  # a missing number says why
            assert entry["p_vs_zero_shot_reason"]
    # the rule's guarantee: no run ends significantly below its first stage
    assert kept["below_first_stage_count"]["safe_rule"] == 0
    # the price is recorded, not asserted: falling back costs gains that a few dev queries cannot prove
    # (2026-11-26: 25 seeds above when an unproven gain fell back, 28 since it is shrunk half-way, against 30
    # under the old rule; issue 36 stays open)
    counts = kept["above_first_stage_count"]
    assert isinstance(counts["safe_rule"], int) and isinstance(counts["old_rule"], int)
    assert 0 < counts["safe_rule"] <= sum((entry["old"] or {}).get("seeds") or 0 for entry in kept["rows"])


# ------------------------------------------------------------------------------------ --reranker auto

def named(dataset: Dataset, name: str, judged: bool = True) -> Dataset:
    """``dataset`` under another name, with or without its judgments."""
    import dataclasses

    return dataclasses.replace(dataset, name=name, qrels=dataset.qrels if judged else [])


@pytest.mark.parametrize("name, judged, expected", [
    ("my-collection", True, ("bi-encoder", "all-MiniLM-L6-v2", (), None, None)),
    ("my-collection", False, ("bi-encoder", "all-MiniLM-L6-v2", (), None, "UNJUDGED")),
    ("vaswani", True, ("bi-encoder", "all-MiniLM-L6-v2", (), None, None)),
    ("cranfield", True, ("bi-encoder", None, ("amp=true",), None, None, "all-MiniLM-L6-v2", "anchor")),
    ("nfcorpus", True, ("bi-encoder", None, ("amp=true", "epochs=2"), None, None, "all-MiniLM-L6-v2", "anchor")),
    ("microblog", True, ("cross-encoder", None, ("max_examples_per_epoch=3200", "epochs=2", "dev_depth=100"), 1000,
                         None, "all-MiniLM-L6-v2")),
    ("trecqa", True, ("none", None, (), None, None)),
])
def test_auto_takes_the_measured_pipeline_of_the_collection(name, judged, expected):
    from pipeline.engine.config import RunConfig
    from pipeline.engine.presets import UNJUDGED_WEIGHT, resolve_auto

    # the zero-shot model the re-ranker is stacked on and the rule: none and stack but where given
    expected = (*expected, *(None, "stack")[len(expected) - 5:])
    expected = expected[:4] + (str(UNJUDGED_WEIGHT) if expected[4] == "UNJUDGED" else expected[4], *expected[5:])
    config = resolve_auto(RunConfig(reranker="auto"), named(graded_dataset(10), name, judged))
    assert (config.reranker, config.model, config.overrides, config.k, config.interpolate,
            config.zero_shot_base, config.zero_shot_rule) == expected
    # NFCorpus's model is trained on its own dev split (one model), every other on the collection's protocol
    assert config.train_dataset == ("nfcorpus-dev" if name == "nfcorpus" else None)
    # what the user gave is kept; a fixed weight leaves nothing to stack on
    kept = resolve_auto(RunConfig(reranker="auto", interpolate="0.7", k=50), named(graded_dataset(10), name, judged))
    assert kept.interpolate == "0.7" and kept.k == 50 and kept.zero_shot_base is None
    assert kept.zero_shot_rule == "stack"
    assert resolve_auto(RunConfig(reranker="knrm"), graded_dataset(10)) == RunConfig(reranker="knrm")


def test_auto_refuses_options_of_one_model_with_one_line(capsys, monkeypatch):
    from pipeline.run import main

    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: graded_dataset(10))
    assert main(["--dataset", "graded-toy", "--reranker", "auto", "--set", "epochs=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --reranker auto picks the model and its options itself")


def test_auto_from_an_empty_home_scores_with_the_packaged_bi_encoder(monkeypatch, tmp_path):
    # a collection without judgments: the zero-shot bi-encoder, combined with the first stage at the fixed
    # weight, over every query (nothing to train or tune on); nothing is downloaded
    from pipeline.engine.fusion import interpolate
    from pipeline.engine.presets import UNJUDGED_WEIGHT
    from pipeline.run import parse_config, run_pipeline

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    for variable, value in {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(variable, value)
    dataset = named(graded_dataset(6), "my-collection", judged=False)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    result = run_pipeline(parse_config(["--dataset", "my-collection", "--reranker", "auto", "--first-stage",
                                        "shipped", "--output-dir", str(tmp_path / "runs")]))
    assert "bi-encoder" in result.run_path.name and result.reranked is not None
    assert set(result.run) == set(dataset.queries) and result.comparison is None
    expected = interpolate(dataset.first_stage, result.reranked, UNJUDGED_WEIGHT)
    for query_id, hits in result.run.items():
        assert [h.doc_id for h in hits] == [h.doc_id for h in expected[query_id]]


@pytest.mark.parametrize("page", ["docs/recommendations.md", "BENCHMARKS.md"])
def test_the_recommendations_page_and_benchmarks_show_the_summary_as_rendered(page):
    script = load_script("beyond_zero_shot_tables")
    kept = json.loads(SUMMARY_PATH.read_text(encoding="utf-8"))
    doc = (ROOT / page).read_text(encoding="utf-8")
    blocks = {"safe-combination": script.render_safe_table}
    if page == "BENCHMARKS.md":
        blocks.update({"three-way": script.render_three_way_table,
                       "versus-zero-shot": script.render_versus_zero_shot_table})
    for name, render in blocks.items():
        block = doc.split(f"<!-- {name}:begin -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]
        assert block == render(kept), f"{page}, block {name} stale: run python benchmarks/beyond_zero_shot.py build"
