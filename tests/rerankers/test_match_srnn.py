"""Tests for rerankers.match_srnn: eq. 3 cell by cell, the LCS analysis of Sec. 5, NTN, masking, the
bidirectional scan, learning, and the re-ranker's train/score/save/load cycle."""

import itertools
from functools import partial

import pytest
import torch

from pipeline.core.datasets import Dataset
from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
from rerankers.training.data import RankingData
from rerankers.training.config import TrainConfig
from rerankers.match_srnn import (
    BiMatchSRNNReranker,
    MatchSRNNConfig,
    MatchSRNNModel,
    MatchSRNNReranker,
    NeuralTensorNetwork,
    SpatialGRU,
    matching_path,
    reference_spatial_gru,
    reverse_within_lengths,
)
from rerankers.neural import TextConfig
from tests import helpers
from tests.helpers import one_torch_thread  # noqa: F401 (autouse fixture)

VOCAB, EMBED = 40, 8
pad_batch = partial(helpers.pad_batch, vocab=VOCAB)
random_pairs = partial(helpers.random_pairs, vocab=VOCAB)


def small_config(**overrides):
    params = dict(tensor_channels=4, hidden_dim=5)
    params.update(overrides)
    return MatchSRNNConfig(**params)


def make_model(bidirectional=False, seed=0, **overrides):
    torch.manual_seed(seed)
    return MatchSRNNModel(small_config(**overrides), torch.randn(VOCAB, EMBED), bidirectional=bidirectional)


