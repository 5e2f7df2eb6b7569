"""``--zero-shot-base`` (pipeline.engine.stacking): a re-ranker stacked on the zero-shot combination. The zero-shot
model scores each query once, no weight is tuned on a test query, a trained model that proves nothing leaves the
zero-shot combination as it is, one that knows more enters; and the command runs it from an empty home."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

import rerankers
from pipeline.core.plugins import Registry
from pipeline.engine.context import FirstStageContext
from pipeline.engine.fusion import interpolate
from pipeline.engine.protocols import Fold
from pipeline.engine.fusion import KEPT
from pipeline.engine.stacking import ANCHOR, FALLBACK, stack_on_zero_shot
from pipeline.engine.stages import rerank

from helpers import Noise, graded_dataset


class Counting:
    """A re-ranker that counts the queries it scores; ``knows`` decides whether it scores the relevant document
    (the one the qrels judge 1) above the others, else it scores like :class:`helpers.Noise`."""

    name = "counting"

    def __init__(self, dataset, knows: bool):
        self.relevant = {(q.query_id, q.doc_id) for q in dataset.qrels if q.relevance > 0}
        self.knows = knows
        self.scored: Counter = Counter()

    def score(self, query, docs):
        self.scored[query.query_id] += 1
        if self.knows:
            return [1.0 if (query.query_id, doc.doc_id) in self.relevant else 0.0 for doc in docs]
        return Noise().score(query, docs)


def folds_of(dataset):
    ids = sorted(dataset.queries)
    return [Fold("fold1", ids[:24], ids[24:32], ids[32:]), Fold("fold2", ids[10:34], ids[:10], ids[34:])]


def stack(dataset, zero_shot, trained, folds, **options):
    context = FirstStageContext(dataset, "shipped")
    tested = [q for fold in folds for q in fold.test]
    top = context.search([dataset.queries[q] for q in tested], 10)
    reranked = rerank(trained, dataset, top)
    trained.scored.clear()  # what the tuning scores from here on
    return stack_on_zero_shot(folds, zero_shot, trained, dataset, context, 10, top, reranked, "AP", **options), top


def test_the_zero_shot_model_scores_each_query_once_and_the_trained_one_only_dev_queries():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    zero_shot, trained = Counting(dataset, knows=False), Counting(dataset, knows=True)
    stacked, _ = stack(dataset, zero_shot, trained, folds)
    # two folds whose tuning queries overlap: still one scoring per query
    assert set(zero_shot.scored.values()) == {1}
    assert set(zero_shot.scored) == {q for fold in folds for q in (*fold.train, *fold.dev, *fold.test)}
    tested = {q for fold in folds for q in fold.test}
    assert set(trained.scored) == {q for fold in folds for q in fold.dev} and not set(trained.scored) & tested
    assert set(stacked.final) == set(stacked.zero_shot_combined) == tested


def test_a_trained_model_that_proves_nothing_leaves_the_zero_shot_combination_as_it_is():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    stacked, _ = stack(dataset, Counting(dataset, knows=True), Counting(dataset, knows=False), folds)
    assert all(second.weight == 1.0 for _, second in stacked.choices.values())
    for query_id, hits in stacked.final.items():
        assert [h.doc_id for h in hits] == [h.doc_id for h in stacked.zero_shot_combined[query_id]]


def test_a_trained_model_that_knows_more_enters_on_top_of_an_uninformative_zero_shot_model():
    from pipeline.core.evaluation import evaluate

    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    stacked, top = stack(dataset, Counting(dataset, knows=False), Counting(dataset, knows=True), folds)
    assert all(first.weight == 1.0 for first, _ in stacked.choices.values())  # noise: the first stage stays
    assert all(second.weight < 1.0 for _, second in stacked.choices.values())
    judged = dataset.subset(list(top)).qrels
    ap = {name: evaluate(run, judged, "AP").aggregate["AP"]
          for name, run in (("first", top), ("two", stacked.zero_shot_combined), ("final", stacked.final))}
    assert ap["two"] == pytest.approx(ap["first"]) and ap["final"] > ap["two"] + 0.2


def same_order(run, other):
    return all([h.doc_id for h in hits] == [h.doc_id for h in other[q]] for q, hits in run.items())


def test_fallback_takes_the_trained_combination_with_the_first_stage_where_its_gain_is_proven():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    trained = Counting(dataset, knows=True)
    stacked, top = stack(dataset, Counting(dataset, knows=False), trained, folds, rule=FALLBACK)
    assert stacked.rule == FALLBACK
    assert all(second.verdict == KEPT and second.weight < 1.0 for _, second in stacked.choices.values())
    # its own combination with the first stage (not with the zero-shot one), only the dev queries tuned it
    expected = {}
    for fold in folds:
        tested = {q: top[q] for q in fold.test}
        expected.update(interpolate(tested, rerank(trained, dataset, tested), stacked.choices[fold.name][1].weight))
    assert set(trained.scored) - {q for fold in folds for q in (*fold.dev, *fold.test)} == set()
    assert same_order(stacked.final, expected) and not same_order(stacked.final, stacked.zero_shot_combined)


def test_fallback_keeps_the_zero_shot_combination_not_the_first_stage_where_the_trained_gain_is_unproven():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    stacked, top = stack(dataset, Counting(dataset, knows=True), Counting(dataset, knows=False), folds,
                         rule=FALLBACK)
    assert all(first.weight < 1.0 and second.verdict != KEPT for first, second in stacked.choices.values())
    assert same_order(stacked.final, stacked.zero_shot_combined) and not same_order(stacked.final, top)


def test_anchor_gives_the_trained_model_the_zero_shot_weight_and_tunes_nothing_on_it():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    trained = Counting(dataset, knows=True)
    stacked, top = stack(dataset, Counting(dataset, knows=False), trained, folds, rule=ANCHOR)
    assert stacked.rule == ANCHOR and not trained.scored  # no dev or training query scored to tune it
    expected = {}
    for fold in folds:
        first, second = stacked.choices[fold.name]
        assert second is first
        tested = {q: top[q] for q in fold.test}
        expected.update(interpolate(tested, rerank(trained, dataset, tested), first.weight))
    assert same_order(stacked.final, expected)


def test_anchor_with_an_informative_zero_shot_model_lets_the_trained_one_move_the_ranking():
    dataset = graded_dataset(40)
    folds = folds_of(dataset)
    stacked, top = stack(dataset, Counting(dataset, knows=True), Counting(dataset, knows=False), folds, rule=ANCHOR)
    assert all(first.weight < 1.0 for first, _ in stacked.choices.values())
    # the noise model took the zero-shot model's share: the result is neither the zero-shot combination nor BM25
    assert not same_order(stacked.final, stacked.zero_shot_combined) and not same_order(stacked.final, top)


def test_an_unknown_stacking_rule_is_refused_before_any_scoring():
    dataset = graded_dataset(40)
    zero_shot = Counting(dataset, knows=True)
    with pytest.raises(ValueError, match="unknown stacking rule 'replace'"):
        stack(dataset, zero_shot, Counting(dataset, knows=True), folds_of(dataset), rule="replace")
    assert not zero_shot.scored


@pytest.fixture
def noise_registered(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))  # empty, as a new user's
    monkeypatch.setattr(rerankers, "REGISTRY", Registry("re-ranker", "neural_rerank.rerankers", rerankers.BUILTIN))
    rerankers.register("noise", Noise)
    checkpoint = tmp_path / "noise.model"
    checkpoint.write_text("noise")
    return checkpoint


def test_the_command_stacks_on_the_packaged_bi_encoder_from_an_empty_home(noise_registered, monkeypatch, tmp_path):
    from pipeline.run import parse_config, run_pipeline

    for variable, value in {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(variable, value)  # nothing is downloaded
    dataset = graded_dataset(40)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    result = run_pipeline(parse_config(["--dataset", "graded-toy", "--reranker", "noise", "--model",
                                        str(noise_registered), "--zero-shot-base", "all-MiniLM-L6-v2",
                                        "--first-stage", "shipped", "--metrics", "AP", "--output-dir",
                                        str(tmp_path / "runs")]))
    assert result.run_path.stem.endswith("-on-" + result.run_path.stem.rsplit("-on-", 1)[1])
    assert "all-MiniLM-L6-v2" in result.run_path.stem and result.run_path.is_file()
    # noise never proves a gain on top of the zero-shot combination: the result is that combination
    assert result.zero_shot_combined is not None and set(result.run) == set(dataset.queries)
    for query_id, hits in result.run.items():
        assert [h.doc_id for h in hits] == [h.doc_id for h in result.zero_shot_combined[query_id]], query_id
    names = [e.name for e in result.comparison.evaluations]
    assert any(name.endswith("+ all-MiniLM-L6-v2") for name in names) and result.run_path.stem in names
    # the re-ranker alone is reported too (the same scores, not stacked)
    assert result.reranked is not None and any(name.endswith("-alone") for name in names)


def test_the_command_falls_back_to_the_zero_shot_combination_from_an_empty_home(noise_registered, monkeypatch,
                                                                                tmp_path):
    from pipeline.run import parse_config, run_pipeline

    dataset = graded_dataset(40)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    result = run_pipeline(parse_config(["--dataset", "graded-toy", "--reranker", "noise", "--model",
                                        str(noise_registered), "--zero-shot-base", "all-MiniLM-L6-v2",
                                        "--zero-shot-rule", "fallback", "--first-stage", "shipped", "--metrics",
                                        "AP", "--output-dir", str(tmp_path / "runs")]))
    assert "-or-" in result.run_path.stem and "all-MiniLM-L6-v2" in result.run_path.stem.rsplit("-or-", 1)[1]
    assert result.run_path.is_file()
    # noise proves no gain over the first stage: every fold keeps the zero-shot combination
    assert result.zero_shot_combined is not None and same_order(result.run, result.zero_shot_combined)


def test_the_command_with_anchor_and_the_zero_shot_model_itself_gives_the_zero_shot_combination(monkeypatch,
                                                                                                 tmp_path):
    """The bi-encoder given the zero-shot checkpoint under ``anchor``: the same scores at the same weight, so the
    result is the zero-shot combination, and the run is named for the rule."""
    from pipeline.run import parse_config, run_pipeline

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))  # empty, as a new user's
    dataset = graded_dataset(40)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    result = run_pipeline(parse_config(["--dataset", "graded-toy", "--reranker", "bi-encoder", "--model",
                                        "all-MiniLM-L6-v2", "--zero-shot-base", "all-MiniLM-L6-v2",
                                        "--zero-shot-rule", "anchor", "--first-stage", "shipped", "--metrics",
                                        "AP", "--output-dir", str(tmp_path / "runs")]))
    assert "-at-" in result.run_path.stem and result.run_path.is_file()
    assert result.zero_shot_combined is not None and same_order(result.run, result.zero_shot_combined)


@pytest.mark.parametrize("train_side", [[], ["--set", "train_side=query"]], ids=["both-sides", "query-side"])
def test_the_command_fine_tunes_per_fold_and_anchors_each_fold_at_the_zero_shot_weight(monkeypatch, tmp_path,
                                                                                       caplog, train_side):
    """The user's road of ``--zero-shot-rule anchor`` (what ``--reranker auto`` runs on Cranfield): from an empty
    home the bi-encoder is fine-tuned on each fold (a tiny encoder the test builds stands in for MiniLM, to keep
    the test short), both sides by default or the query side only, and each fold's test queries are its
    combination with the first stage at the weight logged for the zero-shot model."""
    import logging

    from pipeline.engine.fusion import DEFAULT_GRID
    from pipeline.run import parse_config, run_pipeline
    from helpers import make_tiny_encoder
    from rerankers.bi_encoder import BiEncoderReranker

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    encoder = make_tiny_encoder(tmp_path / "tiny")
    dataset = graded_dataset(40)
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    with caplog.at_level(logging.INFO, logger="pipeline.engine.stacking"):
        result = run_pipeline(parse_config([
            "--dataset", "graded-toy", "--reranker", "bi-encoder", "--set", f"encoder={encoder}",
            "--set", "max_doc_length=16", *train_side, "--zero-shot-base", "all-MiniLM-L6-v2", "--zero-shot-rule",
            "anchor", "--first-stage", "shipped", "--metrics", "AP", "--output-dir", str(tmp_path / "runs"),
            "--seed", "1"]))
    assert "-at-" in result.run_path.stem and result.run_path.is_file()
    models = list((tmp_path / "home").rglob("*.pt"))
    assert models, "no fold model was trained into the empty home"
    assert BiEncoderReranker.load(models[0]).model_config.train_side == ("query" if train_side else "both")
    weights = {float(record.getMessage().split("zero-shot model ")[1].split(" ")[0]) for record in caplog.records
               if "trained re-ranker with the first stage at that weight" in record.getMessage()}
    assert weights and weights <= set(DEFAULT_GRID)
    for query_id, hits in result.run.items():
        candidates = {query_id: dataset.first_stage[query_id]}
        assert any([h.doc_id for h in hits] == [h.doc_id for h in interpolate(
            candidates, {query_id: result.reranked[query_id]}, weight)[query_id]] for weight in weights), query_id


@pytest.mark.parametrize("extra, message", [
    (["--reranker", "none"], "--zero-shot-base needs --reranker"),
    (["--reranker", "knrm", "--interpolate", "0.3"], "it needs --interpolate auto"),
])
def test_stacking_without_a_re_ranker_or_a_tuned_weight_is_one_line_and_exit_2(extra, message, capsys):
    from pipeline.run import main

    assert main(["--dataset", "cranfield", "--zero-shot-base", "all-MiniLM-L6-v2", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("extra, message", [
    (["--zero-shot-rule", "fallback"], "--zero-shot-rule fallback needs --zero-shot-base MODEL"),
    (["--zero-shot-base", "all-MiniLM-L6-v2", "--zero-shot-rule", "replace"],
     "--zero-shot-rule: expected one of stack, fallback, anchor, got 'replace'"),
    (["--zero-shot-base", "all-MiniLM-L6-v2", "--zero-shot-rule", "anchor", "--reranker", "knrm"],
     "--zero-shot-rule anchor gives the re-ranker the zero-shot model's weight"),
])
def test_a_zero_shot_rule_without_a_base_or_unknown_is_one_line_and_exit_2(extra, message, capsys):
    from pipeline.run import main

    assert main(["--dataset", "cranfield", "--reranker", "bi-encoder", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_interpolating_with_weight_one_keeps_the_ranking_stacking_relies_on():
    dataset = graded_dataset(4)
    two_way = dict(dataset.first_stage)
    assert interpolate(two_way, {q: list(reversed(h)) for q, h in two_way.items()}, 1.0) == two_way


def test_one_model_trained_on_every_query_of_one_collection_anchors_another_from_an_empty_home(monkeypatch,
                                                                                                tmp_path, capsys):
    """The user's road of training on another collection's queries (NFCorpus's dev split for its test queries,
    docs/bi-encoder-fine-tuning.md): ``pipeline.train --folds 1`` fine-tunes one bi-encoder on every judged query
    of the first collection but a held-out share for early stopping, prints where it saved it, and
    ``pipeline.run --model`` that checkpoint with ``--zero-shot-rule anchor`` re-ranks every query of the second
    collection, each fold's queries at the weight tuned there for the zero-shot model; ``pipeline.run --folds 1``
    itself is refused (it would re-rank no query)."""
    from pipeline.engine.protocols import ALL_QUERIES
    from pipeline.run import main as run_main, parse_config, run_pipeline
    from pipeline.train import main as train_main
    from helpers import make_tiny_encoder
    from rerankers.bi_encoder import BiEncoderReranker

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))  # empty, as a new user's
    encoder = make_tiny_encoder(tmp_path / "tiny")
    source, target = graded_dataset(40), graded_dataset(30)
    datasets = {"graded-source": source, "graded-target": target}
    monkeypatch.setattr("pipeline.train.load_dataset", lambda name, mirror=None: datasets[name])
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: datasets[name])
    model_flags = ["--reranker", "bi-encoder", "--set", f"encoder={encoder}", "--set", "max_doc_length=16",
                   "--first-stage", "shipped", "--seed", "1"]
    assert train_main(["--dataset", "graded-source", "--folds", "1", *model_flags]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith(f"{ALL_QUERIES}: 34 train / 6 dev queries"), printed
    checkpoint = printed[0].rsplit(" -> ", 1)[1]
    assert BiEncoderReranker.load(checkpoint).encoder_config.encoder == str(encoder)

    result = run_pipeline(parse_config(["--dataset", "graded-target", "--reranker", "bi-encoder", "--model",
                                        checkpoint, "--zero-shot-base", "all-MiniLM-L6-v2", "--zero-shot-rule",
                                        "anchor", "--first-stage", "shipped", "--metrics", "AP", "--output-dir",
                                        str(tmp_path / "runs")]))
    assert "-at-" in result.run_path.stem and result.run_path.is_file() and set(result.run) == set(target.queries)
    assert list((tmp_path / "home").rglob("*.pt")) == [Path(checkpoint)], "the run trained a model of its own"

    # one command does both: --train-dataset trains (here: loads from the cache) that model and re-ranks with it
    monkeypatch.setattr("pipeline.engine.model_cache.load_dataset", lambda name, mirror=None: datasets[name])
    one_command = run_pipeline(parse_config(["--dataset", "graded-target", *model_flags, "--train-dataset",
                                             "graded-source", "--zero-shot-base", "all-MiniLM-L6-v2",
                                             "--zero-shot-rule", "anchor", "--metrics", "AP", "--output-dir",
                                             str(tmp_path / "runs")]))
    assert one_command.run_path.is_file() and one_command.run == result.run
    assert list((tmp_path / "home").rglob("*.pt")) == [Path(checkpoint)]

    # --reranker auto where the collection's measured best is such a model (NFCorpus: nfcorpus-dev)
    from pipeline.engine import presets

    monkeypatch.setitem(presets.MEASURED, target.name, presets.Preset(
        "bi-encoder", None, (f"encoder={encoder}", "max_doc_length=16"), zero_shot_base="all-MiniLM-L6-v2",
        zero_shot_rule=ANCHOR, train_dataset="graded-source"))
    auto = run_pipeline(parse_config(["--dataset", "graded-target", "--reranker", "auto", "--first-stage", "shipped",
                                      "--seed", "1", "--metrics", "AP", "--output-dir", str(tmp_path / "runs")]))
    assert auto.run == result.run and list((tmp_path / "home").rglob("*.pt")) == [Path(checkpoint)]

    capsys.readouterr()
    assert run_main(["--dataset", "graded-target", *model_flags, "--folds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--folds 1 trains one model on every judged query and re-ranks none" in err


def test_the_model_of_another_collection_trains_with_the_runs_threads(monkeypatch, tmp_path):
    """``--train-dataset`` trains after ``--threads`` is in force, as ``pipeline.train --folds 1`` does: a thread count
    changes float sums, so the same cache key would otherwise hold slightly other weights."""
    from pipeline.run import parse_config, run_pipeline

    class Stop(Exception):
        pass

    seen = {}

    def record(config):
        seen["threads"] = os.environ.get("PIPELINE_THREADS")
        raise Stop

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIPELINE_THREADS", "0")  # restored after the test, whatever the run sets
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: graded_dataset(30))
    monkeypatch.setattr("pipeline.run.transferred_model", record)
    with pytest.raises(Stop):
        run_pipeline(parse_config(["--dataset", "graded-target", "--reranker", "bi-encoder", "--train-dataset",
                                   "graded-source", "--first-stage", "shipped", "--threads", "1"]))
    assert seen == {"threads": "1"}
