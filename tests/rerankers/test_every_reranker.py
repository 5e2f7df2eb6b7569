"""One contract, every registered re-ranker (MatchZoo-py's "test every model" idea): built small, each scores
finite numbers, a document's score does not depend on the padding its batch needs or on the other queries in
the batch, a saved model (its weights changed, as by training) loads back with the same scores, and the same
seed builds the same model. At the level of ``encode``/``forward``, for the defaults and for the option
variants in :data:`VARIANTS` that take other code paths: padding never changes a score (with random ids in a
word-level model's padding), and in training mode each pair gets one finite score (and, word-level, every
trainable parameter a gradient). These replaced the per-model copies of them in the model tests.

The list is the registry itself (:func:`rerankers.available`, entry points included), so a re-ranker added
to it is tested here without editing this file. Word-level models are prepared on the varied synthetic
collection of ``test_batched_scoring`` with random 16-d embeddings; transformer models on a tiny random BERT.
"""
from __future__ import annotations

import math

import pytest
import torch

from rerankers import available, reranker_class
from tests.helpers import one_torch_thread  # noqa: F401  (autouse fixture)
from tests.helpers import make_tiny_encoder
from tests.helpers import (
    BATCHING_TOLERANCE as TOLERANCE, TRANSFORMER_RERANKERS as TRANSFORMERS, batched, transformer_model, varied_dataset,
    word_model,
)

NAMES = sorted(set(available()) - {"none"})


@pytest.fixture(scope="module")
def dataset():
    return varied_dataset()


@pytest.fixture(scope="module")
def items(dataset):
    store = dataset.doc_store()
    return [(dataset.queries[q], [store[h.doc_id] for h in hits]) for q, hits in dataset.first_stage.items() if hits]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def build(name: str, dataset, tiny_encoder: str, seed: int = 1):
    if name in TRANSFORMERS:
        return transformer_model(name, tiny_encoder, seed=seed)
    return word_model(name, dataset, seed=seed)


def close(expected, got) -> None:
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                               atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_reranker_keeps_the_contract(name, dataset, items, tiny_encoder, tmp_path):
    reranker = build(name, dataset, tiny_encoder)
    assert reranker.name == name

    # finite scores, one per document, in the order given
    per_query = [reranker.score(query, docs) for query, docs in items]
    assert [len(scores) for scores in per_query] == [len(docs) for _, docs in items]
    assert all(math.isfinite(score) for scores in per_query for score in scores)

    # padding: a short document scores the same alone and beside the longest one (which pads the batch)
    query, docs = max(items, key=lambda item: len(item[1]))
    short = min(docs, key=lambda doc: len(doc.text.split()))
    longest = max((doc for _, candidates in items for doc in candidates), key=lambda doc: len(doc.text.split()))
    close(reranker.score(query, [short]), reranker.score(query, [short, longest])[:1])

    # batch composition: scoring all queries together gives each query's own scores
    for want, have in zip(per_query, batched(reranker, items).score_many(items, batch_size=5)):
        close(want, have)

    # determinism: the same seed builds the same model
    again = build(name, dataset, tiny_encoder)
    for (query, docs), want in zip(items, per_query):
        assert again.score(query, docs) == want
    module = getattr(reranker, "module", None)

    # save / load round trip, of weights a fresh build of the same seed does not have (as after training)
    if isinstance(module, torch.nn.Module):
        reranker = build(name, dataset, tiny_encoder)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for parameter in reranker.module.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
        per_query = [reranker.score(query, docs) for query, docs in items]
        assert per_query != [again.score(query, docs) for query, docs in items]
    path = tmp_path / f"{name}.pt"
    reranker.save(path)
    loaded = reranker_class(name).load(path)
    for (query, docs), want in zip(items, per_query):
        close(want, loaded.score(query, docs))


