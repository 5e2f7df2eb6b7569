"""Tests for rerankers.hcan: shapes, masking, phrase conventions, eq. 1, learning."""

import pytest
import torch
import torch.nn.functional as F

from rerankers.hcan import (
    HCANConfig,
    HCANModel,
    hcan_phrase_lengths,
    hcan_query_phrases,
    relevance_matching_features,
)
from tests.helpers import overfit_one_batch

VOCAB, EMBED = 50, 12


def small_config(encoder="deep", matching="full", **overrides):
    params = dict(
        encoder=encoder, matching=matching, num_layers=3, kernel_size=2,
        num_filters=16, hidden_dim=8, dropout=0.1, query_slots=8,
    )
    params.update(overrides)
    return HCANConfig(**params)


def make_model(config, seed=0):
    torch.manual_seed(seed)
    return HCANModel(config, torch.randn(VOCAB, EMBED))


def pad_batch(queries, docs, idfs, num_levels, extra_q=0, extra_d=0, garbage=True):
    """Right-pad a list of pairs; padding gets random ids and IDFs when ``garbage``."""
    lq = max(len(q) for q in queries) + extra_q
    ld = max(len(d) for d in docs) + extra_d
    b = len(queries)
    if garbage:
        q_ids, d_ids = torch.randint(2, VOCAB, (b, lq)), torch.randint(2, VOCAB, (b, ld))
    else:
        q_ids, d_ids = torch.zeros(b, lq, dtype=torch.long), torch.zeros(b, ld, dtype=torch.long)
    q_mask, d_mask = torch.zeros(b, lq, dtype=torch.bool), torch.zeros(b, ld, dtype=torch.bool)
    idf = torch.rand(b, num_levels, lq) * 5 if garbage else torch.zeros(b, num_levels, lq)
    for row, (q, d, w) in enumerate(zip(queries, docs, idfs)):
        q_ids[row, : len(q)], q_mask[row, : len(q)] = torch.tensor(q), True
        d_ids[row, : len(d)], d_mask[row, : len(d)] = torch.tensor(d), True
        idf[row, :, : len(q)] = w
    return q_ids, q_mask, d_ids, d_mask, idf


def random_pairs(num, num_levels, seed):
    gen = torch.Generator().manual_seed(seed)
    queries, docs, idfs = [], [], []
    for _ in range(num):
        lq = int(torch.randint(1, 7, (1,), generator=gen))
        ld = int(torch.randint(1, 15, (1,), generator=gen))
        queries.append(torch.randint(2, VOCAB, (lq,), generator=gen).tolist())
        docs.append(torch.randint(2, VOCAB, (ld,), generator=gen).tolist())
        idfs.append(torch.rand(num_levels, lq, generator=gen) * 5)
    return queries, docs, idfs


def test_query_longer_than_max_query_len():
    config = small_config(query_slots=4)
    model = make_model(config).eval()
    levels = config.num_layers + 1
    q, d, w = [[3, 4, 5]], [[3, 9, 10, 11]], [torch.rand(levels, 3)]
    with torch.no_grad():
        short = model(*pad_batch(q, d, w, levels))
        # extra padding columns past query_slots are fine ...
        long_padding = model(*pad_batch(q, d, w, levels, extra_q=5))
    torch.testing.assert_close(long_padding, short)
    # ... real tokens past it are not
    with pytest.raises(ValueError, match="query_slots"):
        model(*pad_batch([[3, 4, 5, 6, 7]], d, [torch.rand(levels, 5)], levels))


def test_query_idf_shape_is_checked():
    config = small_config()
    model = make_model(config)
    q_ids, q_mask, d_ids, d_mask, idf = pad_batch([[3, 4]], [[5, 6]], [torch.rand(4, 2)], 4)
    with pytest.raises(ValueError, match="query_idf"):
        model(q_ids, q_mask, d_ids, d_mask, idf[:, :2])
    with pytest.raises(ValueError, match="query_idf"):
        model(q_ids, q_mask, d_ids, d_mask, None)


