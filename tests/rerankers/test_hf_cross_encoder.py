"""Tests for Hugging Face sequence-classification cross-encoders in rerankers.cross_encoder: zero-shot
re-ranking with ``CrossEncoderReranker.load(dir or hub id)`` (``--model``), fine-tuning that starts from the
model's own head, checkpoints, and errors.

The models are tiny random BERTs (2 layers, hidden 32) with a 30-word vocabulary, saved with
``save_pretrained`` by the tests; their weights are drawn wider than BERT's default so that different pairs
get clearly different logits. Nothing is downloaded: every test runs with the network refused, and those
on local directories check that no connection was even attempted.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query
from infra.checkpoints import save_checkpoint
from rerankers.training.data import RankingData
from rerankers.training.optim import parameter_groups
from rerankers.cross_encoder import CrossEncoderModel, CrossEncoderReranker, PretrainedHeadModel
from rerankers.transformer_base import SpecialTokens
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import (  # noqa: F401
    HF_DOCS as DOCS, HF_POSITIONS as POSITIONS, HF_QUERY as QUERY, HF_SPECIAL as SPECIAL, HF_WORDS as WORDS, hf_logits,
    network_attempts, save_tiny_classifier as save_tiny_bert, write_collection,
)


@pytest.fixture(scope="module")
def one_label(tmp_path_factory) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("ce-1-label"), num_labels=1)


@pytest.fixture(scope="module")
def two_labels(tmp_path_factory) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("ce-2-labels"), num_labels=2, seed=1)


def assert_scores(actual, expected: torch.Tensor) -> None:
    torch.testing.assert_close(torch.tensor(actual), expected.float(), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------- zero-shot


def test_loaded_classifier_scores_are_its_logits_with_its_head(one_label, network_attempts, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # as for a user who is online
    reranker = CrossEncoderReranker.load(one_label)
    assert isinstance(reranker.module, PretrainedHeadModel) and reranker.model_config.head == "pretrained"
    logits = hf_logits(one_label, QUERY, DOCS)
    assert logits.shape == (5, 1) and logits[:, 0].std() > 0.05  # the pairs are told apart
    assert_scores(reranker.score(QUERY, DOCS), logits[:, 0])
    # the classifier's weights are the saved ones, not a fresh head (which a seed would change)
    assert CrossEncoderReranker.from_pretrained(one_label, seed=7).score(QUERY, DOCS) == reranker.score(QUERY, DOCS)
    assert network_attempts == []  # a local directory never touches the network


def test_inputs_are_the_tokenizers_pair_encoding(one_label):
    reranker = CrossEncoderReranker.load(one_label)
    tokenizer = reranker.tokenizer
    batch = reranker.encode([(QUERY, doc) for doc in DOCS])
    for row, doc in enumerate(DOCS):
        # a batch call, as HF cross-encoder libraries make: tokenizer(q, "") alone drops the empty second text
        # and its [SEP], tokenizer([q], [""]) keeps them
        expected = {key: value[0] for key, value in tokenizer([QUERY.text], [doc.text]).items()}
        length = len(expected["input_ids"])
        assert batch["input_ids"][row, :length].tolist() == expected["input_ids"]
        assert batch["token_type_ids"][row, :length].tolist() == expected["token_type_ids"]
        assert batch["attention_mask"][row].sum() == length
    q = tokenizer(QUERY.text, add_special_tokens=False)["input_ids"]
    d = tokenizer(DOCS[0].text, add_special_tokens=False)["input_ids"]
    joined = tokenizer(QUERY.text, DOCS[0].text)
    assert SpecialTokens(tokenizer).pair(q, d) == (joined["input_ids"], joined["token_type_ids"])


def test_document_length_is_lowered_to_fit_the_models_positions(one_label):
    reranker = CrossEncoderReranker.load(one_label)
    assert (reranker.encoder_config.max_query_length, reranker.encoder_config.max_doc_length) == (32, POSITIONS - 35)
    long_query, long_doc = Query("long", " ".join(WORDS * 2)), Doc("long", " ".join(WORDS * 4))
    batch = reranker.encode([(long_query, long_doc)])
    assert batch["attention_mask"].sum() == POSITIONS
    assert len(reranker.score(long_query, [long_doc, DOCS[0]])) == 2
    shorter = CrossEncoderReranker.from_pretrained(one_label, {"max_query_length": 8, "max_doc_length": 16})
    assert shorter.encode([(long_query, long_doc)])["attention_mask"].sum() == 8 + 16 + 3
    with pytest.raises(PipelineError, match="max_position_embeddings 64"):
        CrossEncoderReranker.from_pretrained(one_label, {"max_doc_length": 100})


def test_two_labels_score_is_logit1_minus_logit0(two_labels, tmp_path):
    reranker = CrossEncoderReranker.load(two_labels)
    logits = hf_logits(two_labels, QUERY, DOCS)
    assert_scores(reranker.score(QUERY, DOCS), logits[:, 1] - logits[:, 0])
    three = save_tiny_bert(tmp_path / "three", num_labels=3)
    with pytest.raises(CheckpointError, match="3 labels"):
        CrossEncoderReranker.load(three)


def test_cannot_load_errors_say_what_was_tried(one_label, tmp_path, network_attempts):
    plain = save_tiny_bert(tmp_path / "plain", num_labels=None)
    with pytest.raises(CheckpointError, match="Hugging Face model directory.*not a cross-encoder.*BertModel"):
        CrossEncoderReranker.load(plain)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="without config.json"):
        CrossEncoderReranker.load(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="not a file or directory here; as a Hugging Face hub model id"):
        CrossEncoderReranker.load("no-such-org/no-such-cross-encoder")
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        CrossEncoderReranker.load(tmp_path / "typo.pt")
    assert network_attempts == []


# --------------------------------------------------------------------------------------- command line


def test_pipeline_run_model_reranks_zero_shot(one_label, tmp_path, monkeypatch, capsys):
    from pipeline.run import main

    collection = write_collection(tmp_path / "collection")
    models = tmp_path / "models"
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(models))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    common = ["--dataset", str(collection), "--reranker", "cross-encoder", "--interpolate", "none",
              "--metrics", "AP", "--output-dir", str(tmp_path / "runs")]
    assert main([*common, "--model", one_label, "--name", "zero-shot"]) == 0, capsys.readouterr().err
    assert not models.exists() or not any(models.rglob("*"))  # nothing trained, nothing cached
    rows = [line.split() for line in (tmp_path / "runs" / "zero-shot.run").read_text().splitlines()]
    assert {row[0] for row in rows} == {"1", "2"} and len(rows) == 10
    scores = {row[2]: float(row[4]) for row in rows if row[0] == "1"}
    docs = [Doc(d.doc_id, d.text or "the") for d in DOCS]
    assert_scores([scores[d.doc_id] for d in docs], hf_logits(one_label, QUERY, docs)[:, 0])

    capsys.readouterr()
    assert main([*common, "--model", str(tmp_path / "no-model-here")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "as a Hugging Face hub model id" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------- fine-tuning, saving


def test_fine_tuning_starts_from_the_classifiers_head(one_label, two_labels):
    options = dict(max_query_length=8, max_doc_length=16)
    for folder in (one_label, two_labels):
        reranker = CrossEncoderReranker.from_options({"encoder": folder, **options}, seed=3)
        reranker.prepare()
        assert isinstance(reranker.module, PretrainedHeadModel)
        logits = hf_logits(folder, QUERY, DOCS)
        expected = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
        assert_scores(reranker.score(QUERY, DOCS), expected)  # step 0: the model's own scores
    fresh = CrossEncoderReranker.from_options({"encoder": one_label, "head": "new", **options}, seed=3)
    fresh.prepare()
    assert isinstance(fresh.module, CrossEncoderModel)
    assert fresh.score(QUERY, DOCS) != reranker.score(QUERY, DOCS)

    dataset = tiny_dataset(WORDS[:20], num_queries=6)
    train = RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage)
    tuned = CrossEncoderReranker.from_options({"encoder": one_label, "learning_rate": 1e-3, "epochs": 2,
                                               "batch_size": 8, "negatives": 2, **options}, seed=3)
    tuned.prepare(train, dataset)
    before = tuned.score(QUERY, DOCS)
    report = tuned.fit(train)
    assert len(report.epochs) == 2 and tuned.score(QUERY, DOCS) != before
    head = tuned.module.encoder.classifier.weight
    assert not torch.equal(head, CrossEncoderReranker.load(one_label).module.encoder.classifier.weight)
    # the kept head is pre-trained: no freshly initialised layer is left for head_learning_rate
    assert all(name.startswith(tuned.pretrained_prefixes) for name, _ in tuned.module.named_parameters())
    with pytest.raises(PipelineError, match="head_learning_rate needs parameters both"):
        parameter_groups(tuned.module, tuned.pretrained_prefixes, 1e-5, 1e-3)


def test_plain_encoder_keeps_a_fresh_head(tmp_path):
    plain = save_tiny_bert(tmp_path / "plain", num_labels=None)
    reranker = CrossEncoderReranker.from_options({"encoder": plain, "max_query_length": 8, "max_doc_length": 16})
    reranker.prepare()
    assert isinstance(reranker.module, CrossEncoderModel)
    insisting = CrossEncoderReranker.from_options({"encoder": plain, "head": "pretrained", "max_query_length": 8,
                                                   "max_doc_length": 16})
    with pytest.raises(PipelineError, match="head=pretrained.*no sequence-classification head"):
        insisting.prepare()
    with pytest.raises(PipelineError, match="head must be one of"):
        CrossEncoderReranker.from_options({"head": "linear"})


def test_save_load_round_trip_of_a_loaded_classifier(two_labels, tmp_path):
    reranker = CrossEncoderReranker.load(two_labels)
    before = reranker.score(QUERY, DOCS)
    reranker.save(tmp_path / "hf.pt")
    loaded = CrossEncoderReranker.load(tmp_path / "hf.pt")
    assert isinstance(loaded.module, PretrainedHeadModel) and loaded.score(QUERY, DOCS) == before
    assert loaded.encoder_config.max_doc_length == POSITIONS - 35


def test_checkpoint_without_head_option_loads_as_a_fresh_head(two_labels, tmp_path):
    """A checkpoint written before ``head`` existed, trained with a fresh head on a classifier's encoder."""
    reranker = CrossEncoderReranker.from_options({"encoder": two_labels, "head": "new", "max_query_length": 8,
                                                  "max_doc_length": 16}, seed=2)
    reranker.prepare()
    before = reranker.score(QUERY, DOCS)
    reranker.save(tmp_path / "old.pt")
    payload = torch.load(tmp_path / "old.pt", weights_only=True)
    del payload["model_config"]["head"]
    save_checkpoint(tmp_path / "old.pt", payload)
    loaded = CrossEncoderReranker.load(tmp_path / "old.pt")
    assert isinstance(loaded.module, CrossEncoderModel) and loaded.score(QUERY, DOCS) == before