#: options of registered re-rankers that take other code paths, each checked by the padding contract below
#: besides the defaults (the variants its per-model copies used to check, with their small sizes)
_MVLSTM = dict(hidden_size=6, top_k=7, tensor_channels=3)   # top_k over the real cells of short pairs: zero-filled slots
_HCAN = dict(num_layers=3, kernel_size=2, num_filters=16, hidden_dim=8, query_slots=8)
_SRNN = dict(tensor_channels=4, hidden_dim=5)
VARIANTS = {
    "mvlstm": [dict(_MVLSTM, interaction=interaction) for interaction in ("cosine", "bilinear", "tensor")],
    "amvlstm": [dict(_MVLSTM, attention=attention, interaction=interaction)
                for attention in ("q", "a", "qa") for interaction in ("cosine", "bilinear", "tensor")]
               + [dict(_MVLSTM, attention="qa", interaction="tensor", mlp_hidden=4, dropout=0.3)],
    "hcan": [dict(_HCAN, encoder=encoder, matching=matching)
             for encoder in ("deep", "wide", "contextual") for matching in ("rm", "sm", "full")]
            + [dict(_HCAN, sm_pooling=pooling, rm_softmax_over=over)
               for pooling, over in (("last", "context"), ("maxmean", "query"), ("last", "none"))],
    "iasm": [dict(num_layers=1), dict(num_layers=3, aggregation="softmax")],   # and the default 5 layers
    "iasm-static": [dict(num_layers=3)],
    "knrm": [dict(output_tanh=False)],
    "conv-knrm": [dict(num_filters=8), dict(num_filters=8, cross_match=False)],
    "drmm": [dict(gating="tv", histogram="nh", hidden_sizes="6,4")],
    "matchpyramid": [dict(num_filters=4, hidden_size=8), dict(similarity="dot", num_filters=4),
                     dict(similarity="indicator", num_filters=4, kernel_height=2, kernel_width=4),
                     dict(similarity="gaussian", num_filters=4, pool_query=2, pool_doc=5)],
    "match-srnn": [_SRNN],
    "bi-match-srnn": [_SRNN],
}
CASES = [(name, options) for name in NAMES for options in [{}, *VARIANTS.get(name, [])]]
CASE_IDS = [f"{name}-{number}" for name in NAMES for number in range(1 + len(VARIANTS.get(name, [])))]


def test_the_variants_are_of_registered_rerankers():
    assert set(VARIANTS) <= set(NAMES)


def garbage_padding(batch: dict, extra_q: int, extra_d: int, vocab_size: int, seed: int = 0) -> dict:
    """A word-level batch (``query_ids``/``query_mask``/``doc_ids``/``doc_mask`` and query features whose
    last axis is the query's) padded ``extra_q``/``extra_d`` positions wider, every padding position (the
    old ones too) holding random ids in ``[2, vocab_size)`` and random features: only the masks hide them."""
    gen = torch.Generator().manual_seed(seed)
    masks = {side: torch.cat([batch[f"{side}_mask"], torch.zeros(len(batch[f"{side}_mask"]), extra, dtype=torch.bool)],
                             dim=1) for side, extra in (("query", extra_q), ("doc", extra_d))}
    wide = {"query_mask": masks["query"], "doc_mask": masks["doc"]}
    for key, value in batch.items():
        if key.endswith("_mask"):
            continue
        side = "doc" if key.startswith("doc_") else "query"
        mask = masks[side].view(len(value), *[1] * (value.dim() - 2), -1)
        extra = extra_d if side == "doc" else extra_q
        value = torch.cat([value, torch.zeros(*value.shape[:-1], extra, dtype=value.dtype)], dim=-1)
        if value.dtype == torch.long:
            noise = torch.randint(2, vocab_size, value.shape, generator=gen)
        else:
            noise = torch.rand(value.shape, generator=gen) * 5
        wide[key] = torch.where(mask, value, noise)
    return wide


@pytest.fixture(scope="module")
def built() -> dict:
    """The models the two tests below build, built once for both (each sets the module mode it needs)."""
    return {}


