"""Tests for rerankers.cross_encoder (and the shared transformer base): input layout, masking, training,
checkpoints, determinism. A tiny random BERT with the MiniLM tokenizer stands in for the encoder; one test
loads the real default MiniLM and scores two pairs."""
from __future__ import annotations

import math

import pytest
import torch

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query
from infra.checkpoints import save_checkpoint
from rerankers.training.data import RankingData
from rerankers import reranker_class
from rerankers.cross_encoder import CrossEncoderReranker
from rerankers.lru import LRUCache
from rerankers.transformer_base import SpecialTokens
from tests.helpers import assert_the_tiny_fit_overfits, one_torch_thread, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_DOCS as DOCS, ENCODER_QUERY as QUERY, ENCODER_WORDS as WORDS, make_tiny_encoder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def make(encoder, seed=1, prepare=True, **options):
    settings = dict(encoder=encoder, max_query_length=8, max_doc_length=16)
    settings.update(options)
    reranker = CrossEncoderReranker.from_options(settings, seed=seed)
    if prepare:
        reranker.prepare()
    return reranker


def test_registered_with_fine_tuning_defaults():
    assert reranker_class("cross-encoder") is CrossEncoderReranker
    config = CrossEncoderReranker().train_config
    assert (config.loss, config.optimizer, config.learning_rate, config.grad_clip) == ("pointwise", "adamw", 2e-5, 1.0)
    encoder = CrossEncoderReranker().encoder_config
    assert (encoder.encoder, encoder.max_query_length, encoder.max_doc_length) == ("all-MiniLM-L6-v2", 32, 180)
    with pytest.raises(PipelineError, match="max_query_length"):
        CrossEncoderReranker.from_options({"max_query_length": 0})


def test_input_is_cls_query_sep_doc_sep_with_token_types(tiny_encoder):
    reranker = make(tiny_encoder)
    tok = reranker.tokenizer
    q = tok("tigers", add_special_tokens=False)["input_ids"]
    d = tok("tigers live in forests", add_special_tokens=False)["input_ids"]
    long_query, long_doc = Query("long", " ".join(WORDS)), Doc("long", " ".join(WORDS * 2))
    batch = reranker.encode([(Query("q", "tigers"), DOCS[2]), (long_query, long_doc)])
    expected = [tok.cls_token_id, *q, tok.sep_token_id, *d, tok.sep_token_id]
    assert batch["input_ids"][0, : len(expected)].tolist() == expected
    assert batch["attention_mask"][0].sum() == len(expected) and not batch["attention_mask"][0, len(expected):].any()
    assert batch["token_type_ids"][0, : len(expected)].tolist() == [0] * (len(q) + 2) + [1] * (len(d) + 1)
    assert batch["attention_mask"][1].sum() == 8 + 16 + 3             # each text truncated on its own
    assert reranker.pair_length(long_query, long_doc) == 8 + 16
    assert reranker.pair_length(QUERY, DOCS[2]) == len(tok(QUERY.text, DOCS[2].text)["input_ids"]) - 3


def test_special_token_templates_match_the_tokenizer(tiny_encoder):
    reranker = make(tiny_encoder)
    special = SpecialTokens(reranker.tokenizer)
    tok = reranker.tokenizer
    a = tok("power station", add_special_tokens=False)["input_ids"]
    b = tok("pop rock group", add_special_tokens=False)["input_ids"]
    assert special.single(a) == tok("power station")["input_ids"]
    joined = tok("power station", "pop rock group")
    assert special.pair(a, b) == (joined["input_ids"], joined["token_type_ids"])
    assert special.prefix_length == 1 and special.extra(pair=False) == 2 and special.extra(pair=True) == 3


def test_no_documents_no_scores(tiny_encoder):
    # that padding never changes a score is the contract of tests/rerankers/test_every_reranker.py
    assert make(tiny_encoder).score(QUERY, []) == []


def fit_tiny(tiny_encoder, seed=3, epochs=30):
    dataset = tiny_dataset(WORDS, num_queries=12)
    train = RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage)
    reranker = make(tiny_encoder, seed=seed, prepare=False, learning_rate=1e-3, epochs=epochs, batch_size=16,
                    negatives=2, dropout=0.0)
    reranker.prepare(train, dataset)
    return reranker, reranker.fit(train), train


def test_tiny_overfit_relevant_outranks_random(tiny_encoder):
    assert_the_tiny_fit_overfits(*fit_tiny(tiny_encoder), factor=0.25)


def test_training_is_deterministic_under_a_seed(tiny_encoder):
    first, _, train = fit_tiny(tiny_encoder, epochs=2)
    second, _, _ = fit_tiny(tiny_encoder, epochs=2)
    query, docs = next(iter(train.queries.values())), list(train.docs.values())[:5]
    assert first.score(query, docs) == second.score(query, docs)


def test_same_seed_same_scores(tiny_encoder):
    a = make(tiny_encoder, seed=4).score(QUERY, DOCS)
    assert make(tiny_encoder, seed=4).score(QUERY, DOCS) == a
    assert make(tiny_encoder, seed=5).score(QUERY, DOCS) != a


def test_save_load_round_trip_and_bad_checkpoints(tiny_encoder, tmp_path):
    reranker = make(tiny_encoder, seed=2)
    with torch.no_grad():
        reranker.module.head.bias.add_(1.5)
        reranker.module.encoder.embeddings.word_embeddings.weight[2000:2100] += 0.1  # fine-tuned encoder weights
    before = reranker.score(QUERY, DOCS)
    path = tmp_path / "cross.pt"
    reranker.save(path)
    loaded = CrossEncoderReranker.load(path)
    assert loaded.score(QUERY, DOCS) == before
    payload = torch.load(path, weights_only=True)
    assert payload["reranker"] == "cross-encoder" and payload["encoder"]["name"] == tiny_encoder
    assert set(payload["versions"]) >= {"torch", "transformers", "python", "project"}
    from rerankers.addax import AddaxReranker

    with pytest.raises(CheckpointError, match="cross.pt.*'cross-encoder'"):
        AddaxReranker.load(path)
    payload["encoder"]["tokenizer"] = "0" * 16
    save_checkpoint(tmp_path / "other-tokenizer.pt", payload)
    with pytest.raises(CheckpointError, match="other-tokenizer.pt.*tokenizer"):
        CrossEncoderReranker.load(tmp_path / "other-tokenizer.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty.pt"):
        CrossEncoderReranker.load(tmp_path / "empty.pt")
    torch.save({"format": 1, "reranker": "cross-encoder"}, tmp_path / "word.pt")  # a word-level checkpoint
    with pytest.raises(CheckpointError, match="word.pt.*not a transformer"):
        CrossEncoderReranker.load(tmp_path / "word.pt")


def test_lru_cache_forgets_least_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2
    assert (cache.hits, cache.misses) == (3, 0)
    disabled = LRUCache(0)
    disabled.put("a", 1)
    assert disabled.get("a") is None and disabled.misses == 1


def test_real_minilm_scores_two_pairs():
    reranker = CrossEncoderReranker.from_options({}, seed=0)
    reranker.prepare()
    assert reranker.module.encoder.config.hidden_size == 384
    scores = reranker.score(QUERY, DOCS[:2])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
