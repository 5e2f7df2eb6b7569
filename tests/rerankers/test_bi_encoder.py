"""Tests for rerankers.bi_encoder: the score is the cosine of mean-pooled encoder outputs, the document cache,
padding and batch invariance, training, keeping the pre-trained weights when training does not help,
zero-shot loading by encoder name, checkpoints. A tiny random BERT with the MiniLM tokenizer stands in."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.records import Doc, Query
from rerankers.training.data import RankingData
from rerankers import reranker_class
from rerankers.bi_encoder import BiEncoderReranker
from tests.helpers import one_torch_thread, relevant_wins, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_DOCS as DOCS, ENCODER_QUERY as QUERY, ENCODER_WORDS as WORDS, make_tiny_encoder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def make(encoder, seed=1, **options):
    settings = {"encoder": encoder, "max_query_length": 8, "max_doc_length": 16, **options}
    reranker = BiEncoderReranker.from_options(settings, seed=seed)
    reranker.prepare()
    return reranker


def reference_vector(reranker, text: str, limit: int) -> torch.Tensor:
    """Mean pooling of the encoder's outputs over the real tokens of ``text``, computed without the re-ranker."""
    tokenizer, encoder = reranker.tokenizer, reranker.module.encoder
    ids = tokenizer(text, truncation=True, max_length=limit + 2, return_tensors="pt")
    with torch.inference_mode():
        states = encoder(**ids).last_hidden_state[0]
    return F.normalize(states.mean(dim=0), dim=-1)


def test_registered_with_contrastive_defaults():
    assert reranker_class("bi-encoder") is BiEncoderReranker
    config = BiEncoderReranker().train_config
    assert (config.loss, config.dev_at_start, config.schedule) == ("in_batch", True, "linear")


def test_score_is_scaled_cosine_of_mean_pooled_outputs(tiny_encoder):
    reranker = make(tiny_encoder)
    scores = reranker.score(QUERY, DOCS[:3])
    query = reference_vector(reranker, QUERY.text, 8)
    for doc, score in zip(DOCS[:3], scores):
        expected = 20.0 * float(query @ reference_vector(reranker, doc.text, 16))
        assert score == pytest.approx(expected, abs=1e-4)


def test_cache_padding_and_batch_composition_do_not_change_scores(tiny_encoder):
    reranker = make(tiny_encoder)
    alone = [reranker.score(QUERY, [doc])[0] for doc in DOCS]
    together = reranker.score(QUERY, DOCS)           # padded with longer documents, partly from the cache
    assert together == pytest.approx(alone, abs=1e-5)
    reranker.clear_cache()
    long_doc = Doc("long", " ".join(WORDS * 3))
    fresh = reranker.score(QUERY, [long_doc, *DOCS])[1:]
    assert fresh == pytest.approx(alone, abs=1e-5)
    other = Query("q2", "tigers and forests")
    assert reranker.score(other, DOCS[2:3])[0] > reranker.score(other, DOCS[1:2])[0] - 100  # finite, another query
    assert all(torch.isfinite(torch.tensor(reranker.score(other, DOCS))))


def test_training_learns_and_dev_at_start_keeps_a_better_start(tiny_encoder):
    dataset = tiny_dataset(WORDS, seed=3, num_queries=12)
    ids = list(dataset.queries)
    train = RankingData.from_dataset(dataset, ids[:8], dataset.first_stage)
    dev = RankingData.from_dataset(dataset, ids[8:], dataset.first_stage)
    learner = make(tiny_encoder, epochs=6, learning_rate=1e-3, negatives=3, batch_size=16, warmup=0.0,
                   dev_at_start=False, max_doc_length=8)
    before = relevant_wins(learner, train)
    learner.fit(train)
    assert relevant_wins(learner, train) >= max(before, 6)



