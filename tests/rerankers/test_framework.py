"""The re-ranking framework: text, embeddings, trainer and losses, protocols, checkpoints, determinism.

Uses a small synthetic pair-format collection (relevant candidates share the query's rare words) and a
tiny HCAN so that every test runs in seconds on two cores.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import TrainingInterrupted, interrupt_after_epoch
from pipeline.core.datasets import load_dataset, load_local
from pipeline.core.errors import CheckpointError, DataFormatError, PipelineError
from pipeline.core.evaluation import evaluate
from pipeline.core.vocabulary import IDFStatistics, Vocabulary, tokenize
from pipeline.core.records import Query
from pipeline.engine.protocols import Fold, kfold, make_protocol
from rerankers.training.data import RankingData, rerank_candidates
from rerankers.training.config import TrainConfig
from pipeline.core.options import apply_overrides, parse_overrides
from pipeline.engine.model_cache import cached_checkpoint, checkpoint_path
from rerankers.training.optim import learning_rate_factor
from rerankers import available, reranker_class
from rerankers.embeddings import glove_6b_50d, load_embeddings, text_vectors
from infra.checkpoints import save_checkpoint
from rerankers.hcan import HCANReranker
from rerankers.training.loop import Trainer
from tests.helpers import (  # noqa: F401
    FILLER_WORDS as FILLER, TINY_HCAN as TINY, TOPICS, assert_garbage_and_missing_checkpoints_fail, train_tiny,
    write_pairs, write_tiny_pairs,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return write_tiny_pairs(tmp_path_factory.mktemp("tinypairs"))


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_local(tiny_dir)


# ----------------------------------------------------------------------------------------------- text


def test_tokenizer_keeps_pretokenized_tokens():
    pretokenized = "iran and water shortage : in burning rage @url via @names , 0.8 % do n't"
    assert tokenize(pretokenized) == pretokenized.split()
    assert tokenize("Wing (in a slipstream).") == ["wing", "(", "in", "a", "slipstream", ")", "."]


def test_vocabulary_is_deterministic_and_maps_oov():
    texts = [["b", "a", "b"], ["c", "a", "b"]]
    vocab = Vocabulary.build(texts)
    assert vocab.tokens == ["<pad>", "<oov>", "b", "a", "c"]
    assert Vocabulary.build(list(reversed(texts))).tokens == vocab.tokens
    assert vocab.encode(["a", "zzz"]) == [3, 1]
    with pytest.raises(ValueError):
        Vocabulary(["a", "b"])


def test_idf_phrases_and_fallback():
    docs = [["new", "york", "city"], ["new", "car"], ["york", "new"], ["city"]]
    stats = IDFStatistics.build(docs, phrases=[("new", "york")], max_n=2)
    assert stats.df("new") == 3 and stats.df(("new", "york")) == 1
    # an uncounted phrase falls back to its rarest word's document frequency
    assert stats.df(("york", "city")) == 2
    assert stats.idf(("new", "york")) > stats.idf("new")
    assert IDFStatistics.from_json(json.loads(json.dumps(stats.to_json()))) == stats


# ------------------------------------------------------------------------------------------ embeddings


def test_glove_rows_are_the_real_vectors():
    vocab = Vocabulary.build([["the", "water", "qqqzzzunknown"]])
    matrix = glove_6b_50d(vocab, seed=0)
    assert matrix.shape == (len(vocab), 50)
    assert np.allclose(matrix[vocab.id("the")][:3], [0.418, 0.24968, -0.41242], atol=1e-5)
    assert np.all(matrix[0] == 0)
    unknown = matrix[vocab.id("qqqzzzunknown")]
    assert unknown.min() >= 0.0 and unknown.max() <= 0.1


def test_text_vectors_file_and_its_errors(tmp_path):
    vocab = Vocabulary.build([["alpha", "beta"]])
    good = tmp_path / "vectors.txt"
    good.write_text("2 3\nalpha 1 2 3\ngamma 4 5 6\n")
    matrix = text_vectors(vocab, good)
    assert matrix.shape == (4, 3) and list(matrix[vocab.id("alpha")]) == [1, 2, 3]
    bad = tmp_path / "bad.txt"
    bad.write_text("alpha 1 2 3\nbeta 1 2\n")
    with pytest.raises(DataFormatError, match=r"bad\.txt:2: expected 3 numbers"):
        text_vectors(vocab, bad)
    with pytest.raises(PipelineError, match="unknown embeddings"):
        load_embeddings("no-such-source", vocab)


def test_oov_rows_positive_by_default_symmetric_on_request():
    words = [[f"unknownword{i}" for i in range(200)]]
    vocab = Vocabulary.build(words)
    rows = lambda init: load_embeddings("random", vocab, dim=50, seed=3, oov_init=init)[2:]  # skip pad, OOV ids
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)
    mean_cosine = lambda m: float((unit(m) @ unit(m).T)[np.triu_indices(len(m), 1)].mean())
    positive, symmetric = rows("positive"), rows("symmetric")
    assert positive.min() >= 0.0 and positive.max() <= 0.1
    assert mean_cosine(positive) > 0.7  # two unknown words look alike to a cosine ...
    assert abs(mean_cosine(symmetric)) < 0.05  # ... unless their vectors are centred
    assert np.abs(symmetric).max() <= np.sqrt(3 / 50) and symmetric.min() < 0
    with pytest.raises(PipelineError, match="oov_init"):
        load_embeddings("random", vocab, dim=50, oov_init="zeros")


# ------------------------------------------------------------------------------------------- options


def test_overrides_route_to_configs_and_reject_unknown():
    reranker = HCANReranker.from_options({"matching": "rm", "epochs": "3", "max_doc_length": "20"})
    assert reranker.model_config.matching == "rm"
    assert reranker.train_config.epochs == 3
    assert reranker.text_config.max_doc_length == 20
    with pytest.raises(PipelineError, match="unknown model option 'nope'"):
        HCANReranker.from_options({"nope": 1})
    with pytest.raises(PipelineError, match="expected an integer"):
        HCANReranker.from_options({"epochs": "many"})
    with pytest.raises(ValueError):
        HCANReranker.from_options({"encoder": "sideways"})
    with pytest.raises(PipelineError, match="unknown loss"):
        apply_overrides([TrainConfig()], {"loss": "magic"})


def test_config_file_then_set(tmp_path):
    path = tmp_path / "hcan.yaml"
    path.write_text("matching: sm\nepochs: 4\n")
    assert parse_overrides(["epochs=2"], str(path)) == {"matching": "sm", "epochs": "2"}
    with pytest.raises(PipelineError, match="expected name=value"):
        parse_overrides(["epochs"])


def test_registry_lists_hcan():
    assert available()[0] == "none" and "hcan" in available()
    assert reranker_class("hcan") is HCANReranker
    with pytest.raises(PipelineError, match="unknown re-ranker"):
        reranker_class("bert-large-magic")


# ----------------------------------------------------------------------------------------- protocols


def test_kfold_tests_every_query_once_and_keeps_splits_disjoint():
    queries = [f"q{i}" for i in range(23)]
    folds = kfold(queries, 5, seed=3)
    tested = [q for fold in folds for q in fold.test]
    assert sorted(tested) == sorted(queries)
    for fold in folds:
        assert not set(fold.train) & set(fold.test)
        assert not set(fold.dev) & set(fold.test)
        assert not set(fold.dev) & set(fold.train)
        assert set(fold.train) | set(fold.dev) | set(fold.test) == set(queries)


def test_one_fold_trains_on_every_query_but_a_held_out_share_and_tests_none():
    queries = [f"q{i}" for i in range(23)]
    fold, = kfold(queries, 1, seed=3)
    assert fold.name == "all" and fold.test == []
    assert not set(fold.train) & set(fold.dev) and set(fold.train) | set(fold.dev) == set(queries)
    assert len(fold.dev) == round(0.15 * 23) and kfold(queries, 1, seed=3) == [fold]
    with pytest.raises(PipelineError, match="k >= 1"):
        kfold(queries, 0, seed=3)


def test_protocol_uses_own_splits(tiny):
    fold, = make_protocol(tiny, None, seed=1)
    assert set(fold.train) == set(tiny.splits["train"]) and set(fold.dev) == set(tiny.splits["dev"])
    assert set(fold.test) == set(tiny.splits["test"])
    with pytest.raises(PipelineError, match="cannot test on the training split"):
        make_protocol(tiny, "train", seed=1)


@pytest.mark.slow
def test_microblog_protocol_is_leave_one_year_out(data_root):
    dataset = load_dataset("microblog")
    fold, = make_protocol(dataset, "2013", seed=42)
    training_years = set(dataset.splits["2011"] + dataset.splits["2012"] + dataset.splits["2014"])
    assert set(fold.test) == set(dataset.splits["2013"])
    judged = {qrel.query_id for qrel in dataset.qrels}
    assert set(fold.train) | set(fold.dev) == training_years & judged   # topic MB076 has no judgment
    assert training_years - judged == {"76"}
    assert len(fold.dev) == round(0.15 * len(training_years))
    assert make_protocol(dataset, "2013", seed=42)[0] == fold


@pytest.mark.slow
def test_trecqa_raw_test_validates_on_raw_dev(data_root):
    dataset = load_dataset("trecqa")
    fold, = make_protocol(dataset, "raw-test", seed=1)
    assert set(fold.dev) == set(dataset.splits["raw-dev"]) and set(fold.train) == set(dataset.splits["train"])


# -------------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("loss", ["pointwise", "hinge", "softmax"])
def test_training_lowers_the_loss_and_ranks_relevant_first(tiny, loss):
    reranker, report, fold = train_tiny(tiny, use_dev=False, loss=loss, epochs=12)
    losses = [epoch.loss for epoch in report.epochs]
    assert losses[-1] < losses[0] * 0.8, losses
    train = RankingData.from_dataset(tiny, fold.train, tiny.first_stage)
    ap = evaluate(rerank_candidates(reranker, train), train.qrels_list(), "AP").aggregate["AP"]
    assert ap > 0.8, ap


def test_early_stopping_keeps_the_best_dev_epoch(tiny):
    _, report, _ = train_tiny(tiny, epochs=6, patience=1)
    scores = [e.dev_score for e in report.epochs]
    assert report.best_dev_score == max(scores)
    assert report.epochs[report.best_epoch - 1].dev_score == report.best_dev_score
    if report.stopped_early:
        assert len(report.epochs) < 6


def test_learning_rate_factor_warms_up_then_decays_linearly():
    linear = [learning_rate_factor(step, 10, "linear", 0.2) for step in range(10)]
    assert linear[:2] == pytest.approx([0.5, 1.0])              # 2 warm-up steps (20 % of 10)
    assert linear[2:] == pytest.approx([(10 - s) / 8 for s in range(2, 10)])
    assert linear[-1] > 0                                        # the last step still learns
    constant = [learning_rate_factor(step, 10, "constant", 3) for step in range(10)]
    assert constant == pytest.approx([1 / 3, 2 / 3] + [1.0] * 8)  # warm-up given as 3 steps
    assert [learning_rate_factor(s, 4, "constant", 0.0) for s in range(4)] == [1.0] * 4
    assert learning_rate_factor(0, 1, "linear", 0.5) == 1.0      # a one-step run cannot warm up


def test_schedule_options_are_validated():
    with pytest.raises(PipelineError, match="unknown schedule 'cosine'"):
        TrainConfig(schedule="cosine")
    with pytest.raises(PipelineError, match="warmup must be >= 0"):
        TrainConfig(warmup=-1)
    config = TrainConfig()
    apply_overrides([config], parse_overrides(["schedule=linear", "warmup=0.1"]))
    assert (config.schedule, config.warmup) == ("linear", 0.1)


def test_parameter_groups_give_the_head_its_own_learning_rate():
    import torch.nn as nn

    from rerankers.training.optim import parameter_groups

    module = nn.ModuleDict({"encoder": nn.Linear(3, 3), "head": nn.Linear(3, 1), "frozen": nn.Linear(3, 1)})
    module["frozen"].weight.requires_grad_(False)
    single, = parameter_groups(module, ("encoder.",), 1e-5)
    assert single["lr"] == 1e-5 and len(single["params"]) == 5          # every trainable parameter, one rate
    encoder, head = parameter_groups(module, ("encoder.",), 1e-5, 1e-3)
    assert encoder["lr"] == 1e-5 and head["lr"] == 1e-3
    assert {id(p) for p in encoder["params"]} == {id(p) for p in module["encoder"].parameters()}
    assert {id(p) for p in head["params"]} == {id(module["head"].weight), id(module["head"].bias),
                                              id(module["frozen"].bias)}
    with pytest.raises(PipelineError, match="around a pre-trained encoder"):
        parameter_groups(module, (), 1e-5, 1e-3)
    with pytest.raises(PipelineError, match="found 0 and 5"):
        parameter_groups(module, ("bert.",), 1e-5, 1e-3)
    with pytest.raises(PipelineError, match="head_learning_rate must be >= 0"):
        TrainConfig(head_learning_rate=-1e-4)


def test_head_learning_rate_is_refused_for_a_model_without_a_pretrained_encoder(tiny):
    with pytest.raises(PipelineError, match="head_learning_rate applies to re-rankers around a pre-trained"):
        train_tiny(tiny, epochs=1, head_learning_rate=1e-3)


def test_positive_pool_keeps_the_positives_among_the_candidates():
    from pipeline.core.records import Doc, Query, ScoredDoc
    from rerankers.training.loop import Trainer

    docs = {d: Doc(d, f"text {d}") for d in ("r1", "r2", "r3", "n1", "n2")}
    data = RankingData({"q": Query("q", "query")},
                       {"q": [ScoredDoc("q", "r2", 3.0), ScoredDoc("q", "n1", 2.0), ScoredDoc("q", "n2", 1.0)]},
                       {"q": {"r1": 1, "r2": 2, "r3": 1, "n1": 0}}, docs)
    assert data.positives("q") == ["r1", "r2", "r3"]                # every judged-relevant document
    assert data.positives("q", "candidates") == ["r2"]               # only the retrieved one
    assert data.negatives("q") == ["n1", "n2"]
    for pool, expected in (("all", {"r1", "r2", "r3"}), ("candidates", {"r2"})):
        config = TrainConfig(loss="hinge", negatives=2, positive_pool=pool)
        units = Trainer(None, config).epoch_units(data, random.Random(0))
        assert {u[1][0].doc_id for u in units} == expected and len(units) == 2 * len(expected)
        assert {u[1][1].doc_id for u in units} <= {"n1", "n2"}
    with pytest.raises(PipelineError, match="unknown positive_pool 'judged'"):
        TrainConfig(positive_pool="judged")


def test_trainer_follows_the_learning_rate_schedule(tiny):
    _, constant, _ = train_tiny(tiny, use_dev=False, epochs=3)
    assert [e.learning_rate for e in constant.epochs] == [0.01] * 3
    _, linear, _ = train_tiny(tiny, use_dev=False, epochs=3, schedule="linear", warmup=0.1)
    rates = [e.learning_rate for e in linear.epochs]
    assert rates[0] > rates[1] > rates[2] > 0, rates
    steps_per_epoch = -(-linear.epochs[0].examples // TINY["batch_size"])
    total = 3 * steps_per_epoch
    assert rates[-1] == pytest.approx(0.01 * learning_rate_factor(total - 1, total, "linear", 0.1))


def test_same_seed_same_scores_other_seed_other_scores(tiny):
    first, _, fold = train_tiny(tiny, seed=5, epochs=2)
    second, _, _ = train_tiny(tiny, seed=5, epochs=2)
    third, _, _ = train_tiny(tiny, seed=6, epochs=2)
    test = RankingData.from_dataset(tiny, fold.test, tiny.first_stage)
    query = next(iter(test.queries.values()))
    docs = [test.docs[h.doc_id] for h in test.candidates[query.query_id]]
    assert first.score(query, docs) == second.score(query, docs)
    assert first.score(query, docs) != third.score(query, docs)


def test_reranking_keeps_exactly_the_candidates(tiny):
    from pipeline.engine.stages import rerank

    reranker, _, fold = train_tiny(tiny, epochs=1)
    first = {q: tiny.first_stage[q] for q in fold.test}
    final = rerank(reranker, tiny, first)
    for query_id, hits in first.items():
        assert sorted(h.doc_id for h in final[query_id]) == sorted(h.doc_id for h in hits)


# ------------------------------------------------------------------------------------------ checkpoints


def test_save_load_round_trip_gives_identical_scores(tiny, tmp_path):
    reranker, _, fold = train_tiny(tiny, epochs=1)
    path = tmp_path / "model.pt"
    reranker.save(path)
    loaded = HCANReranker.load(path)
    assert loaded.vocab.tokens == reranker.vocab.tokens
    assert loaded.model_config == reranker.model_config
    query = tiny.queries[fold.test[0]]
    docs = [tiny.doc_store()[h.doc_id] for h in tiny.first_stage[query.query_id]]
    assert loaded.score(query, docs) == reranker.score(query, docs)
    payload = torch.load(path, weights_only=True)
    assert payload["versions"]["torch"] == str(torch.__version__)
    assert not list(tmp_path.glob(".*tmp*"))


def test_bad_checkpoints_are_clear_errors(tiny, tmp_path):
    assert_garbage_and_missing_checkpoints_fail(HCANReranker, tmp_path)
    reranker, _, _ = train_tiny(tiny, epochs=1)
    good = tmp_path / "good.pt"
    reranker.save(good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated.pt"):
        HCANReranker.load(truncated)

    class OtherModel(HCANReranker):
        name = "other"

    with pytest.raises(CheckpointError, match="holds a 'hcan' model, not 'other'"):
        OtherModel.load(good)
    payload = torch.load(good, weights_only=True)
    payload["model_config"]["num_filters"] = 32  # weights no longer fit the config
    mismatched = tmp_path / "mismatched.pt"
    save_checkpoint(mismatched, payload)
    with pytest.raises(CheckpointError, match="weights do not fit"):
        HCANReranker.load(mismatched)
    renamed = torch.load(good, weights_only=True)
    renamed["model_config"]["max_query_len"] = renamed["model_config"].pop("query_slots")  # the option's old name
    old_name = tmp_path / "old-name.pt"
    save_checkpoint(old_name, renamed)
    assert HCANReranker.load(old_name).model_config.query_slots == reranker.model_config.query_slots
    edited = tmp_path / "edited.pt"
    torch.save(payload, edited)  # changed after its digest was taken
    with pytest.raises(CheckpointError, match="edited.pt: checkpoint is damaged"):
        HCANReranker.load(edited)


def flip_a_weight_byte(path: Path) -> None:
    """Flip one byte inside the largest tensor of a ``torch.save`` archive, leaving the zip structure intact."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_length, extra_length = int.from_bytes(raw[entry.header_offset + 26:entry.header_offset + 28], "little"), \
        int.from_bytes(raw[entry.header_offset + 28:entry.header_offset + 30], "little")
    raw[entry.header_offset + 30 + name_length + extra_length + entry.file_size // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def test_a_flipped_bit_in_the_weights_is_found_although_torch_loads_the_file(tiny, tmp_path):
    reranker, _, _ = train_tiny(tiny, epochs=1)
    path = tmp_path / "model.pt"
    reranker.save(path)
    before = torch.load(path, weights_only=True)["state_dict"]
    flip_a_weight_byte(path)
    after = torch.load(path, weights_only=True)["state_dict"]  # torch does not notice
    assert any(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(CheckpointError, match="model.pt: checkpoint is damaged"):
        HCANReranker.load(path)


def test_a_damaged_or_foreign_training_state_is_refused(tiny, tmp_path):
    reranker, _, _ = train_tiny(tiny, epochs=1)
    model = tmp_path / "model.pt"
    reranker.save(model)
    trainer = Trainer(reranker, reranker.train_config, reranker.seed)
    state = tmp_path / "model.pt.training-state"
    trainer.save_state(state, {"epoch": 1, "module": reranker.module.state_dict(),
                               "generators": trainer.generator_states(random.Random(1))})
    assert trainer.load_state(state)["epoch"] == 1
    flip_a_weight_byte(state)
    with pytest.raises(CheckpointError, match="training state is damaged"):
        trainer.load_state(state)
    with pytest.raises(CheckpointError, match="not a training state"):
        trainer.load_state(model)  # a model is not a training state ...
    trainer.save_state(state, {"epoch": 1, "module": reranker.module.state_dict()})
    with pytest.raises(CheckpointError, match="unknown checkpoint format"):
        HCANReranker.load(state)  # ... and a training state is not a model


def test_a_checkpoint_is_found_under_another_test_splits_name(tiny, tmp_path, monkeypatch):
    """WikiQA's test and test-filtered share training and dev queries: one training serves both."""
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path))
    train, dev, test = tiny.splits["train"], tiny.splits["dev"], tiny.splits["test"]
    for_test = checkpoint_path(tiny, "hcan", {}, Fold("test", train, dev, test), 1, "shipped", 100)
    for_filtered = checkpoint_path(tiny, "hcan", {}, Fold("test-filtered", train, dev, test[:1]), 1, "shipped", 100)
    other_dev = checkpoint_path(tiny, "hcan", {}, Fold("test-filtered", train, dev[:1], test), 1, "shipped", 100)
    other_seed = checkpoint_path(tiny, "hcan", {}, Fold("test-filtered", train, dev, test), 2, "shipped", 100)
    assert for_test != for_filtered
    assert cached_checkpoint(for_filtered) is None  # nothing saved yet
    for_test.parent.mkdir(parents=True)
    for_test.write_bytes(b"model")
    for_test.with_name(other_dev.name + ".training-state").write_bytes(b"unfinished")
    assert cached_checkpoint(for_test) == for_test
    assert cached_checkpoint(for_filtered) == for_test
    assert cached_checkpoint(other_dev) is None  # another training, and an unfinished one is no model
    assert cached_checkpoint(other_seed) is None


