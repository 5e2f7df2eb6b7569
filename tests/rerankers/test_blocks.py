"""Tests for rerankers.blocks: masking, interaction matrices, pooling, layers."""

import math

import pytest
import torch
import torch.nn.functional as F

from rerankers import blocks


def make_mask(lengths, max_len):
    return torch.arange(max_len).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


# ---------------------------------------------------------------- masking


def test_masked_softmax_partial_rows_match_softmax_over_real_entries():
    torch.manual_seed(0)
    scores = torch.randn(3, 6)
    mask = make_mask([6, 4, 1], 6)
    probs = blocks.masked_softmax(scores, mask, dim=-1)
    for row, length in enumerate([6, 4, 1]):
        expected = torch.softmax(scores[row, :length], dim=-1)
        torch.testing.assert_close(probs[row, :length], expected)
        assert torch.all(probs[row, length:] == 0)


def test_masked_softmax_fully_masked_row_is_zero_without_nan_in_value_or_grad():
    scores = torch.randn(2, 5, requires_grad=True)
    mask = make_mask([5, 0], 5)
    probs = blocks.masked_softmax(scores, mask, dim=-1)
    assert torch.all(probs[1] == 0)
    assert not torch.isnan(probs).any()
    (probs * torch.arange(5.0)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[1] == 0)


def test_masked_softmax_over_non_last_dim_with_broadcast_mask():
    torch.manual_seed(1)
    scores = torch.randn(2, 4, 3)
    mask = make_mask([2, 4], 4)  # [B, 4], broadcast over the last dim
    probs = blocks.masked_softmax(scores, mask, dim=1)
    torch.testing.assert_close(probs[0, :2], torch.softmax(scores[0, :2], dim=0))
    assert torch.all(probs[0, 2:] == 0)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(2, 3))


def test_masked_max_mean_sum_against_reference():
    torch.manual_seed(2)
    x = torch.randn(3, 5, 2) - 10.0  # all negative: a zero from padding would win a plain max
    lengths = [5, 2, 0]
    mask = make_mask(lengths, 5)
    got_max = blocks.masked_max(x, mask, dim=1)
    got_mean = blocks.masked_mean(x, mask, dim=1)
    got_sum = blocks.masked_sum(x, mask, dim=1)
    for row, length in enumerate(lengths):
        if length == 0:
            expected_max = expected_mean = expected_sum = torch.zeros(2)
        else:
            expected_max = x[row, :length].max(dim=0).values
            expected_mean = x[row, :length].mean(dim=0)
            expected_sum = x[row, :length].sum(dim=0)
        torch.testing.assert_close(got_max[row], expected_max)
        torch.testing.assert_close(got_mean[row], expected_mean)
        torch.testing.assert_close(got_sum[row], expected_sum)


def test_masked_fill_padding_zeroes_only_padding():
    x = torch.ones(2, 3, 4)
    out = blocks.masked_fill_padding(x, make_mask([3, 1], 3))
    assert out[0].sum() == 12 and out[1].sum() == 4 and torch.all(out[1, 1:] == 0)


# ------------------------------------------------------ interaction matrices


def test_dot_and_bilinear_matrices_match_explicit_sums():
    torch.manual_seed(3)
    q, d = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    w2, w3 = torch.randn(4, 4), torch.randn(3, 4, 4)
    dot = blocks.dot_matrix(q, d)
    bil = blocks.bilinear_matrix(q, d, w2)
    bil3 = blocks.bilinear_matrix(q, d, w3)
    assert bil3.shape == (2, 3, 3, 5)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                assert math.isclose(dot[b, i, j], float(q[b, i] @ d[b, j]), rel_tol=1e-5, abs_tol=1e-5)
                assert math.isclose(bil[b, i, j], float(q[b, i] @ w2 @ d[b, j]), rel_tol=1e-4, abs_tol=1e-4)
                for c in range(3):
                    expected = float(q[b, i] @ w3[c] @ d[b, j])
                    assert math.isclose(bil3[b, c, i, j], expected, rel_tol=1e-4, abs_tol=1e-4)


def test_bilinear_interaction_with_linear_terms_matches_formula():
    torch.manual_seed(4)
    layer = blocks.BilinearInteraction(4, 6, linear_terms=True, bias=True)
    with torch.no_grad():
        layer.bias.fill_(0.5)
    q, d = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    got = layer(q, d)
    w, wq, wd = layer.weight[0], layer.q_linear[0], layer.d_linear[0]
    expected = (q @ wq).unsqueeze(-1) + (d @ wd).unsqueeze(-2) + q @ w @ d.transpose(1, 2) + 0.5
    torch.testing.assert_close(got, expected)
    assert blocks.BilinearInteraction(4, 6, channels=7)(q, d).shape == (2, 7, 3, 5)


