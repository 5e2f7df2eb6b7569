"""Tests for the ``in_batch`` loss (rerankers.training.losses) and the bi-encoder's fine-tuning with it: the
softmax runs over every document of the batch with a unit's own positive as the target, another positive of the
same query is masked, hard negatives come from the first-stage candidates and are not judged relevant, and one
training step lowers the in-batch loss of the batch it saw, with a tiny encoder and with the packaged MiniLM
under the bi-encoder's default options."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Query
from rerankers.bi_encoder import BiEncoderReranker
from rerankers.training.config import TrainConfig
from rerankers.training.data import RankingData
from rerankers.training.loop import Trainer
from rerankers.training.losses import in_batch_loss, in_batch_pairs
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_WORDS as WORDS, make_tiny_encoder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def unit(query_id, positive, *negatives):
    docs = [Doc(positive, positive), *(Doc(n, n) for n in negatives)]
    return Query(query_id, query_id), docs, [1.0] + [0.0] * len(negatives)


def test_pairs_cross_every_query_with_every_document_and_the_loss_is_the_row_softmax():
    units = [unit("a", "pa", "na"), unit("b", "pb", "nb")]
    pairs = in_batch_pairs(units)
    assert [(q.query_id, d.doc_id) for q, d in pairs] == [
        ("a", "pa"), ("a", "na"), ("a", "pb"), ("a", "nb"), ("b", "pa"), ("b", "na"), ("b", "pb"), ("b", "nb")]
    scores = torch.tensor([3.0, 1.0, 0.5, -1.0, 0.2, 0.1, 2.0, 0.0])
    rows = scores.view(2, 4)
    expected = (F.cross_entropy(rows, torch.tensor([0, 2])))
    assert float(in_batch_loss(scores, units)) == pytest.approx(float(expected))


def test_another_positive_of_the_same_query_is_masked_not_a_negative():
    units = [unit("a", "p1", "n1"), unit("a", "p2", "n2")]   # two relevant documents of one query
    scores = torch.tensor([1.0, 0.0, 5.0, 0.0,    # row 0: p2 (column 2) scores high but is relevant to "a"
                           5.0, 0.0, 1.0, 0.0])   # row 1: p1 likewise
    masked = float(in_batch_loss(scores, units))
    alone = float(F.cross_entropy(torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), torch.tensor([0, 0])))
    assert masked == pytest.approx(alone)          # p2 / p1 left out of the other row's softmax


def test_in_batch_is_a_known_loss_and_unknown_ones_are_refused():
    assert TrainConfig(loss="in_batch").loss == "in_batch"
    with pytest.raises(PipelineError, match="in_batch"):
        TrainConfig(loss="in-batch-typo")


def test_hard_negatives_come_from_the_first_stage_and_are_not_relevant():
    dataset = tiny_dataset(WORDS, seed=3, num_queries=10)
    train = RankingData.from_dataset(dataset, list(dataset.queries), dataset.first_stage)
    config = TrainConfig(loss="in_batch", negatives=2)
    units = Trainer(None, config, seed=1).epoch_units(train, random.Random(1))
    assert len(units) == 10
    for query, docs, labels in units:
        candidates = {h.doc_id for h in dataset.first_stage[query.query_id]}
        judged = train.qrels[query.query_id]
        assert labels == [1.0, 0.0, 0.0]
        assert judged[docs[0].doc_id] > 0
        assert all(d.doc_id in candidates and judged.get(d.doc_id, 0) <= 0 for d in docs[1:])


def batch_loss(reranker, units) -> float:
    """The in-batch loss of ``units`` as one batch, scored in evaluation mode (no dropout)."""
    reranker.module.eval()
    reranker.clear_cache()
    with torch.no_grad():
        return float(in_batch_loss(reranker.forward(reranker.encode(in_batch_pairs(units))), units))


def one_step_lowers_the_loss(reranker, seed: int) -> None:
    """Fit ``reranker`` for one step (one batch holds every unit) and check that the loss of that batch fell
    and that the scores moved: the positives up relative to the batch's other documents."""
    dataset = tiny_dataset(WORDS, seed=3, num_queries=8)
    train = RankingData.from_dataset(dataset, list(dataset.queries), dataset.first_stage)
    config = reranker.train_config
    # the units the fit draws first (the Trainer's generator is seeded the same way)
    units = Trainer(reranker, config, seed).epoch_units(train, random.Random(seed))
    group = 1 + config.negatives
    assert len(units) <= config.batch_size // group, "one batch must hold every unit: exactly one step"
    before = batch_loss(reranker, units)
    start = [p.detach().clone() for p in reranker.module.parameters()]
    report = reranker.fit(train)
    assert len(report.epochs) == 1 and report.epochs[0].examples == len(units)
    assert any(not torch.equal(a, b) for a, b in zip(start, reranker.module.parameters()))
    assert batch_loss(reranker, units) < before


def test_one_in_batch_step_moves_scores_the_right_way_tiny_encoder(tiny_encoder):
    reranker = BiEncoderReranker.from_options(
        {"encoder": tiny_encoder, "max_query_length": 8, "max_doc_length": 16, "loss": "in_batch", "negatives": 1,
         "batch_size": 16, "epochs": 1, "learning_rate": 1e-4, "warmup": 0.0, "dev_at_start": False}, seed=1)
    reranker.prepare()
    one_step_lowers_the_loss(reranker, seed=1)


def test_one_step_with_the_default_options_packaged_minilm():
    reranker = BiEncoderReranker.from_options({}, seed=1)
    config = reranker.train_config
    assert (config.loss, config.epochs) == ("in_batch", 1)
    reranker.prepare()
    one_step_lowers_the_loss(reranker, seed=1)
