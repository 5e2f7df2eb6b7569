"""Tests for rerankers.training.weight_ensemble and the Trainer's ``weight_ensemble`` option (WiSE-FT): the
kept weights are the given mix of the trained and the starting ones, integer buffers are left alone, the
default keeps the trained weights, bad shares and mismatched weights are named."""
from __future__ import annotations

import pytest
import torch

from pipeline.core.errors import PipelineError
from rerankers.bi_encoder import BiEncoderReranker
from rerankers.training.config import TrainConfig
from rerankers.training.data import RankingData
from rerankers.training.weight_ensemble import mix_weights
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_WORDS as WORDS, make_tiny_encoder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def test_mix_is_the_share_of_the_way_back_to_the_start_and_leaves_integers_alone():
    trained = {"w": torch.tensor([4.0, -2.0]), "positions": torch.tensor([3, 4])}
    start = {"w": torch.tensor([0.0, 2.0]), "positions": torch.tensor([0, 1])}
    mixed = mix_weights(trained, start, 0.25)
    assert torch.equal(mixed["w"], torch.tensor([3.0, -1.0]))
    assert torch.equal(mixed["positions"], trained["positions"])
    assert torch.equal(trained["w"], torch.tensor([4.0, -2.0]))  # inputs untouched
    with pytest.raises(ValueError, match="differ in their tensors"):
        mix_weights(trained, {"w": start["w"]}, 0.5)
    with pytest.raises(ValueError, match="shape"):
        mix_weights(trained, {**start, "w": torch.zeros(3)}, 0.5)


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(PipelineError, match="weight_ensemble must be in"):
        TrainConfig(weight_ensemble=share)


def trained(encoder, dataset, **options):
    settings = {"encoder": encoder, "max_query_length": 8, "max_doc_length": 8, "epochs": 2, "learning_rate": 1e-3,
                "negatives": 3, "batch_size": 16, "warmup": 0.0, **options}
    reranker = BiEncoderReranker.from_options(settings, seed=1)
    reranker.prepare()
    start = {k: v.clone() for k, v in reranker.module.state_dict().items()}
    ids = list(dataset.queries)
    reranker.fit(RankingData.from_dataset(dataset, ids[:8], dataset.first_stage))
    return reranker, start


def test_fit_keeps_the_mix_of_its_trained_and_starting_weights(tiny_encoder):
    dataset = tiny_dataset(WORDS, seed=3, num_queries=12)
    plain, start = trained(tiny_encoder, dataset)  # the twin with the default: the trained weights as they are
    mixed, same_start = trained(tiny_encoder, dataset, weight_ensemble=0.5)
    plain_weights, mixed_weights = plain.module.state_dict(), mixed.module.state_dict()
    moved = 0
    for name, value in mixed_weights.items():
        assert torch.equal(start[name], same_start[name])
        if value.is_floating_point():
            assert torch.allclose(value, (plain_weights[name] + start[name]) / 2, atol=1e-6), name
            moved += not torch.equal(plain_weights[name], start[name])
        else:
            assert torch.equal(value, plain_weights[name])
    assert moved > 0  # training changed the weights, so the mix is a third set of them