def test_cosine_matrix_values_and_exact_zero_padding():
    torch.manual_seed(5)
    q, d = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    q_mask, d_mask = make_mask([4, 2], 4), make_mask([3, 6], 6)
    sim = blocks.cosine_matrix(q, d, q_mask, d_mask)
    expected = F.cosine_similarity(q.unsqueeze(2), d.unsqueeze(1), dim=-1)
    cells = blocks.interaction_mask(q_mask, d_mask)
    torch.testing.assert_close(sim[cells], expected[cells])
    assert torch.all(sim[~cells] == 0)
    # Zero vectors (padding embeddings) must give 0, not NaN.
    assert torch.all(blocks.cosine_matrix(torch.zeros(1, 2, 3), torch.randn(1, 2, 3)) == 0)


def test_bidaf_coattention_matches_unpadded_computation():
    torch.manual_seed(6)
    q, d = torch.randn(2, 4, 3), torch.randn(2, 6, 3)
    scores = torch.randn(2, 4, 6)
    q_len, d_len = [4, 2], [6, 3]
    q_aware, summary = blocks.bidaf_coattention(scores, q, d, make_mask(q_len, 4), make_mask(d_len, 6))
    for b in range(2):
        s = scores[b, : q_len[b], : d_len[b]]
        alpha = torch.softmax(s, dim=0)
        torch.testing.assert_close(q_aware[b, : d_len[b]], alpha.t() @ q[b, : q_len[b]])
        assert torch.all(q_aware[b, d_len[b] :] == 0)
        beta = torch.softmax(s.max(dim=0).values, dim=0)
        torch.testing.assert_close(summary[b], beta @ d[b, : d_len[b]])


# ------------------------------------------------------------------ pooling


def brute_force_kmax(values, real, k):
    kept = sorted((v for v, r in zip(values, real) if r), reverse=True)[:k]
    return kept + [0.0] * (k - len(kept))


@pytest.mark.parametrize("k", [1, 3, 9])
def test_kmax_pooling_matches_brute_force(k):
    torch.manual_seed(7)
    x = torch.randn(6, 7) - 5.0  # negative, so selecting a padding 0 would be visible
    mask = make_mask([7, 5, 3, 1, 0, 7], 7)
    got = blocks.kmax_pooling(x, k, dim=-1, mask=mask)
    assert got.shape == (6, k)
    for row in range(6):
        expected = brute_force_kmax(x[row].tolist(), mask[row].tolist(), k)
        torch.testing.assert_close(got[row], torch.tensor(expected))


def test_kmax_pooling_along_middle_dim_without_mask():
    torch.manual_seed(8)
    x = torch.randn(2, 5, 3)
    got = blocks.kmax_pooling(x, 2, dim=1)
    expected = x.sort(dim=1, descending=True).values[:, :2]
    torch.testing.assert_close(got, expected)


def test_kernel_mus_sigmas_knrm_defaults():
    mus, sigmas = blocks.kernel_mus_sigmas(11)
    expected_mus = [1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9]
    torch.testing.assert_close(mus, torch.tensor(expected_mus))
    torch.testing.assert_close(sigmas, torch.tensor([1e-3] + [0.1] * 10))


def test_gaussian_kernel_pooling_hand_computed():
    # One pair: 2 real query terms + 1 padded; 2 real doc terms + 1 padded.
    # Padding cells hold 0.5, which would add exp(0)=1 to the mu=0.5 kernel if counted.
    sim = torch.tensor([[[1.0, 0.0, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]])
    q_mask, d_mask = make_mask([2], 3), make_mask([2], 3)
    mus, sigmas = torch.tensor([1.0, 0.5]), torch.tensor([1e-3, 0.5])
    got = blocks.gaussian_kernel_pooling(sim, q_mask, d_mask, mus, sigmas)
    # exact kernel: row 0 has one exact match -> log(1); row 1 has none -> log(1e-10)
    exact = math.log(1.0) + math.log(1e-10)
    # soft kernel mu=0.5, sigma=0.5: exp(-(x-0.5)^2 / 0.5)
    g = lambda x: math.exp(-((x - 0.5) ** 2) / 0.5)  # noqa: E731
    soft = math.log(g(1.0) + g(0.0)) + math.log(g(0.5) + g(0.5))
    torch.testing.assert_close(got, torch.tensor([[exact, soft]]), rtol=1e-5, atol=1e-4)


def test_matching_histogram_hand_computed():
    # bins=5: [-1,-.5) [-.5,0) [0,.5) [.5,1) [1,1]; the padded doc cell (0.6) must not count.
    sim = torch.tensor([[[1.0, 0.6, -0.2, 0.6], [0.3, 0.3, 0.3, 0.3]]])
    q_mask, d_mask = make_mask([1], 2), make_mask([3], 4)
    lch = blocks.matching_histogram(sim, q_mask, d_mask, bins=5)
    ln2 = math.log(2.0)
    torch.testing.assert_close(lch[0, 0], torch.tensor([0.0, ln2, 0.0, ln2, ln2]))
    assert torch.all(lch[0, 1] == 0)  # padded query row
    ch = blocks.matching_histogram(sim, q_mask, d_mask, bins=5, mode="ch")
    torch.testing.assert_close(ch[0, 0], torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0]))
    nh = blocks.matching_histogram(sim, q_mask, d_mask, bins=5, mode="nh")
    torch.testing.assert_close(nh[0, 0], torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0]) / 3)
    # A cosine of 0.9999999 (rounding of an exact match) still lands in the exact bin.
    near = blocks.matching_histogram(torch.full((1, 1, 1), 0.9999999), make_mask([1], 1), make_mask([1], 1), 5, "ch")
    assert near[0, 0, 4] == 1