def test_phrase_lengths_per_encoder():
    assert hcan_phrase_lengths(HCANConfig(encoder="deep", num_layers=4, kernel_size=2)) == [1, 2, 3, 4, 5]
    assert hcan_phrase_lengths(HCANConfig(encoder="deep", num_layers=3, kernel_size=3)) == [1, 3, 5, 7]
    assert hcan_phrase_lengths(HCANConfig(encoder="wide", num_layers=3, kernel_size=3)) == [1, 3, 4, 5]
    assert hcan_phrase_lengths(HCANConfig(encoder="contextual", num_layers=4)) == [1, 1, 1, 1, 1]
    phrases = hcan_query_phrases(["a", "b", "c"], HCANConfig(encoder="deep", num_layers=2, kernel_size=2))
    assert phrases == [
        [("a",), ("b",), ("c",)],
        [("a", "b"), ("b", "c"), ("c",)],
        [("a", "b", "c"), ("b", "c"), ("c",)],
    ]


@pytest.mark.parametrize("encoder,kernel_size", [("deep", 2), ("deep", 3), ("wide", 2), ("wide", 3)])
def test_encoder_position_covers_the_documented_phrase(encoder, kernel_size):
    """Position i of level l must depend on tokens i..i+n_l-1 and on nothing else."""
    config = small_config(encoder, kernel_size=kernel_size, num_filters=32)
    model = make_model(config).eval()
    lengths = hcan_phrase_lengths(config)
    seq_len, token = 9, 4
    torch.manual_seed(5)
    x = torch.randn(1, seq_len, EMBED)
    mask = torch.ones(1, seq_len, dtype=torch.bool)
    bumped = x.clone()
    bumped[0, token] += 3.0
    with torch.no_grad():
        base, moved = model.encoder(x, mask), model.encoder(bumped, mask)
    for level, (a, b) in enumerate(zip(base, moved), start=1):
        changed = ((a - b).abs().sum(-1)[0] > 1e-6).tolist()
        expected = [i <= token <= i + lengths[level] - 1 for i in range(seq_len)]
        assert changed == expected, f"level {level}"


def test_relevance_matching_eq1_hand_example():
    # One query phrase matching context phrase 0 exactly; second query position is padding.
    u_q = torch.tensor([[[2.0, 0.0], [9.0, 9.0]]])
    u_c = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [1.0, 0.0], [7.0, 7.0]]])
    q_mask = torch.tensor([[True, False]])
    d_mask = torch.tensor([[True, True, True, False]])
    idf = torch.tensor([[3.0, 5.0]])
    sims = torch.tensor([4.0, 0.0, 2.0])  # U_q U_c^T over the real context
    ctx = torch.softmax(sims, dim=0)
    got = relevance_matching_features(u_q, u_c, q_mask, d_mask, idf, softmax_over="context")
    torch.testing.assert_close(got[0, :, 0], torch.stack([3.0 * ctx.max(), torch.tensor(3.0 / 3)]))
    assert torch.all(got[0, :, 1] == 0)
    # Released-code variant: normalise over the query axis (one real query phrase -> all ones).
    got_q = relevance_matching_features(u_q, u_c, q_mask, d_mask, idf, softmax_over="query")
    torch.testing.assert_close(got_q[0, :, 0], torch.tensor([3.0, 3.0]))
    # No softmax: cosines (1, 0, 1) over the real context; the exact match reads 1 whatever else is there
    got_none = relevance_matching_features(u_q, u_c, q_mask, d_mask, idf, softmax_over="none")
    torch.testing.assert_close(got_none[0, :, 0], torch.tensor([3.0 * 1.0, 3.0 * 2.0 / 3]))
    assert torch.all(got_none[0, :, 1] == 0)


