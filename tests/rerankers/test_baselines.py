"""Tests for the classic baselines (rerankers.knrm: KNRM, Conv-KNRM; rerankers.drmm; rerankers.matchpyramid) and blocks.masked_dynamic_max_pool2d."""

import importlib
import math
import random

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.errors import CheckpointError
from pipeline.core.vocabulary import IDFStatistics
from rerankers.drmm import DRMMConfig, DRMMModel, DRMMReranker
from rerankers.knrm import ConvKNRMConfig, ConvKNRMModel, ConvKNRMReranker, KNRMConfig, KNRMModel, KNRMReranker
from rerankers.matchpyramid import MatchPyramidConfig, MatchPyramidModel, MatchPyramidReranker
from rerankers.blocks import cosine_matrix, gaussian_kernel_pooling, masked_dynamic_max_pool2d, matching_histogram
from rerankers.neural import WordReranker
from tests.helpers import one_torch_thread  # noqa: F401 (autouse fixture)

VOCAB, EMBED = 40, 12

#: what the lead registers in rerankers/__init__.py
TARGETS = {
    "knrm": "rerankers.knrm:KNRMReranker",
    "conv-knrm": "rerankers.knrm:ConvKNRMReranker",
    "drmm": "rerankers.drmm:DRMMReranker",
    "matchpyramid": "rerankers.matchpyramid:MatchPyramidReranker",
}


# --------------------------------------------------------------------------------------- helpers

VARIANTS = {
    "knrm": lambda w: KNRMModel(KNRMConfig(), w),
    "knrm-linear": lambda w: KNRMModel(KNRMConfig(output_tanh=False), w),
    "conv-knrm": lambda w: ConvKNRMModel(ConvKNRMConfig(num_filters=8), w),
    "conv-knrm-no-cross": lambda w: ConvKNRMModel(ConvKNRMConfig(num_filters=8, cross_match=False), w),
    "drmm-idf": lambda w: DRMMModel(DRMMConfig(), w),
    "drmm-tv-nh": lambda w: DRMMModel(DRMMConfig(gating="tv", histogram="nh", hidden_sizes="6,4"), w),
    "matchpyramid-cosine": lambda w: MatchPyramidModel(MatchPyramidConfig(num_filters=4, hidden_size=8), w),
    "matchpyramid-dot": lambda w: MatchPyramidModel(MatchPyramidConfig(similarity="dot", num_filters=4), w),
    "matchpyramid-indicator": lambda w: MatchPyramidModel(
        MatchPyramidConfig(similarity="indicator", num_filters=4, kernel_height=2, kernel_width=4), w),
    "matchpyramid-gaussian": lambda w: MatchPyramidModel(
        MatchPyramidConfig(similarity="gaussian", num_filters=4, pool_query=2, pool_doc=5), w),
}


def make_model(variant, seed=0):
    torch.manual_seed(seed)
    return VARIANTS[variant](torch.randn(VOCAB, EMBED))


def random_pairs(num, seed, max_query=6, max_doc=15):
    gen = torch.Generator().manual_seed(seed)
    queries, docs, idfs = [], [], []
    for _ in range(num):
        lq = int(torch.randint(1, max_query + 1, (1,), generator=gen))
        ld = int(torch.randint(1, max_doc + 1, (1,), generator=gen))
        query = torch.randint(2, VOCAB, (lq,), generator=gen).tolist()
        # some query words in the document, so exact-match kernels/bins are exercised
        doc = torch.randint(2, VOCAB, (ld,), generator=gen).tolist()
        doc[: min(2, ld)] = query[: min(2, ld)]
        queries.append(query)
        docs.append(doc)
        idfs.append((torch.rand(lq, generator=gen) * 5).tolist())
    return queries, docs, idfs


def pad_batch(queries, docs, idfs, extra_q=0, extra_d=0, garbage=True):
    """Right-padded model inputs; with ``garbage`` the padding holds random ids and IDFs (masks say it is padding)."""
    lq = max(map(len, queries)) + extra_q
    ld = max(map(len, docs)) + extra_d
    b = len(queries)
    if garbage:
        q_ids, d_ids = torch.randint(2, VOCAB, (b, lq)), torch.randint(2, VOCAB, (b, ld))
        idf = torch.rand(b, lq) * 9
    else:
        q_ids, d_ids = torch.zeros(b, lq, dtype=torch.long), torch.zeros(b, ld, dtype=torch.long)
        idf = torch.zeros(b, lq)
    q_mask, d_mask = torch.zeros(b, lq, dtype=torch.bool), torch.zeros(b, ld, dtype=torch.bool)
    for row, (q, d, w) in enumerate(zip(queries, docs, idfs)):
        q_ids[row, : len(q)], q_mask[row, : len(q)] = torch.tensor(q), True
        d_ids[row, : len(d)], d_mask[row, : len(d)] = torch.tensor(d), True
        idf[row, : len(q)] = torch.tensor(w)
    return {"query_ids": q_ids, "query_mask": q_mask, "doc_ids": d_ids, "doc_mask": d_mask, "query_idf": idf}