# -------------------------------------------------------------------------------------------------- CLI


def test_pipeline_run_trains_caches_and_is_deterministic(tiny_dir, tmp_path):
    settings = [f"--set={k}={v}" for k, v in {**TINY, "epochs": 2}.items()]
    command = [sys.executable, "-m", "pipeline.run", "--dataset", str(tiny_dir), "--reranker", "hcan",
               "--metrics", "AP", *settings]
    env_models = {"PIPELINE_MODEL_DIR": str(tmp_path / "models"), "TQDM_DISABLE": "1"}
    import os

    env = {**os.environ, **env_models}
    outputs = []
    for run in ("a", "b"):
        done = subprocess.run([*command, "--output-dir", str(tmp_path / run)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done)
    assert "training hcan" in outputs[0].stderr and "loaded" in outputs[1].stderr
    files = [next((tmp_path / run).glob("*.run")).read_bytes() for run in ("a", "b")]
    assert files[0] == files[1]
    lines = files[0].decode().splitlines()
    assert {line.split()[0] for line in lines} == {"test/q0", "test/q1"}  # only the test split is re-ranked
    assert "| tinypairs" in outputs[0].stdout and "(baseline)" in outputs[0].stdout


def test_pipeline_train_writes_the_checkpoint_pipeline_run_loads(tiny_dir, tmp_path):
    import os

    settings = [f"--set={k}={v}" for k, v in {**TINY, "epochs": 1}.items()]
    env = {**os.environ, "PIPELINE_MODEL_DIR": str(tmp_path / "models"), "TQDM_DISABLE": "1"}
    common = ["--dataset", str(tiny_dir), "--reranker", "hcan", *settings]
    trained = subprocess.run([sys.executable, "-m", "pipeline.train", *common], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "test: " in trained.stdout and "dev " in trained.stdout
    again = subprocess.run([sys.executable, "-m", "pipeline.train", *common], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert "cached" in again.stdout
    # by default the cached model's scores are mixed with the first stage's, the weight tuned on dev
    tuned = subprocess.run([sys.executable, "-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "runs")],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert tuned.returncode == 0 and "loaded" in tuned.stderr and "training hcan" not in tuned.stderr
    assert "interpolation weight" in tuned.stderr
    plain_run, = (tmp_path / "runs").glob("*hcan-set.*-alone.run")
    tuned_run, = (tmp_path / "runs").glob("*hcan-set.??????.run")
    # three rows: the first stage, the re-ranker alone and the combination
    table_rows = [line.split("|")[1].strip() for line in tuned.stdout.splitlines() if line.startswith("|")]
    assert plain_run.stem in table_rows and tuned_run.stem in table_rows, tuned.stdout
    assert any("(baseline)" in row for row in table_rows)
    # --interpolate none: the re-ranker's own scores, the same as the alone run of the default
    alone = subprocess.run([sys.executable, "-m", "pipeline.run", *common, "--interpolate", "none",
                            "--output-dir", str(tmp_path / "alone")], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 0 and "interpolation weight" not in alone.stderr, alone.stderr[-2000:]
    assert next((tmp_path / "alone").glob("*hcan-set.*-alone.run")).read_bytes() == plain_run.read_bytes()
    candidates = lambda path: sorted(tuple(line.split()[:3:2]) for line in path.read_text().splitlines())
    assert candidates(plain_run) == candidates(tuned_run)
    only_first = subprocess.run([sys.executable, "-m", "pipeline.run", *common, "--interpolate", "1",
                                 "--output-dir", str(tmp_path / "runs")], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=300)
    assert only_first.returncode == 0, only_first.stderr[-2000:]
    first_order = {}
    for line in next((tmp_path / "runs").glob("*hcan-set.*-interp1.run")).read_text().splitlines():
        first_order.setdefault(line.split()[0], []).append(line.split()[2])
    shipped = load_local(tiny_dir).first_stage
    assert first_order == {q: [h.doc_id for h in shipped[q]] for q in first_order}  # weight 1: first stage's order

    # --rerank-depth 2: the first stage's top 2 re-scored and ranked first, the others after them in
    # first-stage order; the candidates are the same
    shallow = subprocess.run([sys.executable, "-m", "pipeline.run", *common, "--rerank-depth", "2",
                              "--output-dir", str(tmp_path / "runs")], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert shallow.returncode == 0, shallow.stderr[-2000:]
    shallow_run, = (tmp_path / "runs").glob("*hcan-set.??????-top2.run")  # the combination, re-ranked to depth 2
    assert candidates(shallow_run) == candidates(plain_run)
    shallow_order = {}
    for line in shallow_run.read_text().splitlines():
        shallow_order.setdefault(line.split()[0], []).append(line.split()[2])
    for query_id, ranked in shallow_order.items():
        expected = [h.doc_id for h in shipped[query_id]]
        assert len(expected) > 2 and set(ranked[:2]) == set(expected[:2]) and ranked[2:] == expected[2:]

    # --model: re-rank with a saved checkpoint (no training; the protocol's test queries, tuned on its dev)
    checkpoint = next((tmp_path / "models").rglob("hcan-*.pt"))
    reused = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", str(tiny_dir), "--split", "dev",
                             "--reranker", "hcan", "--model", str(checkpoint), "--metrics", "AP",
                             "--output-dir", str(tmp_path / "reused")], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert reused.returncode == 0, reused.stderr[-2000:]
    assert "training" not in reused.stderr
    run_lines = next((tmp_path / "reused").glob("*.run")).read_text().splitlines()
    assert {line.split()[0] for line in run_lines} == {"dev/q0", "dev/q1"}
    no_reranker = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", str(tiny_dir),
                                  "--model", str(checkpoint)], cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=300)
    assert no_reranker.returncode != 0 and "--model needs --reranker" in no_reranker.stderr


def test_default_interpolation_is_tuned_on_dev_queries_never_on_test_queries(tiny_dir, tmp_path, monkeypatch):
    """The default ``--interpolate auto`` picks its weight on the protocol's dev queries: no test query is
    ever in a run the weight is tuned on (own splits, and k-fold where every query is tested once)."""
    from pipeline.engine import fusion
    from pipeline.run import build_parser, run_pipeline

    tuned_on: list[set[str]] = []
    choose_weight = fusion.choose_weight

    def recording(first, reranked, qrels, metric="AP", **options):
        tuned_on.append(set(reranked))
        return choose_weight(first, reranked, qrels, metric, **options)

    monkeypatch.setattr(fusion, "choose_weight", recording)
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    settings = [f"--set={k}={v}" for k, v in {**TINY, "epochs": 1}.items()]
    dataset = load_local(tiny_dir)
    test_ids = set(dataset.splits["test"])
    result = run_pipeline(build_parser().parse_args(
        ["--dataset", str(tiny_dir), "--reranker", "hcan", "--output-dir", str(tmp_path / "own"), *settings]))
    assert tuned_on and all(ids <= set(dataset.splits["dev"]) for ids in tuned_on)
    assert not any(ids & test_ids for ids in tuned_on)
    assert set(result.run) == test_ids and result.reranked is not None
    assert len(result.comparison.evaluations) == 3  # first stage, re-ranker alone, combination

    # k-fold (no splits): each fold tunes on its own dev queries, never on the queries it re-ranks
    tuned_on.clear()
    import shutil

    only_train = tmp_path / "kfold"  # one pair folder: a collection without splits
    shutil.copytree(tiny_dir / "train", only_train)
    result = run_pipeline(build_parser().parse_args(
        ["--dataset", str(only_train), "--reranker", "hcan", "--folds", "3", "--output-dir", str(tmp_path / "k"),
         *settings]))
    assert len(tuned_on) == 3
    folds = make_protocol(load_local(only_train), None, 42, 3)
    for fold, ids in zip(folds, tuned_on):
        assert ids <= set(fold.dev) and not ids & set(fold.test)


# ------------------------------------------------------------------------------------------ resuming


def resumable_fit(dataset, path, **extra):
    """``train_fold`` of the tiny HCAN with dropout and a schedule, so that resuming must restore the random
    generators, the optimizer and the schedule to end with the same weights."""
    from pipeline.engine.fitting import train_fold

    fold = make_protocol(dataset, None, 7)[0]
    options = {**TINY, "epochs": 4, "patience": 10, "dropout": 0.3, "schedule": "linear", "warmup": 0.2, **extra}
    return train_fold("hcan", dataset, fold, dataset.first_stage, options, 7, path)


@pytest.mark.parametrize("extra", [{}, {"weight_ensemble": 0.5}], ids=["trained", "weight-ensemble"])
def test_an_interrupted_training_resumes_after_its_last_epoch_with_the_same_result(tiny, tmp_path, monkeypatch, extra):
    """With ``weight_ensemble`` the resumed fit must mix in the same starting weights as the straight one."""
    from pipeline.engine.fitting import training_state_path

    straight, straight_report = resumable_fit(tiny, tmp_path / "straight.pt", **extra)
    assert not training_state_path(tmp_path / "straight.pt").exists()  # removed once the fit ended

    path = tmp_path / "resumed.pt"
    interrupt_after_epoch(monkeypatch, 2)
    with pytest.raises(TrainingInterrupted):
        resumable_fit(tiny, path, **extra)
    monkeypatch.undo()
    assert training_state_path(path).is_file() and not path.exists()

    resumed, resumed_report = resumable_fit(tiny, path, **extra)
    assert path.is_file() and not training_state_path(path).exists()
    assert [(e.epoch, e.loss, e.dev_score, e.learning_rate) for e in resumed_report.epochs] == \
        [(e.epoch, e.loss, e.dev_score, e.learning_rate) for e in straight_report.epochs]
    assert resumed_report.best_epoch == straight_report.best_epoch
    expected, got = straight.module.state_dict(), resumed.module.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[name], got[name]) for name in expected)


def test_a_training_state_of_another_training_is_refused(tiny, tmp_path, monkeypatch):
    from pipeline.engine.fitting import training_state_path

    path = tmp_path / "model.pt"
    interrupt_after_epoch(monkeypatch, 1)
    with pytest.raises(TrainingInterrupted):
        resumable_fit(tiny, path)
    monkeypatch.undo()
    state = training_state_path(path)
    with pytest.raises(CheckpointError, match=r"model\.pt\.training-state: training state of another training"):
        resumable_fit(tiny, path, learning_rate=0.02)
    state.write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match=r"model\.pt\.training-state: not a readable training state"):
        resumable_fit(tiny, path)


def test_topics_without_judgments_stay_out_of_training_and_tuning(tiny, caplog):
    import dataclasses
    import logging

    unjudged = {"u1": Query("u1", "extra topic one"), "u2": Query("u2", "extra topic two")}
    dataset = dataclasses.replace(tiny, queries={**tiny.queries, **unjudged},
                                  splits={**tiny.splits, "train": [*tiny.splits["train"], "u1"],
                                          "dev": [*tiny.splits["dev"], "u2"]})
    with caplog.at_level(logging.INFO, logger="pipeline.engine.protocols"):
        fold, = make_protocol(dataset, "test", seed=1)
    assert "u1" not in fold.train and "u2" not in fold.dev
    assert fold.train == tiny.splits["train"] and fold.dev == tiny.splits["dev"]
    assert "2 of" in caplog.text and "no judgments" in caplog.text
    folds = make_protocol(dataclasses.replace(dataset, splits={}), None, seed=1, folds=3)
    assert {"u1", "u2"} <= {q for f in folds for q in f.test}                     # still re-ranked and written
    assert not {"u1", "u2"} & {q for f in folds for q in (*f.train, *f.dev)}


def test_training_says_what_it_will_cost_after_a_few_batches(tiny, caplog):
    import logging

    from rerankers.training.loop import ESTIMATE_AFTER

    with caplog.at_level(logging.INFO, logger="rerankers.training"):
        _, report, _ = train_tiny(tiny, epochs=1, batch_size=4)
    units = report.epochs[0].examples
    assert f"hcan: {units} training units per epoch (each a relevant document with" in caplog.text
    assert units > 4 * ESTIMATE_AFTER  # enough batches for the estimate
    assert f"s per batch over the first {ESTIMATE_AFTER}: about" in caplog.text and "min per epoch" in caplog.text


@pytest.mark.parametrize("native", [True, False])
def test_amp_trains_under_cpu_bf16_autocast_only_where_bf16_is_native(tmp_path, monkeypatch, native):
    """``--set amp=true`` on a CPU: the training forward runs under bfloat16 autocast where the CPU has bfloat16
    instructions (about 2x faster per step there); elsewhere torch would emulate bfloat16, slower than float32,
    so the forward stays float32. Either way the model learns (finite, falling loss)."""
    import rerankers.training.loop as loop
    from tests.helpers import TOPICS, train_tiny, write_pairs

    for split, seed, topics in (("train", 1, TOPICS[:8]), ("dev", 2, TOPICS[8:10]), ("test", 3, TOPICS[10:])):
        write_pairs(tmp_path / split, seed, topics)
    dataset = load_local(tmp_path)
    monkeypatch.setattr(loop, "native_bf16", lambda: native)
    seen = []
    original = torch.nn.Linear.forward

    def recording(self, x):
        out = original(self, x)
        if torch.is_grad_enabled():  # training steps, not dev scoring
            seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", recording)
    _, report, _ = train_tiny(dataset, epochs=2, device="cpu", amp=True)
    assert seen and set(seen) == ({torch.bfloat16} if native else {torch.float32})
    losses = [e.loss for e in report.epochs]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