def test_rm_scores_depend_on_documents_only_through_idf_weighted_matches():
    config = small_config("deep", "rm")
    model = make_model(config).eval()
    levels = config.num_layers + 1
    queries, docs, _ = random_pairs(4, levels, seed=6)
    zero_idf = [torch.zeros(levels, len(q)) for q in queries]
    one_idf = [torch.ones(levels, len(q)) for q in queries]
    with torch.no_grad():
        zero = model(*pad_batch(queries, docs, zero_idf, levels))
        weighted = model(*pad_batch(queries, docs, one_idf, levels))
    # With all weights 0 every RM feature is 0, so every pair gets the same score.
    torch.testing.assert_close(zero, zero[:1].expand(4))
    assert weighted.std() > 1e-4


def test_sm_mode_ignores_idf():
    config = small_config("deep", "sm")
    model = make_model(config).eval()
    q_ids, q_mask, d_ids, d_mask, idf = pad_batch(*random_pairs(3, 4, seed=7), 4)
    with torch.no_grad():
        torch.testing.assert_close(model(q_ids, q_mask, d_ids, d_mask, None), model(q_ids, q_mask, d_ids, d_mask, idf))


def test_freeze_embeddings_and_config_validation():
    model = HCANModel(small_config(), torch.randn(VOCAB, EMBED), freeze_embeddings=True)
    assert not model.embedding.weight.requires_grad
    with pytest.raises(ValueError):
        HCANConfig(encoder="transformer")
    with pytest.raises(ValueError, match="rm_null_logit"):
        HCANConfig(rm_softmax_over="none", rm_null_logit=True)
    with pytest.raises(ValueError):
        HCANConfig(matching="both")
    with pytest.raises(ValueError):
        HCANConfig(hidden_dim=151)


@pytest.mark.parametrize("matching", ["full", "rm"])
def test_tiny_overfit_relevant_docs_share_query_words(matching):
    config = small_config("deep", matching, num_layers=2, dropout=0.0)
    model = make_model(config, seed=11)
    levels = config.num_layers + 1
    gen = torch.Generator().manual_seed(12)
    queries, docs, labels = [], [], []
    for _ in range(4):
        words = torch.randperm(VOCAB - 2, generator=gen)[:11] + 2
        query, others = words[:3].tolist(), words[3:].tolist()
        relevant = query + others[:4]
        relevant = [relevant[i] for i in torch.randperm(len(relevant), generator=gen)]
        queries += [query, query]
        docs += [relevant, others]  # non-relevant: same length, no query word
        labels += [1.0, 0.0]
    idfs = [torch.full((levels, 3), 2.0) for _ in queries]
    batch = pad_batch(queries, docs, idfs, levels, garbage=False)
    target = torch.tensor(labels)
    losses, scores = overfit_one_batch(model, batch, lambda scores: F.binary_cross_entropy_with_logits(scores, target),
                                       steps=150, lr=3e-3)
    assert losses[-1] < 0.25 * losses[0]
    assert scores[target == 1].min() > scores[target == 0].max()


@pytest.mark.parametrize("sm_pooling", ["last", "maxmean"])
@pytest.mark.parametrize("encoder", ["deep", "contextual"])
def test_factored_scoring_equals_the_lstm_over_h(encoder, sm_pooling, monkeypatch):
    """Scoring projects H's attention-weighted blocks per query token (SemanticMatching._scoring_gates) and
    runs only the recurrence (MaskedBiLSTM.forward_from_gates): the same scores as the LSTM over H itself,
    with padding and an empty document, at the defaults' hidden sizes and in a small model."""
    from rerankers.hcan import SemanticMatching

    for config in (small_config(encoder, sm_pooling=sm_pooling), HCANConfig(encoder=encoder, sm_pooling=sm_pooling)):
        model = make_model(config, seed=3).eval()
        levels = config.num_layers + 1
        queries, docs, idfs = random_pairs(9, levels, seed=5)
        docs[4] = []  # a document with no real token: zero states, as the LSTM gives
        q_ids, q_mask, d_ids, d_mask, idf = pad_batch(queries, [d or [2] for d in docs], idfs, levels, extra_d=3)
        d_mask[4] = False
        with torch.no_grad():
            monkeypatch.setattr(SemanticMatching, "factored_scoring", False)
            reference = model(q_ids, q_mask, d_ids, d_mask, idf)
            monkeypatch.setattr(SemanticMatching, "factored_scoring", True)
            factored = model(q_ids, q_mask, d_ids, d_mask, idf)
        assert torch.allclose(factored, reference, atol=1e-5, rtol=1e-5)


