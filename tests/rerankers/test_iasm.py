"""Tests for rerankers.iasm: interactive attention (eq. 1-7), the two-channel distance (eq. 8), the
margin loss (eq. 9) through the framework's hinge, and Table VII's variance statistic."""

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.errors import CheckpointError, ConfigError
from rerankers.training.config import TrainConfig
from rerankers.training.loop import Trainer
from rerankers.iasm import (
    IASMConfig,
    IASMModel,
    IASMReranker,
    IASMStaticConfig,
    IASMStaticReranker,
    InteractiveAttentionTrace,
    matrix_variance,
    matrix_variance_drop,
    normalized_distance,
    variance_dropped,
)
from tests import helpers
from tests.helpers import fit_on_tiny_dataset, one_torch_thread  # noqa: F401 (autouse fixture)

VOCAB, EMBED = 40, 8
pad_batch = partial(helpers.pad_batch, vocab=VOCAB)
random_pairs = partial(helpers.random_pairs, vocab=VOCAB)


def make_model(matrix="dynamic", num_layers=3, seed=0, **overrides):
    torch.manual_seed(seed)
    return IASMModel(IASMConfig(matrix=matrix, num_layers=num_layers, **overrides), torch.randn(VOCAB, EMBED))


# ------------------------------------------------------------------------------------------ module


@pytest.mark.parametrize("matrix,num_layers", [("static", 1), ("dynamic", 3), ("dynamic", 5)])
def test_shapes_follow_the_transposes_of_eq4_to_eq7(matrix, num_layers):
    model = make_model(matrix, num_layers)
    batch = pad_batch([[3, 4, 5], [6]], [[7, 8, 9, 10, 11], [12, 13]])
    trace = model.interactive_attention(*batch, final_matrix=True)
    assert trace.query0.shape == (2, 3, EMBED) and trace.doc0.shape == (2, 5, EMBED)
    assert trace.query_n.shape == (2, 5, EMBED)  # A^T Q: the source lives on the target's positions
    assert trace.doc_n.shape == (2, 3, EMBED)
    assert len(trace.matrices) == num_layers + 1
    for layer, matrix_l in enumerate(trace.matrices):
        assert matrix_l.shape == ((2, 3, 5) if layer % 2 == 0 else (2, 5, 3))
        assert torch.all(matrix_l[~trace.cell_mask(layer)] == 0)
    scores = model(*batch)
    assert scores.shape == (2,) and torch.isfinite(scores).all()
    assert torch.all(scores <= 0) and torch.all(scores >= -2)  # -s, s a convex mix of distances in [0, 2]


def test_static_and_dynamic_differ_from_the_second_layer_on():
    static = make_model("static", 3, seed=3)
    dynamic = IASMModel(IASMConfig(matrix="dynamic", num_layers=3), torch.zeros(VOCAB, EMBED))
    dynamic.load_state_dict(static.state_dict())
    batch = pad_batch(*random_pairs(5, seed=4))
    with torch.no_grad():
        assert (static(*batch) - dynamic(*batch)).abs().min() > 1e-5
        # with one layer only A^(0) is ever used, so eq. 2 and eq. 3 cannot differ
        static_one, dynamic_one = make_model("static", 1, seed=5), make_model("dynamic", 1, seed=5)
        torch.testing.assert_close(static_one(*batch), dynamic_one(*batch))


def test_matrices_follow_eq2_and_eq3():
    batch = pad_batch([[3, 4, 5]], [[6, 7, 8, 9]])
    static = make_model("static", 3, seed=6).interactive_attention(*batch, final_matrix=True)
    torch.testing.assert_close(static.matrices[1], static.matrices[0].transpose(1, 2))
    torch.testing.assert_close(static.matrices[2], static.matrices[0])
    model = make_model("dynamic", 1, seed=7, alpha=0.6, beta=0.4)
    with torch.no_grad():
        trace = model.interactive_attention(*batch, final_matrix=True)
    initial, updated = trace.matrices[0][0], trace.matrices[1][0]
    for i in range(4):  # rows of A^(1): Q^(1) lives on the document's 4 positions
        for j in range(3):
            local = float(F.cosine_similarity(trace.query_n[0, i], trace.doc_n[0, j], dim=0))
            assert float(updated[i, j]) == pytest.approx(0.6 * local + 0.4 * float(initial[j, i]), abs=1e-6)


