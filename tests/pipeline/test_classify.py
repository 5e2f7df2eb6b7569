"""Pair classification (``python -m pipeline.classify``): the metrics against hand computations, the threshold
tuned on dev and only applied to test, the command line end to end on a tiny learnable pair collection, and
bad inputs refused with one ``error:`` line before any training."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import rerankers
from conftest import run_python, write
from helpers import NothingToLearn, one_torch_thread  # noqa: F401 (autouse fixture: one torch thread in this module)
from pipeline import classify
from pipeline.classify import (candidate_thresholds, classification_metrics, labelled_pairs, main, roc_auc,
                               tune_threshold)
from pipeline.engine.config import RunConfig
from pipeline.core.datasets import load_local
from pipeline.core.errors import ConfigError
from pipeline.core.plugins import Registry

#: a tiny KNRM: random 16-d embeddings, a few epochs (seconds on one thread)
TINY_KNRM = {"embeddings": "random", "embedding_dim": 16, "epochs": 6, "learning_rate": 0.1, "batch_size": 16}


def write_folder(folder: Path, rows: list[tuple[str, str, str, int]]) -> None:
    """One pair-format split from ``(a, b, query id, label)`` rows (doc ids become ``<qid>-<n>``)."""
    for name, column in (("a.toks", 0), ("b.toks", 1), ("id.txt", 2), ("sim.txt", 3)):
        write(folder / name, "".join(f"{row[column]}\n" for row in rows))


# ----------------------------------------------------------------------------------------------- metrics


def test_metrics_match_a_hand_computation():
    scores = np.array([0.9, 0.2, 0.6, 0.4, 0.1])
    labels = np.array([1, 1, 0, 0, 0])
    # above 0.5: the first and third pair -> tp 1, fp 1, fn 1, tn 2
    metrics = classification_metrics(scores, labels, 0.5)
    assert (metrics["tp"], metrics["fp"], metrics["tn"], metrics["fn"]) == (1, 1, 2, 1)
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["precision"] == pytest.approx(1 / 2)
    assert metrics["recall"] == pytest.approx(1 / 2)
    assert metrics["f1"] == pytest.approx(1 / 2)
    # negative class: 2 tn, 1 fn (predicted negative but positive), 1 fp -> F1 4 / 6
    assert metrics["macro_f1"] == pytest.approx((1 / 2 + 4 / 6) / 2)
    # a label above 1 is positive too; nothing called positive: precision 0, not a division by zero
    none_called = classification_metrics(scores, np.array([2, 1, 0, 0, 0]), 1.0)
    assert none_called["precision"] == 0.0 and none_called["recall"] == 0.0 and none_called["f1"] == 0.0
    assert none_called["accuracy"] == pytest.approx(3 / 5)


def test_auc_counts_ties_as_half_and_agrees_with_scikit_learn():
    # positives 0.9 and 0.5, negatives 0.5 and 0.1: 0.9 beats both, 0.5 beats 0.1 and ties 0.5 -> 3.5 / 4
    assert roc_auc(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0])) == pytest.approx(0.875)
    assert roc_auc(np.array([0.3, 0.2]), np.array([0, 0])) is None
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 20, 300).astype(float)  # many ties
    labels = (rng.random(300) < 0.3).astype(int)
    assert roc_auc(scores, labels) == pytest.approx(sklearn_metrics.roc_auc_score(labels, scores))


def test_the_f1_threshold_and_the_accuracy_threshold_differ_as_computed_by_hand():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    labels = np.array([1, 0, 0, 0, 1, 1, 0, 0])
    # F1 is best calling the top 6 positive (tp 3, fp 3: 6 / 9), accuracy calling only the top 1 (6 / 8)
    by_f1 = tune_threshold(scores, labels, "f1")
    assert by_f1["threshold"] == pytest.approx(0.35)
    assert by_f1["f1"] == pytest.approx(6 / 9) and by_f1["accuracy"] == pytest.approx(5 / 8)
    by_accuracy = tune_threshold(scores, labels, "accuracy")
    assert by_accuracy["threshold"] == pytest.approx(0.85)
    assert by_accuracy["accuracy"] == pytest.approx(6 / 8) and by_accuracy["f1"] == pytest.approx(1 / 2)


def test_f1_ties_go_to_the_better_accuracy():
    scores = np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    labels = np.array([1, 0, 0, 1, 0, 0])
    # top 1 (tp 1, fn 1: F1 2/3, accuracy 5/6) and top 4 (tp 2, fp 2: F1 2/3, accuracy 4/6) tie on F1
    tuned = tune_threshold(scores, labels, "f1")
    assert tuned["threshold"] == pytest.approx(5.5)
    assert tuned["f1"] == pytest.approx(2 / 3) and tuned["accuracy"] == pytest.approx(5 / 6)


def test_the_sweep_finds_what_trying_every_threshold_finds():
    rng = np.random.default_rng(7)
    for _ in range(30):
        scores = rng.integers(0, 12, 40).astype(float) / 3  # ties between pairs, some across classes
        labels = (rng.random(40) < 0.35).astype(int)
        for by, other in (("f1", "accuracy"), ("accuracy", "f1")):
            tuned = tune_threshold(scores, labels, by)
            tried = [classification_metrics(scores, labels, t) for t in candidate_thresholds(scores)]
            best = max((m[by], m[other]) for m in tried)
            assert (tuned[by], tuned[other]) == pytest.approx(best)
            again = classification_metrics(scores, labels, tuned["threshold"])
            assert (again["f1"], again["accuracy"]) == pytest.approx((tuned["f1"], tuned["accuracy"]))


def test_candidate_thresholds_cover_all_negative_and_all_positive():
    thresholds = candidate_thresholds(np.array([2.0, 1.0, 2.0, 3.0]))
    assert list(thresholds) == [3.0, 2.5, 1.5, 0.0]
    called = [int(np.sum(np.array([2.0, 1.0, 2.0, 3.0]) > t)) for t in thresholds]
    assert called == [0, 1, 3, 4]


# ------------------------------------------------------------------- the threshold comes from dev only


class TextScore(NothingToLearn):
    """A re-ranker whose score of a pair is the number its candidate text starts with: the tests choose
    every score, so the threshold and every metric can be known in advance."""

    name = "text-score"

    def score(self, query, docs):
        """The leading number of each candidate text."""
        return [float(doc.text.split()[0]) for doc in docs]


@pytest.fixture
def text_score(monkeypatch, tmp_path):
    """``text-score`` registered in a fresh registry (restored afterwards); models cached under tmp_path."""
    monkeypatch.setattr(rerankers, "REGISTRY", Registry("re-ranker", "neural_rerank.rerankers", rerankers.BUILTIN))
    rerankers.register("text-score", TextScore)
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))


def scored_rows(qid: str, scored: list[tuple[float, int]]) -> list[tuple[str, str, str, int]]:
    return [(f"question {qid}", f"{score} words of candidate {n}", qid, label) for n, (score, label) in enumerate(scored)]


@pytest.fixture
def fixed_scores(tmp_path) -> Path:
    """Dev's best threshold is 0.5 (perfect on dev); test's own best would be 0.775."""
    root = tmp_path / "fixed"
    write_folder(root / "train", scored_rows("q2", [(0.8, 1), (0.3, 0), (0.2, 0), (0.1, 0)]))
    write_folder(root / "dev", scored_rows("q0", [(0.9, 1), (0.6, 1), (0.4, 0), (0.1, 0)]))
    write_folder(root / "test", scored_rows("q1", [(0.95, 1), (0.85, 1), (0.7, 0), (0.55, 0), (0.3, 0)]))
    return root


def test_the_threshold_is_tuned_on_dev_and_only_applied_to_test(text_score, fixed_scores, tmp_path):
    output = tmp_path / "out" / "result.json"
    report = classify.classify(RunConfig(dataset=str(fixed_scores), reranker="text-score"), [1], "cmd", output)
    seed = report["per_seed"][0]
    assert seed["f1_threshold"]["threshold"] == pytest.approx(0.5)
    assert seed["f1_threshold"]["dev_f1"] == 1.0 and seed["dev"]["name"] == "dev split 'dev'"
    # on test, 0.5 calls 4 of 5 pairs positive: tp 2, fp 2, tn 1
    test = seed["f1_threshold"]["test"]
    assert (test["tp"], test["fp"], test["tn"], test["fn"]) == (2, 2, 1, 0)
    assert test["accuracy"] == pytest.approx(3 / 5) and test["f1"] == pytest.approx(4 / 6)
    assert test["precision"] == pytest.approx(0.5) and test["recall"] == 1.0
    # test's own best threshold would have been perfect: it was not used
    test_scores, test_labels = np.array([0.95, 0.85, 0.7, 0.55, 0.3]), np.array([1, 1, 0, 0, 0])
    assert tune_threshold(test_scores, test_labels)["threshold"] == pytest.approx(0.775)
    assert seed["test_auc"] == 1.0
    # majority class of the training pairs (3 of 4 negative): all negative, 3 of 5 right on test
    assert report["majority"]["class"] == 0 and report["majority"]["test"]["accuracy"] == pytest.approx(3 / 5)
    assert report["test"] == {"name": "test split 'test'", "pairs": 5, "positives": 2}
    written = json.loads(output.read_text())
    assert written["command"] == "cmd" and written["summary"]["f1_threshold"]["f1"]["mean"] == pytest.approx(4 / 6)
    assert "| text-score, threshold maximising dev F1 (0.5000) | 0.6000 | 0.5000 | 1.0000 | 0.6667 |" \
        in report["markdown"]


def test_without_a_dev_split_the_threshold_comes_from_held_out_training_queries(text_score, tmp_path):
    root = tmp_path / "nodev"
    train = [row for q in range(6) for row in scored_rows(f"t{q}", [(0.8, 1), (0.4, 0), (0.2, 0)])]
    write_folder(root / "train", train)
    write_folder(root / "test", scored_rows("q1", [(0.9, 1), (0.1, 0)]))
    report = classify.classify(RunConfig(dataset=str(root), reranker="text-score"), [3])
    dev = report["per_seed"][0]["dev"]
    assert dev["name"] == "dev: 1 training queries held out (no dev split)" and dev["pairs"] == 3
    assert report["per_seed"][0]["f1_threshold"]["threshold"] == pytest.approx(0.6)


def test_labels_and_pairs_come_from_the_pair_data(fixed_scores):
    dataset = load_local(fixed_scores)
    pairs = labelled_pairs(dataset, dataset.splits["test"], "test")
    assert pairs.pairs[0] == ("q1", "q1-0") and list(pairs.labels) == [1, 1, 0, 0, 0]


# ---------------------------------------------------------------------------------- the command line


def learnable_rows(rng: random.Random, first_query: int, queries: int) -> list[tuple[str, str, str, int]]:
    """Label 1 exactly when the candidate shares words with the question (two of its three; random filler
    otherwise: the negatives share none)."""
    filler = [f"w{n}" for n in range(40)]
    rows = []
    for number in range(first_query, first_query + queries):
        question = [f"k{number}a", f"k{number}b", f"k{number}c"]
        for position in range(8):
            words = rng.sample(filler, 5)
            label = int(position < 2)
            if label:
                words += rng.sample(question, 2)
            rng.shuffle(words)
            rows.append((" ".join(question), " ".join(words), f"q{number}", label))
    return rows


@pytest.fixture(scope="module")
def learnable(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("learnable")
    rng = random.Random(5)
    write_folder(root / "train", learnable_rows(rng, 0, 16))
    write_folder(root / "dev", learnable_rows(rng, 16, 4))
    write_folder(root / "test", learnable_rows(rng, 20, 4))
    return root


def test_the_command_line_trains_classifies_and_writes_the_result(learnable, tmp_path):
    settings = [f"--set={k}={v}" for k, v in TINY_KNRM.items()]
    output = tmp_path / "pairs" / "tiny-knrm.json"
    command = ["-m", "pipeline.classify", "--dataset", str(learnable), "--reranker", "knrm", *settings,
               "--seed", "1", "2", "--threads", "1", "--output", str(output)]
    env = {"PIPELINE_MODEL_DIR": tmp_path / "models", "TQDM_DISABLE": "1"}
    done = run_python(command, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| majority class (negative, of the training pairs) | 0.7500 |" in done.stdout
    assert "| knrm, threshold maximising dev F1 (" in done.stdout and "training knrm" in done.stderr
    report = json.loads(output.read_text())
    assert report["seeds"] == [1, 2] and len(report["per_seed"]) == 2
    assert report["command"].startswith("python -m pipeline.classify --dataset ")
    assert report["test"] == {"name": "test split 'test'", "pairs": 32, "positives": 8}
    # the signal (a shared word) is learnt: far above the majority class's F1 of 0 and AUC of 0.5
    assert report["summary"]["auc"]["mean"] > 0.9
    assert report["summary"]["f1_threshold"]["f1"]["mean"] > 0.7
    # the same command again loads the cached models and gives the same numbers
    again = run_python(command, **env)
    assert again.returncode == 0 and "loaded" in again.stderr and "training knrm" not in again.stderr
    assert json.loads(output.read_text())["summary"] == report["summary"]


def test_seeds_repeat_and_extend():
    parser = classify.build_parser()
    arguments = parser.parse_args(["--dataset", "wikiqa", "--reranker", "knrm", "--seed", "1", "2", "--seed", "3"])
    assert arguments.seeds == [1, 2, 3]
    with pytest.raises(ConfigError, match="--metrics"):  # a pipeline.run flag that means nothing here
        parser.parse_args(["--dataset", "wikiqa", "--reranker", "knrm", "--metrics", "AP"])
    with pytest.raises(ConfigError, match="required: --dataset"):  # no default collection: it must be pair data
        parser.parse_args(["--reranker", "knrm"])


# ----------------------------------------------------------------------------------------- bad inputs


def refused(capsys, monkeypatch, tmp_path, argv: list[str]) -> str:
    """Run the command in process; it must exit 2 with one ``error:`` line and train nothing."""
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: "), error
    assert not (tmp_path / "models").exists()  # refused before any training
    return error[0]


def test_a_folder_without_labels_is_refused(learnable, tmp_path, capsys, monkeypatch):
    root = tmp_path / "nolabels"
    for split in ("train", "dev", "test"):
        for name in ("a.toks", "b.toks", "id.txt"):
            write(root / split / name, (learnable / split / name).read_text())
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(root), "--reranker", "knrm"])
    assert "lacks sim.txt" in message


def test_a_missing_split_and_an_unknown_reranker_are_refused(learnable, tmp_path, capsys, monkeypatch):
    message = refused(capsys, monkeypatch, tmp_path,
                      ["--dataset", str(learnable), "--reranker", "knrm", "--split", "raw-test"])
    assert "has no split 'raw-test'" in message and "dev, test, train" in message
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(learnable), "--reranker", "no-such"])
    assert "unknown re-ranker 'no-such'" in message
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(learnable), "--reranker", "knrm",
                                                      "--set", "no_such_option=1"])
    assert "no_such_option" in message


def test_a_dev_split_of_one_class_is_refused(learnable, tmp_path, capsys, monkeypatch):
    root = tmp_path / "onesided"
    for split in ("train", "test"):
        for name in ("a.toks", "b.toks", "id.txt", "sim.txt"):
            write(root / split / name, (learnable / split / name).read_text())
    rows = [row for row in learnable_rows(random.Random(1), 30, 2) if row[3] == 0]
    write_folder(root / "dev", rows)
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(root), "--reranker", "knrm"])
    assert "dev split 'dev'" in message and "without a single positive" in message


def test_data_without_pairs_or_without_a_test_split_is_refused(learnable, tmp_path, capsys, monkeypatch):
    trec = tmp_path / "trec"
    write(trec / "topics.txt", "<top>\n<num> 1\n<title> wind tunnel\n</top>\n")
    write(trec / "qrels.txt", "1 0 d1 1\n")
    write(trec / "docs.jsonl", '{"id": "d1", "contents": "wind tunnel tests"}\n')
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(trec), "--reranker", "knrm"])
    assert "is not pair data" in message
    single = tmp_path / "single"
    for name in ("a.toks", "b.toks", "id.txt", "sim.txt"):
        write(single / name, (learnable / "train" / name).read_text())
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(single), "--reranker", "knrm"])
    assert "has no test split" in message


def test_an_output_that_cannot_be_written_is_refused_before_training(learnable, tmp_path, capsys, monkeypatch):
    message = refused(capsys, monkeypatch, tmp_path, ["--dataset", str(learnable), "--reranker", "knrm",
                                                      "--output", str(tmp_path)])
    assert "is a directory" in message


def test_a_saved_model_is_classified_without_training_and_a_missing_one_is_refused(text_score, fixed_scores,
                                                                                    tmp_path):
    checkpoint = tmp_path / "saved.pt"
    TextScore().save(checkpoint)
    report = classify.classify(RunConfig(dataset=str(fixed_scores), reranker="text-score", model=str(checkpoint)))
    assert report["per_seed"][0]["f1_threshold"]["threshold"] == pytest.approx(0.5)
    assert not (tmp_path / "models").exists()  # nothing trained
    with pytest.raises(ConfigError, match="no such checkpoint file"):
        classify.classify(RunConfig(dataset=str(fixed_scores), reranker="text-score", model=str(tmp_path / "no.pt")))