def test_forward_from_gates_equals_the_bilstm():
    """MaskedBiLSTM.forward_from_gates on x W_ih^T + b equals the module on x (outputs and final states)."""
    from rerankers.blocks import MaskedBiLSTM

    torch.manual_seed(0)
    lstm = MaskedBiLSTM(6, 5).eval()
    x = torch.randn(4, 7, 6)
    mask = torch.arange(7)[None, :] < torch.tensor([7, 3, 1, 0])[:, None]
    module = lstm.lstm
    weight = torch.cat([module.weight_ih_l0, module.weight_ih_l0_reverse])
    bias = torch.cat([module.bias_ih_l0 + module.bias_hh_l0, module.bias_ih_l0_reverse + module.bias_hh_l0_reverse])
    with torch.no_grad():
        outputs, last = lstm(x, mask)
        got_outputs, got_last = lstm.forward_from_gates(F.linear(x, weight, bias), mask)
    assert torch.allclose(got_outputs, outputs, atol=1e-5)
    assert torch.allclose(got_last, last, atol=1e-5)
    assert not got_last[3].any() and not got_outputs[3].any()
    with pytest.raises(ValueError):
        lstm.forward_from_gates(torch.zeros(4, 7, 3), mask)


def test_prepare_reads_the_cached_vocabulary_idf_and_embeddings(tmp_path, monkeypatch):
    """The second preparation on the same texts and options reads the vocabulary, IDF and embedding matrix
    from <home>/cache/vocabulary (the same values, nothing rebuilt); other texts or options miss; a damaged
    file is rebuilt."""
    from pipeline.core import vocabulary as text
    from rerankers.hcan import HCANReranker
    from rerankers.training.data import RankingData
    from tests.helpers import tiny_dataset

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    words = [f"w{i}" for i in range(30)]

    def prepared(dataset, **options):
        reranker = HCANReranker.from_options({"embeddings": "random", "embedding_dim": 8, "num_filters": 8,
                                              "hidden_dim": 4, "num_layers": 2, **options}, seed=1)
        reranker.prepare(RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage), dataset)
        return reranker

    first = prepared(tiny_dataset(words))
    files = list((tmp_path / "cache" / "vocabulary").glob("*.pt"))
    assert len(files) == 1
    build = text.IDFStatistics.build
    monkeypatch.setattr(text.IDFStatistics, "build", lambda *a, **k: pytest.fail("rebuilt despite the cache"))
    second = prepared(tiny_dataset(words))
    assert second.vocab.tokens == first.vocab.tokens and second.idf == first.idf
    assert torch.equal(second.module.embedding.weight, first.module.embedding.weight)
    monkeypatch.setattr(text.IDFStatistics, "build", build)
    other = prepared(tiny_dataset(words[::-1], seed=2))              # other texts: another entry
    assert other.vocab.tokens != first.vocab.tokens
    prepared(tiny_dataset(words), embedding_dim=6)                    # other options: another entry
    assert len(list((tmp_path / "cache" / "vocabulary").glob("*.pt"))) == 3
    files[0].write_bytes(files[0].read_bytes()[:-40])                 # damaged: rebuilt, same values
    again = prepared(tiny_dataset(words))
    assert again.vocab.tokens == first.vocab.tokens and again.idf == first.idf
    assert torch.equal(again.module.embedding.weight, first.module.embedding.weight)