def call(model, batch):
    """Run ``model`` on a :func:`pad_batch` dict, passing IDFs only to a model that takes them."""
    inputs = dict(batch)
    if not isinstance(model, DRMMModel):
        inputs.pop("query_idf")
    return model(**inputs)


# ------------------------------------------------------------------------------------------- KNRM


def test_knrm_kernels_are_the_papers_eleven():
    model = make_model("knrm")
    expected_mus = [1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9]
    torch.testing.assert_close(model.kernel_pooling.mus, torch.tensor(expected_mus))
    torch.testing.assert_close(model.kernel_pooling.sigmas, torch.tensor([1e-3] + [0.1] * 10))
    assert model.ranker.in_features == 11
    # buffers follow the module to its device; kept out of checkpoints, which hold learned weights only
    assert {"kernel_pooling.mus", "kernel_pooling.sigmas"} <= dict(model.named_buffers()).keys()
    assert not any(key.startswith("kernel_pooling") for key in model.state_dict())


def test_knrm_kernel_features_hand_example():
    # 2-d embeddings whose cosines are 1, 0 and +-1/sqrt(2)
    weights = torch.zeros(6, 2)
    weights[2], weights[3], weights[4], weights[5] = torch.tensor([1.0, 0]), torch.tensor([0, 1.0]), torch.tensor([1.0, 1]), torch.tensor([1.0, -1])
    model = KNRMModel(KNRMConfig(), weights).eval()
    root = 1 / math.sqrt(2)
    translation = [[1.0, root, root], [0.0, root, -root]]  # query [2, 3] x document [2, 4, 5]
    mus = [1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9]
    sigmas = [1e-3] + [0.1] * 10
    expected = [
        0.01 * sum(math.log(max(sum(math.exp(-((m - mu) ** 2) / (2 * s**2)) for m in row), 1e-10)) for row in translation)
        for mu, s in zip(mus, sigmas)
    ]
    # padding on both sides (with ids that would match) must not count
    batch = pad_batch([[2, 3]], [[2, 4, 5]], [[0.0, 0.0]], extra_q=2, extra_d=3)
    batch["query_ids"][0, 2:] = 2
    batch["doc_ids"][0, 3:] = 2
    with torch.no_grad():
        features = model.kernel_features(batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"])
        score = call(model, batch)
    torch.testing.assert_close(features[0], torch.tensor(expected), atol=1e-5, rtol=1e-5)
    # eq. 4: tanh(w^T phi + b)
    linear = model.ranker.weight[0] @ torch.tensor(expected) + model.ranker.bias[0]
    torch.testing.assert_close(score[0], torch.tanh(linear).detach(), atol=1e-5, rtol=1e-5)


# -------------------------------------------------------------------------------------- Conv-KNRM


def test_conv_knrm_cross_matches_every_ngram_size_pair():
    model = make_model("conv-knrm").eval()
    assert model.config.ngram_pairs == [(hq, hd) for hq in (1, 2, 3) for hd in (1, 2, 3)]
    assert ConvKNRMConfig(cross_match=False).ngram_pairs == [(1, 1), (2, 2), (3, 3)]
    batch = pad_batch(*random_pairs(3, seed=4), extra_d=2)
    q_ids, q_mask, d_ids, d_mask = (batch[k] for k in ("query_ids", "query_mask", "doc_ids", "doc_mask"))
    with torch.no_grad():
        features = model.kernel_features(q_ids, q_mask, d_ids, d_mask)
        assert features.shape == (3, 11 * 9)
        pooling = model.kernel_pooling
        for index, (hq, hd) in enumerate(model.config.ngram_pairs):
            query_grams = model.ngram_convs[hq - 1](model.embedding(q_ids), q_mask)
            doc_grams = model.ngram_convs[hd - 1](model.embedding(d_ids), d_mask)
            expected = gaussian_kernel_pooling(cosine_matrix(query_grams, doc_grams, q_mask, d_mask), q_mask, d_mask,
                                               pooling.mus, pooling.sigmas, scale=0.01)
            torch.testing.assert_close(features[:, index * 11 : (index + 1) * 11], expected)
    assert make_model("conv-knrm-no-cross").ranker.in_features == 11 * 3


def test_conv_knrm_ngram_at_position_i_covers_tokens_i_to_i_plus_h_minus_1():
    model = make_model("conv-knrm").eval()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    changed_token = 3
    bumped = ids.clone()
    bumped[0, changed_token] = 20
    with torch.no_grad():
        for h, conv in enumerate(model.ngram_convs, start=1):
            before, after = conv(model.embedding(ids), mask), conv(model.embedding(bumped), mask)
            changed = ((before - after).abs().sum(-1)[0] > 1e-6).tolist()
            assert changed == [i <= changed_token <= i + h - 1 for i in range(7)], f"h={h}"


# ------------------------------------------------------------------------------------------- DRMM


def test_drmm_gates_sum_to_one_over_real_query_terms():
    model = make_model("drmm-idf")
    queries, docs, idfs = random_pairs(5, seed=5)
    batch = pad_batch(queries, docs, idfs, extra_q=2)
    with torch.no_grad():
        model.gate_weight.fill_(0.7)
        gates = model.term_gates(batch["query_ids"], batch["query_mask"], batch["query_idf"])
    torch.testing.assert_close(gates.sum(-1), torch.ones(5))
    assert torch.all(gates[~batch["query_mask"]] == 0)
    for row, weights in enumerate(idfs):  # eq. 2: softmax of w_g * idf over the real terms
        torch.testing.assert_close(gates[row, : len(weights)], torch.softmax(0.7 * torch.tensor(weights), 0))
    tv_model = make_model("drmm-tv-nh")
    tv_gates = tv_model.term_gates(batch["query_ids"], batch["query_mask"])
    torch.testing.assert_close(tv_gates.sum(-1), torch.ones(5))
    assert torch.all(tv_gates[~batch["query_mask"]] == 0)


def test_drmm_score_is_gated_sum_of_per_term_histogram_scores():
    model = make_model("drmm-idf").eval()
    assert not model.embedding.weight.requires_grad  # fixed embeddings, as in the paper
    # query term 5 occurs twice in the document: 2 exact matches in the last of 30 bins
    batch = pad_batch([[5, 9]], [[5, 3, 5, 4]], [[1.5, 3.0]], extra_d=2)
    q_ids, q_mask, d_ids, d_mask, idf = batch.values()
    with torch.no_grad():
        histograms = model.histograms(q_ids, q_mask, d_ids, d_mask)
        assert histograms.shape == (1, 2, 30)
        assert histograms[0, 0, -1] == pytest.approx(math.log(3.0))  # LCH: log(1 + count)
        assert histograms[0, 0].sum() > histograms[0, 0, -1]  # the other two words land in soft bins
        expected_histograms = matching_histogram(
            cosine_matrix(model.embedding(q_ids), model.embedding(d_ids), q_mask, d_mask), q_mask, d_mask, 30, "lch")
        torch.testing.assert_close(histograms, expected_histograms)
        term_scores = model.matching_network(histograms).squeeze(-1)
        # eq. 1 has tanh on the output unit too: even a huge last layer keeps term scores in [-1, 1]
        saturated = model.matching_network
        saturated[0][-1].weight.mul_(1e3)
        assert torch.all(saturated(histograms).abs() <= 1)
        saturated[0][-1].weight.div_(1e3)
        gates = torch.softmax(torch.tensor([1.5, 3.0]), 0)  # w_g starts at 1
        torch.testing.assert_close(model(q_ids, q_mask, d_ids, d_mask, idf), (gates * term_scores[0]).sum().view(1))


def test_drmm_with_idf_gating_requires_idf():
    model = make_model("drmm-idf")
    batch = pad_batch([[3, 4]], [[5, 6]], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="query_idf"):
        model(batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"])
    with pytest.raises(ValueError, match="query_idf"):
        model(batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"], batch["query_idf"][:, :1])


def test_drmm_reranker_features_are_collection_idf():
    # the real statistics of a four-document collection: "rare" in 1 document, "common" in 4, "other" in none
    docs = [["rare", "common"], ["common"], ["common", "word"], ["common"]]
    reranker = DRMMReranker()
    reranker.idf = IDFStatistics.build(docs)
    idf = lambda df: math.log(1 + (4 - df + 0.5) / (df + 0.5))        # BM25's IDF over N = 4 documents
    features = reranker.features([["rare", "common"], ["other"]], 3)
    torch.testing.assert_close(features["query_idf"], torch.tensor([[idf(1), idf(4), 0.0], [idf(0), 0.0, 0.0]]))
    assert idf(0) > idf(1) > idf(4) > 0
    assert DRMMReranker.from_options({"gating": "tv"}).features([["rare"]], 1) == {}


# ----------------------------------------------------------------------------------- MatchPyramid


def test_matchpyramid_matrix_and_pooling_wiring():
    model = make_model("matchpyramid-indicator").eval()
    batch = pad_batch([[3, 4], [5, 6, 7]], [[4, 3, 3, 9], [7, 8]], [[0.0] * 2, [0.0] * 3], extra_d=3)
    q_ids, q_mask, d_ids, d_mask, _ = batch.values()
    with torch.no_grad():
        matrix = model.matching_matrix(q_ids, q_mask, d_ids, d_mask)
        expected = torch.zeros_like(matrix)
        expected[0, 0, 1] = expected[0, 0, 2] = expected[0, 1, 0] = 1.0  # AAAI eq. 1: indicator of equal words
        expected[1, 2, 0] = 1.0
        torch.testing.assert_close(matrix, expected)
        pooled = model.pooled_features(q_ids, q_mask, d_ids, d_mask)
        assert pooled.shape == (2, 4, 3, 10)
        for row, (n, m) in enumerate([(2, 4), (3, 2)]):
            alone = F.relu(model.conv(F.pad(matrix[row : row + 1, :n, :m].unsqueeze(1), model.conv_padding)))
            torch.testing.assert_close(pooled[row : row + 1], F.adaptive_max_pool2d(alone, (3, 10)))


@pytest.mark.parametrize("similarity", ["cosine", "dot", "gaussian"])
def test_matchpyramid_similarities_are_zero_on_padding(similarity):
    model = MatchPyramidModel(MatchPyramidConfig(similarity=similarity), torch.randn(VOCAB, EMBED))
    batch = pad_batch(*random_pairs(4, seed=6), extra_q=2, extra_d=3)
    matrix = model.matching_matrix(batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"])
    cells = batch["query_mask"].unsqueeze(-1) & batch["doc_mask"].unsqueeze(-2)
    assert torch.all(matrix[~cells] == 0)
    assert torch.all(matrix[cells] != 0)


# ------------------------------------------------------------------------ blocks.masked_dynamic_max_pool2d


@pytest.mark.parametrize("output_size", [(3, 10), (2, 2), (1, 1), (4, 7)])
def test_dynamic_pooling_equals_adaptive_pooling_of_each_real_region(output_size):
    torch.manual_seed(7)
    lengths = [(1, 1), (2, 3), (3, 17), (5, 9), (9, 20)]
    x = torch.randn(len(lengths), 3, 9, 20) * 10  # padding cells hold large garbage
    q_mask = torch.stack([torch.arange(9) < n for n, _ in lengths])
    d_mask = torch.stack([torch.arange(20) < m for _, m in lengths])
    pooled = masked_dynamic_max_pool2d(x, q_mask, d_mask, output_size)
    assert pooled.shape == (len(lengths), 3, *output_size)
    for row, (n, m) in enumerate(lengths):
        torch.testing.assert_close(pooled[row], F.adaptive_max_pool2d(x[row : row + 1, :, :n, :m], output_size)[0])


def test_dynamic_pooling_ignores_padding_and_sends_gradients_to_real_cells_only():
    torch.manual_seed(8)
    x = torch.randn(2, 2, 6, 12, requires_grad=True)
    q_mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    d_mask = torch.tensor([[True] * 5 + [False] * 7, [True] * 12])
    masked_dynamic_max_pool2d(x, q_mask, d_mask, (3, 4)).sum().backward()
    cells = (q_mask.unsqueeze(-1) & d_mask.unsqueeze(-2)).unsqueeze(1).expand_as(x)
    assert torch.all(x.grad[~cells] == 0)
    assert x.grad[cells].abs().sum() > 0
    empty = masked_dynamic_max_pool2d(x.detach(), torch.zeros(2, 6, dtype=torch.bool), d_mask, (3, 4))
    assert torch.all(empty == 0)
    with pytest.raises(ValueError):
        masked_dynamic_max_pool2d(x, q_mask, d_mask, (0, 4))


# --------------------------------------------------------------------------------- configs, registry


@pytest.mark.parametrize("config_class,bad", [
    (KNRMConfig, {"n_kernels": 1}), (KNRMConfig, {"sigma": 0.0}), (KNRMConfig, {"log_scale": -1.0}),
    (ConvKNRMConfig, {"max_ngram": 0}), (ConvKNRMConfig, {"num_filters": 0}), (ConvKNRMConfig, {"exact_sigma": 0.0}),
    (DRMMConfig, {"bins": 1}), (DRMMConfig, {"histogram": "pdf"}), (DRMMConfig, {"gating": "bm25"}),
    (DRMMConfig, {"hidden_sizes": "5,x"}), (DRMMConfig, {"hidden_sizes": "5,0"}),
    (MatchPyramidConfig, {"similarity": "jaccard"}), (MatchPyramidConfig, {"pool_doc": 0}),
    (MatchPyramidConfig, {"kernel_height": 0}),
])
def test_configs_reject_bad_values(config_class, bad):
    with pytest.raises(ValueError):
        config_class(**bad)


def test_cli_options_reach_the_configs():
    reranker = ConvKNRMReranker.from_options({"max_ngram": "2", "cross_match": "false", "epochs": "3"})
    assert reranker.model_config.max_ngram == 2 and reranker.model_config.cross_match is False
    assert reranker.train_config.epochs == 3 and reranker.train_config.loss == "hinge"
    assert DRMMReranker().train_config.learning_rate == pytest.approx(1e-2)
    with pytest.raises(ValueError):
        KNRMReranker.from_options({"n_kernels": "1"})


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_registry_targets_resolve(name):
    module, _, attribute = TARGETS[name].partition(":")
    cls = getattr(importlib.import_module(module), attribute)
    assert issubclass(cls, WordReranker) and cls.name == name
    assert cls.train_defaults["loss"] == "hinge"


# ------------------------------------------------------------------------ through the real framework

FRAMEWORK = {
    "knrm": (KNRMReranker, {}),
    "conv-knrm": (ConvKNRMReranker, {"num_filters": 8}),
    "drmm": (DRMMReranker, {"learning_rate": 3e-2}),
    "matchpyramid": (MatchPyramidReranker, {"num_filters": 8}),
}


@pytest.fixture(scope="module")
def wikiqa_train(data_root):
    from pipeline.core.datasets import load_dataset
    from rerankers.training.data import RankingData

    dataset = load_dataset("wikiqa")
    train = RankingData.from_dataset(dataset, dataset.splits["train"][:20], dataset.first_stage)
    return dataset, train


def _fixed_set_loss(reranker, units):
    from rerankers.training.loop import Trainer

    reranker.module.eval()
    with torch.no_grad():
        pairs = [(query, doc) for query, docs, _ in units for doc in docs]
        return float(Trainer(reranker, reranker.train_config).loss(reranker.forward(reranker.encode(pairs)), units))


@pytest.fixture(scope="module", params=sorted(FRAMEWORK))
def trained(request, wikiqa_train):
    """A re-ranker prepared and fitted on 20 WikiQA training queries, with its fixed-set loss before and after."""
    from rerankers.training.loop import Trainer

    dataset, train = wikiqa_train
    cls, options = FRAMEWORK[request.param]
    reranker = cls.from_options({"epochs": 5, "learning_rate": 1e-2, "negatives": 2, **options})
    reranker.prepare(train, dataset)
    units = Trainer(reranker, reranker.train_config).epoch_units(train, random.Random(0))
    before = _fixed_set_loss(reranker, units)
    report = reranker.fit(train)
    after = _fixed_set_loss(reranker, units)
    return reranker, train, report, before, after


def test_training_through_the_framework_lowers_the_loss(trained):
    reranker, _, report, before, after = trained
    losses = [epoch.loss for epoch in report.epochs]
    assert len(losses) == 5 and all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0], losses
    assert after < 0.95 * before, (reranker.name, before, after)


def test_framework_scores_do_not_depend_on_batch_company(trained):
    reranker, train, *_ = trained
    query_id = next(q for q in sorted(train.queries) if len(train.candidates[q]) >= 5)
    query = train.queries[query_id]
    docs = [train.docs[hit.doc_id] for hit in train.candidates[query_id]]
    together = reranker.score(query, docs)
    alone = [reranker.score(query, [doc])[0] for doc in docs]
    assert together == pytest.approx(alone, abs=1e-5)
    assert len(set(round(s, 6) for s in together)) > 1


def test_checkpoint_round_trip_gives_identical_scores(trained, tmp_path):
    reranker, train, *_ = trained
    path = tmp_path / f"{reranker.name}.pt"
    reranker.save(path)
    loaded = type(reranker).load(path)
    assert loaded.model_config == reranker.model_config
    for query_id in sorted(train.queries)[:3]:
        docs = [train.docs[hit.doc_id] for hit in train.candidates[query_id]]
        assert loaded.score(train.queries[query_id], docs) == reranker.score(train.queries[query_id], docs)
    other = KNRMReranker if type(reranker) is not KNRMReranker else DRMMReranker
    with pytest.raises(CheckpointError):
        other.load(path)