@pytest.mark.parametrize("share", [0.0, 0.5], ids=["trained", "weight-ensemble"])
def test_dev_at_start_keeps_the_starting_weights_when_no_epoch_beats_them(tiny_encoder, monkeypatch, share):
    from rerankers.training.loop import Trainer

    dataset = tiny_dataset(WORDS, seed=3, num_queries=12)
    ids = list(dataset.queries)
    train = RankingData.from_dataset(dataset, ids[:8], dataset.first_stage)
    dev = RankingData.from_dataset(dataset, ids[8:], dataset.first_stage)
    dev_scores = iter([0.9, 0.5, 0.4])  # before training, then after each epoch: training only hurts
    monkeypatch.setattr(Trainer, "evaluate", lambda self, data: next(dev_scores))
    keeper = make(tiny_encoder, epochs=2, patience=5, learning_rate=1e-2, negatives=3, batch_size=16,
                  weight_ensemble=share)
    start = keeper.score(QUERY, DOCS)
    report = keeper.fit(train, dev)
    assert [e.dev_score for e in report.epochs] == [0.5, 0.4]
    assert (report.best_epoch, report.best_dev_score) == (0, 0.9)
    assert keeper.score(QUERY, DOCS) == pytest.approx(start, abs=1e-6)  # the pre-trained weights, untouched


def test_zero_shot_load_by_encoder_name_and_checkpoint_round_trip(tiny_encoder, tmp_path):
    zero_shot = BiEncoderReranker.load(tiny_encoder)  # not a file: the pre-trained encoder as it is
    assert zero_shot.encoder_config.encoder == tiny_encoder
    reference = make(tiny_encoder, max_query_length=32, max_doc_length=126)  # cut to the tiny BERT's 128 positions
    assert zero_shot.score(QUERY, DOCS) == pytest.approx(reference.score(QUERY, DOCS), abs=1e-5)
    path = tmp_path / "bi.pt"
    zero_shot.save(path)
    assert BiEncoderReranker.load(path).score(QUERY, DOCS) == pytest.approx(zero_shot.score(QUERY, DOCS), abs=1e-6)


def test_query_side_training_moves_only_the_query_encoder_and_caches_documents_once(tiny_encoder, tmp_path):
    dataset = tiny_dataset(WORDS, seed=3, num_queries=12)
    ids = list(dataset.queries)
    train = RankingData.from_dataset(dataset, ids[:8], dataset.first_stage)
    learner = make(tiny_encoder, train_side="query", epochs=6, learning_rate=1e-3, negatives=3, batch_size=16,
                   warmup=0.0, dev_at_start=False, max_doc_length=8)
    frozen = {k: v.clone() for k, v in learner.module.doc_encoder.state_dict().items()}
    assert learner.module.encoder.state_dict().keys() == frozen.keys()
    before = relevant_wins(learner, train)
    encoded = []
    original = learner.module.embed_docs
    learner.module.embed_docs = lambda ids, attention: encoded.append(len(ids)) or original(ids, attention)
    learner.fit(train)
    del learner.module.embed_docs
    assert relevant_wins(learner, train) >= max(before, 6)
    # every document vector was computed once, without gradients, and reused by every later step
    assert sum(encoded) == 8 * 4  # the 8 training queries' 4 candidates each, over 6 epochs
    after = learner.module.doc_encoder.state_dict()
    assert all(torch.equal(after[k], frozen[k]) for k in frozen)                 # documents: untouched
    assert not all(torch.equal(learner.module.encoder.state_dict()[k], frozen[k]) for k in frozen)  # queries moved
    # the documents get the zero-shot model's vectors; only the query vector differs
    zero_shot = make(tiny_encoder, max_doc_length=8)
    tensors = zero_shot.tensors(zero_shot.encode([(QUERY, doc) for doc in DOCS]))
    with torch.no_grad():
        expected = zero_shot.module.embed(tensors["doc_ids"], tensors["doc_attention"])
        found = learner.module.embed_docs(tensors["doc_ids"], tensors["doc_attention"])
        queries = [m.module.embed(tensors["query_ids"], tensors["query_attention"]) for m in (learner, zero_shot)]
    assert torch.allclose(found, expected, atol=1e-6)
    assert not torch.allclose(*queries, atol=1e-4)
    path = tmp_path / "query-side.pt"
    learner.save(path)
    loaded = BiEncoderReranker.load(path)
    assert loaded.model_config.train_side == "query"
    assert loaded.score(QUERY, DOCS) == pytest.approx(learner.score(QUERY, DOCS), abs=1e-5)
    exported = loaded.save_pretrained(tmp_path / "export")
    assert (exported / "bi_encoder_documents.safetensors").is_file()
    assert BiEncoderReranker.load(exported).score(QUERY, DOCS) == pytest.approx(learner.score(QUERY, DOCS), abs=1e-5)


def test_train_side_must_be_known(tiny_encoder):
    from pipeline.core.errors import PipelineError

    with pytest.raises(PipelineError, match="train_side must be one of both, query"):
        make(tiny_encoder, train_side="documents")