# ------------------------------------------------------------------- layers


def test_build_embedding_zero_padding_row_freeze_and_copy():
    weights = torch.randn(5, 3)
    original = weights.clone()
    emb = blocks.build_embedding(weights, freeze=True)
    assert torch.all(emb.weight[0] == 0)
    torch.testing.assert_close(emb.weight[1:], original[1:])
    assert not emb.weight.requires_grad
    torch.testing.assert_close(weights, original)  # caller's tensor untouched
    trainable = blocks.build_embedding(weights, freeze=False)
    assert trainable.weight.requires_grad
    trainable(torch.tensor([[0, 2]])).sum().backward()
    assert torch.all(trainable.weight.grad[0] == 0) and trainable.weight.grad[2].abs().sum() > 0


@pytest.mark.parametrize("side,expected_window", [("right", (0, 2)), ("left", (-2, 0)), ("center", (-1, 1))])
def test_masked_conv1d_padding_invariance_and_window(side, expected_window):
    torch.manual_seed(9)
    conv = blocks.MaskedConv1d(4, 8, 3, padding_side=side, activation=torch.nn.Identity())
    x = torch.randn(1, 5, 4)
    alone = conv(x, make_mask([5], 5))
    # Same sequence followed by garbage that the mask declares padding.
    padded_x = torch.cat([x, torch.randn(1, 4, 4) * 100], dim=1)
    padded = conv(padded_x, make_mask([5], 9))
    torch.testing.assert_close(padded[:, :5], alone)
    assert torch.all(padded[:, 5:] == 0)
    # Which outputs move when token 2 changes: exactly positions i with 2 in window(i).
    bumped = x.clone()
    bumped[0, 2] += 1.0
    changed = (conv(bumped, make_mask([5], 5)) - alone).abs().sum(-1)[0] > 1e-6
    lo, hi = expected_window
    expected = [lo <= 2 - i <= hi for i in range(5)]
    assert changed.tolist() == expected


def test_masked_bilstm_matches_lstm_on_unpadded_sequences():
    torch.manual_seed(10)
    layer = blocks.MaskedBiLSTM(3, 4, num_layers=2).eval()
    lengths = [5, 2, 0]
    x = torch.randn(3, 5, 3) * 10  # large garbage in padding would leak if not packed
    outputs, last = layer(x, make_mask(lengths, 5))
    assert outputs.shape == (3, 5, 8) and last.shape == (3, 8)
    for row, length in enumerate(lengths):
        if length == 0:
            assert torch.all(outputs[row] == 0) and torch.all(last[row] == 0)
            continue
        ref_out, (h_n, _) = layer.lstm(x[row : row + 1, :length])
        torch.testing.assert_close(outputs[row, :length], ref_out[0])
        assert torch.all(outputs[row, length:] == 0)
        torch.testing.assert_close(last[row], torch.cat([h_n[-2, 0], h_n[-1, 0]]))
        # the forward half of `last` is the output at the last real token, the backward half at token 0
        torch.testing.assert_close(last[row, :4], ref_out[0, -1, :4])
        torch.testing.assert_close(last[row, 4:], ref_out[0, 0, 4:])


def test_spatial_dropout_drops_whole_channels():
    torch.manual_seed(11)
    drop = blocks.SpatialDropout1d(0.5).train()
    out = drop(torch.ones(4, 6, 10))
    per_channel = out.transpose(1, 2)  # [B, D, L]
    # every channel is either all zero or all scaled, across positions
    assert torch.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))
    assert (out == 0).any() and (out == 2).any()


def test_feed_forward_layout():
    mlp = blocks.feed_forward([6, 5, 1], dropout=0.2)
    kinds = [type(m).__name__ for m in mlp]
    assert kinds == ["Linear", "ReLU", "Dropout", "Linear"]
    assert mlp(torch.randn(2, 6)).shape == (2, 1)