# ----------------------------------------------------------------------------------- spatial GRU


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 5), (4, 1), (3, 7), (6, 4), (5, 5)])
def test_spatial_gru_equals_eq3_cell_by_cell(rows, cols):
    torch.manual_seed(rows * 10 + cols)
    gru = SpatialGRU(input_dim=3, hidden_dim=4).double()
    for parameter in gru.parameters():  # larger than the defaults, so every gate and reset matters
        torch.nn.init.uniform_(parameter, -1.0, 1.0)
    s = torch.randn(2, rows, cols, 3, dtype=torch.float64)
    states, gates = gru(s, return_gates=True)
    assert states.shape == (2, rows, cols, 4) and gates.shape == (2, rows, cols, 4, 4)
    for pair in range(2):
        torch.testing.assert_close(states[pair], reference_spatial_gru(gru, s[pair]), atol=1e-10, rtol=1e-10)
    # the reference carries leading (batch) dimensions along: one loop over the cells for both pairs
    torch.testing.assert_close(states, reference_spatial_gru(gru, s), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(gates.sum(-2), torch.ones(2, rows, cols, 4, dtype=torch.float64))


def test_spatial_gru_checks_its_input():
    with pytest.raises(ValueError, match=r"\[B, M, N, 3\]"):
        SpatialGRU(3, 2)(torch.randn(2, 4, 5, 2))


def lcs_table(x, y):
    c = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i, j in itertools.product(range(1, len(x) + 1), range(1, len(y) + 1)):
        c[i][j] = max(c[i][j - 1], c[i - 1][j], c[i - 1][j - 1] + (x[i - 1] == y[j - 1]))  # eq. 7
    return torch.tensor(c, dtype=torch.float64)[1:, 1:]


def lcs_spatial_gru(epsilon=1e-3, sharpness=30.0) -> SpatialGRU:
    """The degenerate Match-SRNN of Sec. 5.1: d = 1, s_ij = I[x_i = y_j], reset gates disabled.

    The state holds ``epsilon * c[i, j]``, so that tanh is close to linear. The candidate is
    ``h' = tanh(h_{i-1,j-1} + epsilon * s_ij)``, i.e. c[i-1, j-1] + I. The gates z_l, z_t and z_i read
    the three LCS terms scaled by ``sharpness / epsilon``, which turns SoftmaxByRow into the max of eq. 7.
    z_d is shut, since z_i carries the diagonal term.
    """
    gru = SpatialGRU(input_dim=1, hidden_dim=1).double()
    gain = sharpness / epsilon
    with torch.no_grad():
        weight = torch.zeros(7, 4, dtype=torch.float64)  # rows r_l r_t r_d z_i z_l z_t z_d; cols top left diag s
        bias = torch.zeros(7, dtype=torch.float64)
        bias[:3] = 50.0  # reset gates open: "disabled" (Sec. 5.1)
        weight[3, 2], weight[3, 3] = gain, sharpness  # z_i ~ (h_diag + epsilon * s) / epsilon
        weight[4, 1] = gain  # z_l ~ h_left
        weight[5, 0] = gain  # z_t ~ h_top
        bias[6] = -1e4  # z_d shut
        gru.gates.weight.copy_(weight)
        gru.gates.bias.copy_(bias)
        gru.candidate_input.weight.fill_(epsilon)
        gru.candidate_input.bias.zero_()
        gru.candidate_hidden.weight.copy_(torch.tensor([[0.0, 0.0, 1.0]]))  # U picks h_{i-1,j-1}
    return gru


def test_degenerate_match_srnn_reproduces_lcs_and_its_path():
    """Sec. 5.1-5.2: with hand-set weights, h_ij is the LCS length c[i, j], and backtracking the gates
    gives a common subsequence as long as the LCS."""
    epsilon = 1e-3
    gru = lcs_spatial_gru(epsilon)
    gen = torch.Generator().manual_seed(3)
    examples = [("ABCDE", "FACGD")]  # the paper's Figure 4 example
    for _ in range(12):
        lengths = torch.randint(1, 9, (2,), generator=gen).tolist()
        examples.append(tuple("".join("ABC"[k] for k in torch.randint(0, 3, (n,), generator=gen).tolist())
                              for n in lengths))
    for x, y in examples:
        s = torch.tensor([[float(a == b) for b in y] for a in x], dtype=torch.float64).view(1, len(x), len(y), 1)
        states, gates = gru(s, return_gates=True)
        expected = lcs_table(x, y)
        torch.testing.assert_close(states[0, ..., 0] / epsilon, expected, atol=0.05, rtol=0)
        path = matching_path(gates[0], len(x), len(y))
        assert path[0] == (len(x), len(y))
        for (i, j), (next_i, next_j) in zip(path, path[1:]):
            assert (i - next_i, j - next_j) in ((1, 1), (0, 1), (1, 0))
        matched = [(i, j) for k, (i, j) in enumerate(path)
                   if x[i - 1] == y[j - 1] and (k + 1 == len(path) or path[k + 1] == (i - 1, j - 1))]
        assert len(matched) == expected[-1, -1]
        assert "".join(x[i - 1] for i, _ in reversed(matched)) == "".join(y[j - 1] for _, j in reversed(matched))
    assert lcs_table("ABCDE", "FACGD")[-1, -1] == 3  # A, C, D


def test_matching_path_follows_the_requested_dimension():
    gates = torch.zeros(2, 2, 4, 2)
    gates[..., 3, :] = 0.6  # z_d in both dimensions
    gates[..., 1, 0] = 1.0  # dimension 0: left wins
    gates[..., 2, 1] = 1.0  # dimension 1: up wins
    assert matching_path(gates, 2, 2, dimension=0) == [(2, 2), (2, 1)]
    assert matching_path(gates, 2, 2, dimension=1) == [(2, 2), (1, 2)]
    assert matching_path(gates, 2, 2) == [(2, 2), (1, 1)]  # averaged: diagonal 0.6 > left 0.5 = up 0.5
    tied = torch.full((2, 2, 4, 1), 0.25)  # z_i + z_d = 0.5 > 0.25: diagonal
    tied[..., 0, 0] = 0.0  # z_d + z_i = 0.25 = z_l = z_t: ties go diagonal
    assert matching_path(tied, 2, 2) == [(2, 2), (1, 1)]


# ---------------------------------------------------------------------------------- tensor layer


def test_neural_tensor_network_equals_sec41_formula():
    torch.manual_seed(1)
    ntn = NeuralTensorNetwork(embedding_dim=3, channels=2)
    with torch.no_grad():
        ntn.bilinear.bias.copy_(torch.tensor([0.3, -0.2]))
    u, v = torch.randn(1, 2, 3), torch.randn(1, 4, 3)
    got = ntn(u, v)
    assert got.shape == (1, 2, 4, 2)
    b = ntn.bilinear
    for i, j, c in itertools.product(range(2), range(4), range(2)):
        linear = b.q_linear[c] @ u[0, i] + b.d_linear[c] @ v[0, j]  # W [u; v]
        expected = torch.relu(u[0, i] @ b.weight[c] @ v[0, j] + linear + b.bias[c])
        torch.testing.assert_close(got[0, i, j, c], expected)


def test_reverse_within_lengths_keeps_padding_in_place():
    cells = torch.arange(2 * 3 * 4).view(2, 3, 4, 1)
    rows, cols = torch.tensor([2, 3]), torch.tensor([3, 4])
    flipped = reverse_within_lengths(cells, rows, cols)[..., 0]
    torch.testing.assert_close(flipped[0, :2, :3], cells[0, :2, :3, 0].flip(0, 1))
    # the padding row and column stay after the real block; each axis is permuted on its own
    torch.testing.assert_close(flipped[0, 2], cells[0, 2, [2, 1, 0, 3], 0])
    torch.testing.assert_close(flipped[0, :, 3], cells[0, [1, 0, 2], 3, 0])
    torch.testing.assert_close(flipped[1], cells[1, ..., 0].flip(0, 1))


# ----------------------------------------------------------------------------------------- model


def test_unidirectional_score_is_eq5_on_the_real_corner():
    model = make_model().eval()
    queries, docs = random_pairs(3, seed=4)
    with torch.no_grad():
        scores = model(*pad_batch(queries, docs, extra_q=2, extra_d=2))
        for row, (q, d) in enumerate(zip(queries, docs)):
            cells = model.tensor_network(model.embedding(torch.tensor([q])), model.embedding(torch.tensor([d])))
            h_mn = model.forward_rnn(cells)[0, -1, -1]
            torch.testing.assert_close(scores[row], model.scorer(h_mn)[0], atol=1e-5, rtol=1e-5)


def test_backward_scan_is_the_forward_recursion_on_reversed_texts():
    """Bi-Match-SRNN: the second half of [h_mn; h~_11] is the backward GRU run on both texts reversed."""
    model = make_model(bidirectional=True).eval()
    queries, docs = random_pairs(4, seed=5)
    with torch.no_grad():
        both = model.global_interaction(*pad_batch(queries, docs, extra_d=3))
        for row, (q, d) in enumerate(zip(queries, docs)):
            def last_state(rnn, q_ids, d_ids):
                query, doc = model.embedding(torch.tensor([q_ids])), model.embedding(torch.tensor([d_ids]))
                cells = model.tensor_network(query, doc)
                return rnn(cells)[0, -1, -1]

            torch.testing.assert_close(both[row, :5], last_state(model.forward_rnn, q, d), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(both[row, 5:], last_state(model.backward_rnn, q[::-1], d[::-1]),
                                       atol=1e-5, rtol=1e-5)
    assert model.scorer.in_features == 10


def test_the_two_scan_directions_differ():
    """A spatial GRU is not symmetric: with the same weights, both directions see different prefixes."""
    model = make_model(bidirectional=True).eval()
    model.backward_rnn.load_state_dict(model.forward_rnn.state_dict())
    with torch.no_grad():
        both = model.global_interaction(*pad_batch([[3, 4, 5, 6]], [[7, 3, 9, 4, 11]]))
    assert (both[0, :5] - both[0, 5:]).abs().max() > 1e-4


def test_empty_text_scores_the_bias():
    model = make_model().eval()
    q_ids, q_mask, d_ids, d_mask = pad_batch([[3, 4], [5]], [[6, 7, 8], [9, 10]])
    q_mask[1] = False
    with torch.no_grad():
        scores = model(q_ids, q_mask, d_ids, d_mask)
    torch.testing.assert_close(scores[1], model.scorer.bias[0])


def test_config_validation_init_scale_and_frozen_embeddings():
    for bad in ({"tensor_channels": 0}, {"hidden_dim": 0}, {"init_scale": -0.1}, {"init_scale": float("nan")}):
        with pytest.raises(ValueError):
            MatchSRNNConfig(**bad)
    weights = torch.randn(VOCAB, EMBED)
    model = MatchSRNNModel(small_config(init_scale=0.05), weights, bidirectional=True, freeze_embeddings=True)
    assert not model.embedding.weight.requires_grad
    torch.testing.assert_close(model.embedding.weight[1:], weights[1:])
    for name, parameter in model.named_parameters():
        if not name.startswith("embedding."):
            assert parameter.abs().max() <= 0.05, name
    with pytest.raises((ValueError, PipelineError)):
        MatchSRNNReranker.from_options({"hidden_dim": "0"})
    reranker = BiMatchSRNNReranker.from_options({"tensor_channels": "3", "epochs": "2"})
    assert reranker.model_config.tensor_channels == 3 and reranker.train_config.epochs == 2
    assert reranker.train_config.loss == "hinge" and reranker.train_config.margin == 1.0  # Sec. 4.4


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tiny_overfit_with_the_hinge_loss(bidirectional):
    """Relevant documents contain the query words in order, non-relevant ones do not (Sec. 4.4's loss)."""
    model = make_model(bidirectional, seed=11)
    gen = torch.Generator().manual_seed(12)
    queries, positives, negatives = [], [], []
    for _ in range(4):
        words = (torch.randperm(VOCAB - 2, generator=gen)[:10] + 2).tolist()
        queries.append(words[:3])
        positives.append(words[3:5] + words[:3] + words[5:7])
        negatives.append(words[3:10])
    batch = pad_batch(queries + queries, positives + negatives, garbage=False)
    losses, scores = helpers.overfit_one_batch(
        model, batch, lambda scores: torch.clamp(1.0 - scores[:4] + scores[4:], min=0).mean(), steps=60, lr=1e-2)
    assert losses[-1] < 0.1 * losses[0]
    assert (scores[:4] > scores[4:]).all()


# ------------------------------------------------------------------------------------- re-ranker


def tiny_dataset():
    words = [f"w{k}" for k in range(30)]
    docs, queries, qrels, candidates = [], {}, [], {}
    for q in range(6):
        topic = words[q * 4 : q * 4 + 3]
        queries[f"q{q}"] = Query(f"q{q}", " ".join(topic))
        hits = []
        for k in range(4):
            doc_id = f"q{q}d{k}"
            relevant = k == 0
            body = (topic + words[24 + k : 27 + k]) if relevant else words[(q * 4 + 5 * k + 7) % 24 :][:3] + words[27:]
            docs.append(Doc(doc_id, " ".join(body)))
            qrels.append(Qrel(f"q{q}", doc_id, int(relevant)))
            hits.append(ScoredDoc(f"q{q}", doc_id, float(-k)))
        candidates[f"q{q}"] = hits
    dataset = Dataset("tiny", queries, qrels, lambda: list(docs), "tiny-fp", splits={"train": list(queries)})
    return dataset, candidates


@pytest.mark.parametrize("cls", [MatchSRNNReranker, BiMatchSRNNReranker])
def test_reranker_trains_scores_saves_and_loads(cls, tmp_path):
    dataset, candidates = tiny_dataset()
    train = RankingData.from_dataset(dataset, list(dataset.queries), candidates)
    text = TextConfig(embeddings="random", embedding_dim=8, max_query_length=5, max_doc_length=8)
    train_config = TrainConfig(loss="hinge", epochs=2, batch_size=8, negatives=2, device="cpu")
    reranker = cls(small_config(), text, train_config, seed=3)
    assert MatchSRNNReranker().train_config.loss == "hinge"  # train_defaults
    reranker.prepare(train, dataset)
    assert isinstance(reranker.module, MatchSRNNModel) and reranker.module.bidirectional == cls.bidirectional
    report = reranker.fit(train)
    assert len(report.epochs) == 2 and all(torch.isfinite(torch.tensor(e.loss)) for e in report.epochs)

    store = dataset.doc_store()
    query = dataset.queries["q1"]
    pool = [store[h.doc_id] for h in candidates["q1"]] + [store["q0d0"], store["q2d3"]]
    scores = reranker.score(query, pool)
    assert len(scores) == len(pool)
    # a document scores the same alone as among longer/shorter ones (padding)
    assert abs(reranker.score(query, [pool[2]])[0] - scores[2]) < 1e-5

    path = tmp_path / f"{cls.name}.pt"
    reranker.save(path)
    loaded = cls.load(path)
    assert loaded.module.bidirectional == cls.bidirectional
    assert max(abs(a - b) for a, b in zip(loaded.score(query, pool), scores)) < 1e-6
    other = BiMatchSRNNReranker if cls is MatchSRNNReranker else MatchSRNNReranker
    with pytest.raises(CheckpointError, match=cls.name):
        other.load(path)


# ------------------------------------------------------------------------- wavefront fast paths


def ragged_grid(seed=7, batch=5, rows=4, cols=6, channels=3):
    torch.manual_seed(seed)
    gru = SpatialGRU(input_dim=channels, hidden_dim=4)
    for parameter in gru.parameters():
        torch.nn.init.uniform_(parameter, -1.0, 1.0)
    s = torch.randn(batch, rows, cols, channels)
    return gru, s, torch.tensor([4, 1, 3, 0, 2]), torch.tensor([6, 2, 1, 5, 6])


def test_corners_equal_the_grid_at_each_real_corner_with_and_without_autograd():
    """corners() (only h_mn kept; in-place buffers without autograd) equals forward()'s grid, which equals eq. 3."""
    gru, s, rows, cols = ragged_grid()
    grid = gru(s)
    torch.testing.assert_close(grid, reference_spatial_gru(gru, s), atol=1e-6, rtol=1e-6)
    expected = torch.stack([grid[b, m - 1, n - 1] if m > 0 and n > 0 else torch.zeros(4)
                            for b, (m, n) in enumerate(zip(rows.tolist(), cols.tolist()))])
    with torch.no_grad():  # the in-place path
        torch.testing.assert_close(gru.corners(s, rows, cols), expected, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(gru(s), grid, atol=1e-6, rtol=1e-6)
    with torch.inference_mode():
        torch.testing.assert_close(gru.corners(s, rows, cols), expected, atol=1e-6, rtol=1e-6)
    x = s.clone().requires_grad_(True)
    corners = gru.corners(x, rows, cols)  # the autograd path
    torch.testing.assert_close(corners, expected, atol=1e-6, rtol=1e-6)
    corners.sum().backward()
    y = s.clone().requires_grad_(True)
    torch.stack([gru(y)[b, m - 1, n - 1] for b, (m, n) in enumerate(zip(rows.tolist(), cols.tolist()))
                 if m > 0 and n > 0]).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, atol=1e-6, rtol=1e-6)
    assert x.grad[3].abs().sum() == 0  # the empty pair reads nothing


@pytest.mark.parametrize("native", [False, True])
def test_bf16_autocast_products_stay_close_to_float32(monkeypatch, native):
    """Under bfloat16 autocast the step's products run in bfloat16 only where the CPU has bfloat16 matrix
    instructions (forced here); elsewhere the recursion stays float32 and equals it exactly."""
    import rerankers.match_srnn as module

    monkeypatch.setattr(module, "native_bf16", lambda: native)
    gru, s, rows, cols = ragged_grid(seed=8)
    with torch.no_grad():
        reference = gru.corners(s, rows, cols)
    x = s.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        corners = gru.corners(x, rows, cols)
        with torch.no_grad():
            scoring = gru.corners(s, rows, cols)
    assert corners.dtype == torch.float32 and scoring.dtype == torch.float32
    corners.sum().backward()
    assert torch.isfinite(x.grad).all() and all(p.grad is not None for p in gru.parameters())
    if native:
        torch.testing.assert_close(corners, reference, atol=5e-2, rtol=0)
        torch.testing.assert_close(scoring, reference, atol=5e-2, rtol=0)
        assert (corners - reference).abs().max() > 0  # bfloat16 did run
    else:
        torch.testing.assert_close(corners, reference, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(scoring, reference, atol=1e-6, rtol=1e-6)