def test_softmax_aggregation_weighs_each_row_by_its_closest_matches():
    # the same one-layer, W = I set-up as the hand computation below: q = ((1,0), (0,1)), d = ((1,0), (1,1))
    weights = torch.tensor([[0.0, 0.0], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    model = IASMModel(IASMConfig(num_layers=1, aggregation="softmax", temperature=0.05), weights)
    with torch.no_grad():
        for layer in (model.query_layers[0], model.doc_layers[0]):
            layer.weight.copy_(torch.eye(2))
            layer.bias.zero_()
    trace = model.interactive_attention(*pad_batch([[2, 3]], [[2, 4]]))
    # A0 = [[1, s], [0, s]]: query word (1,0) matches document word (1,0) exactly (cosine 1 against .71),
    # so at temperature .05 its update is nearly that word alone (weight e^-5.9 = .003 on (1,1));
    # query word (0,1) takes (1,1), its only match (weight 1 - e^-14)
    small = 1 / (1 + math.exp((1 - 1 / math.sqrt(2)) / 0.05))
    expected = torch.tensor([[1.0, small], [1.0, 1.0]])
    torch.testing.assert_close(trace.doc_n[0], expected, atol=1e-5, rtol=1e-4)
    # each document position takes its closest query word: (1,0) -> (1,0); (1,1) ties -> the mean
    torch.testing.assert_close(trace.query_n[0], torch.tensor([[1.0, 0.0], [0.5, 0.5]]), atol=1e-3, rtol=0)
    with pytest.raises(ConfigError, match="aggregation"):
        IASMConfig(aggregation="max")
    with pytest.raises(ConfigError, match="temperature"):
        IASMConfig(aggregation="softmax", temperature=0)


def test_eq8_against_a_hand_computation():
    # vocabulary rows: 0 pad, 1 oov, 2 = (1, 0), 3 = (0, 1), 4 = (1, 1); one layer, W = I, b = 0
    weights = torch.tensor([[0.0, 0.0], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    model = IASMModel(IASMConfig(num_layers=1, gamma=0.3, delta=0.7), weights)
    with torch.no_grad():
        for layer in (model.query_layers[0], model.doc_layers[0]):
            layer.weight.copy_(torch.eye(2))
            layer.bias.zero_()
    # q = ((1,0), (0,1)), d = ((1,0), (1,1)); A0 = [[1, s], [0, s]], s = 1/sqrt(2)
    # Q1 = relu(A0^T Q0) = [[1, 0], [s, s]];  D1 = relu(A0 D0) = [[1 + s, s], [s, s]]
    s = 1 / math.sqrt(2)
    q0, d0 = [[1, 0], [0, 1]], [[1, 0], [1, 1]]
    q1, d1 = [[1, 0], [s, s]], [[1 + s, s], [s, s]]

    def dist(a, b):
        norm_a = math.sqrt(sum(x * x for row in a for x in row))
        norm_b = math.sqrt(sum(x * x for row in b for x in row))
        return math.sqrt(sum((x / norm_a - y / norm_b) ** 2 for ra, rb in zip(a, b) for x, y in zip(ra, rb)))

    expected = 0.3 * dist(q0, d1) + 0.7 * dist(d0, q1)
    batch = pad_batch([[2, 3]], [[2, 4]])
    trace = model.interactive_attention(*batch)
    torch.testing.assert_close(trace.matrices[0][0], torch.tensor([[1.0, s], [0.0, s]]))
    torch.testing.assert_close(trace.query_n[0], torch.tensor(q1))
    torch.testing.assert_close(trace.doc_n[0], torch.tensor(d1))
    with torch.no_grad():
        assert float(model(*batch)) == pytest.approx(-expected, abs=1e-6)
    # the weights must follow the channels: swapping gamma and delta changes the score
    assert abs(dist(q0, d1) - dist(d0, q1)) > 1e-3


def test_normalized_distance_ignores_scale_and_zero_rows():
    a = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    b = torch.tensor([[[0.0, 5.0], [0.0, 0.0]]])
    torch.testing.assert_close(normalized_distance(a, b), torch.tensor([math.sqrt(2.0)]))
    torch.testing.assert_close(normalized_distance(3 * a, a), torch.tensor([0.0]))


def test_trainer_hinge_on_the_module_score_is_eq9():
    model = make_model("dynamic", 3, seed=8)
    queries, docs = random_pairs(6, seed=9)
    batch = pad_batch(queries, docs)
    distances = model.distance(model.interactive_attention(*batch))
    scores = model(*batch)
    units = [(None, [None, None], [1.0, 0.0])] * 3  # rows (0,1), (2,3), (4,5): (true, corrupted)
    margin = 0.3
    got = Trainer(None, TrainConfig(loss="hinge", margin=margin)).loss(scores, units)
    expected = torch.clamp(margin + distances[0::2] - distances[1::2], min=0).mean()
    torch.testing.assert_close(got, expected)


def test_config_validation_and_defaults():
    config = IASMConfig()
    assert (config.matrix, config.alpha, config.beta, config.gamma, config.delta) == ("dynamic", .75, .25, .5, .5)
    assert IASMStaticConfig().matrix == "static"
    for bad in (dict(matrix="both"), dict(num_layers=2), dict(num_layers=0), dict(alpha=-1.0),
                dict(gamma=0.0, delta=0.0)):
        with pytest.raises(ValueError):
            IASMConfig(**bad)


# ------------------------------------------------------------------------------ Table VII statistic


def test_matrix_variance_over_real_cells_only():
    matrix = torch.tensor([[[1.0, 3.0, 99.0], [-50.0, 7.0, 8.0]]])
    mask = torch.tensor([[[True, True, False], [False, False, False]]])
    torch.testing.assert_close(matrix_variance(matrix, mask), torch.tensor([1.0]))  # var(1, 3)


def test_variance_drop_on_a_constructed_trace():
    query_mask = torch.tensor([[True, True], [True, True]])
    doc_mask = torch.tensor([[True, True, False], [True, True, False]])
    sparse = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # var over the 4 real cells: 0.1875
    smooth = torch.tensor([[0.5, 0.4, 0.0], [0.3, 0.4, 0.0]])  # var: 0.005
    initial = torch.stack([sparse, smooth])
    final = torch.stack([smooth, sparse]).transpose(1, 2).clone()  # A^(1) is [B, Ld, Lq]
    final[:, 2, :] = 1000.0  # padding cells must not count
    empty = torch.zeros(2, 1, 1)
    trace = InteractiveAttentionTrace(empty, empty, empty, empty, [initial, final], query_mask, doc_mask)
    assert variance_dropped(trace).tolist() == [True, False]
    with pytest.raises(ValueError):
        variance_dropped(InteractiveAttentionTrace(empty, empty, empty, empty, [initial], query_mask, doc_mask))


# ---------------------------------------------------------------------------- through the framework

WORDS = [f"w{i}" for i in range(40)]


def fitted(cls, tmp_path, **options):
    settings = dict(num_layers=3, epochs=3, learning_rate=0.01, batch_size=16, negatives=3, device="cpu")
    return fit_on_tiny_dataset(cls, tmp_path, WORDS, settings, **options)


@pytest.mark.parametrize("cls", [IASMReranker, IASMStaticReranker])
def test_tiny_fit_lowers_the_margin_loss(cls, tmp_path):
    reranker, report, _ = fitted(cls, tmp_path)
    assert reranker.train_config.loss == "hinge" and reranker.train_config.margin == 0.1
    assert reranker.model_config.matrix == ("static" if cls is IASMStaticReranker else "dynamic")
    assert not reranker.module.embedding.weight.requires_grad
    helpers.assert_the_loss_falls(report, epochs=3)


def test_save_load_round_trip_and_variance_drop_share(tmp_path):
    reranker, _, train = fitted(IASMReranker, tmp_path, epochs=1)
    path = tmp_path / "iasm.pt"
    reranker.save(path)
    loaded = IASMReranker.load(path)
    assert loaded.model_config == reranker.model_config
    for query_id in list(train.queries)[:4]:
        docs = [train.docs[h.doc_id] for h in train.candidates[query_id]]
        assert loaded.score(train.queries[query_id], docs) == reranker.score(train.queries[query_id], docs)
    with pytest.raises(CheckpointError):
        IASMStaticReranker.load(path)

    share = matrix_variance_drop(loaded, train, batch_size=5)
    pairs = [(train.queries[q], train.docs[h.doc_id]) for q in train.queries for h in train.candidates[q]]
    with torch.no_grad():
        batch = loaded.encode(pairs)
        trace = loaded.module.interactive_attention(
            batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"], final_matrix=True)
    assert share == pytest.approx(variance_dropped(trace).float().mean().item())
    relevant = matrix_variance_drop(loaded, train, relevant_only=True)
    assert 0.0 <= relevant <= 1.0

    static = IASMStaticReranker.from_options({"num_layers": 3})
    static.vocab, static.idf, static.module = loaded.vocab, loaded.idf, IASMModel(
        IASMStaticConfig(num_layers=3), loaded.module.embedding.weight.detach())
    assert matrix_variance_drop(static, train) == 0.0  # eq. 3 only transposes: the variance never changes