def build_with(built: dict, name: str, options: dict, dataset, tiny_encoder: str):
    """Re-ranker ``name`` with ``options`` built small (ADDAX without its document cache, so that every
    ``forward`` encodes), once into ``built``; skips a re-ranker without ``encode``/``forward`` (a plugin:
    the contract test above checks it through ``score``)."""
    key = (name, repr(sorted(options.items())))
    if key not in built:
        if name in TRANSFORMERS:
            built[key] = transformer_model(name, tiny_encoder, **options,
                                           **({"doc_cache_size": 0} if "addax" in name else {}))
        else:
            built[key] = word_model(name, dataset, **options)
    reranker = built[key]
    if not (hasattr(reranker, "encode") and hasattr(reranker, "forward") and hasattr(reranker, "module")):
        pytest.skip(f"{name} has no encode/forward: the contract test above checks it through score()")
    return reranker


def mixed_pairs(items) -> list:
    """(query, document) pairs of different queries and lengths, an empty query and an empty document
    among them, and the longest document."""
    from pipeline.core.records import Doc, Query

    docs = [doc for _, candidates in items for doc in candidates]
    pairs = [(query, docs[(7 * number) % len(docs)]) for number, (query, _) in enumerate(items)]
    return pairs + [(Query("empty", ""), docs[0]), (items[0][0], Doc("empty", "")),
                    (items[1][0], max(docs, key=lambda doc: len(doc.text)))]


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_padding_never_changes_a_score(name, options, items, dataset, tiny_encoder, built):
    """A pair scores the same alone (padded to its own length) as in a batch of other pairs padded to the
    longest of them, in any order; a word-level model's batch is padded wider still with random ids and
    features that only the masks hide. Empty texts included."""
    reranker = build_with(built, name, options, dataset, tiny_encoder)
    pairs = mixed_pairs(items)
    order = [(5 * k) % len(pairs) for k in range(len(pairs))]
    assert sorted(order) == list(range(len(pairs)))
    reranker.module.eval()
    with torch.no_grad():
        alone = torch.cat([reranker.forward(reranker.encode([pair])) for pair in pairs])
        batches = [(reranker.encode(pairs), list(range(len(pairs)))), (reranker.encode([pairs[k] for k in order]), order)]
        if "query_mask" in batches[0][0] and "doc_mask" in batches[0][0]:
            batches.append((garbage_padding(batches[0][0], 3, 9, len(reranker.vocab)), list(range(len(pairs)))))
        for batch, rows in batches:
            together = reranker.forward(batch)
            assert together.shape == (len(pairs),) and torch.isfinite(together).all()
            torch.testing.assert_close(together, alone[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_training_mode_gives_one_finite_score_per_pair(name, options, items, dataset, tiny_encoder, built):
    """In training mode (dropout on) a batch of pairs, empty texts included, gets one finite score each, and
    different pairs get different scores (the inputs reach the output). A word-level model trains its score
    alone, so every trainable parameter gets a gradient from it (a transformer's loss has other terms, e.g.
    ADDAX's denoiser, and BERT's pooler is unused)."""
    reranker = build_with(built, name, options, dataset, tiny_encoder)
    pairs = mixed_pairs(items)
    reranker.module.train()
    reranker.module.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    scores = reranker.forward(reranker.encode(pairs))
    assert scores.shape == (len(pairs),) and torch.isfinite(scores).all()
    assert scores.std() > 0
    if name not in TRANSFORMERS:
        scores.sum().backward()
        trainable = [(key, p) for key, p in reranker.module.named_parameters() if p.requires_grad]
        assert trainable
        assert not [key for key, p in trainable if p.grad is None or p.grad.abs().sum() == 0]


def test_a_word_level_model_scores_the_text_it_is_given_not_the_text_it_saw_under_that_id(dataset, items):
    """Tokens are cached by id and text (bounded): a service's client may send another text under a known id."""
    from pipeline.core.records import Doc

    reranker = build("knrm", dataset, "")
    query, docs = items[0]
    original = docs[0]
    other = Doc(original.doc_id, docs[-1].text if docs[-1].text != original.text else original.text + " extra")
    assert reranker.score(query, [original]) != reranker.score(query, [other])
    assert reranker.score(query, [other]) == reranker.score(query, [Doc("fresh-id", other.text)])
