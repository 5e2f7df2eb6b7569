"""One contract, every registered re-ranker (MatchZoo-py's "test every model" idea): built small, each scores
finite numbers, a document's score does not depend on the padding its batch needs or on the other queries in
the batch, a saved model loads back with the same scores, and the same seed builds the same model.

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

    # save / load round trip
    path = tmp_path / f"{name}.pt"
    reranker.save(path)
    loaded = reranker_class(name).load(path)
    for (query, docs), want in zip(items, per_query):
        close(want, loaded.score(query, docs))

    # determinism: the same seed builds the same model
    again = build(name, dataset, tiny_encoder)
    for (query, docs), want in zip(items, per_query):
        assert again.score(query, docs) == want


def test_a_word_level_model_scores_the_text_it_is_given_not_the_text_it_saw_under_that_id(dataset, items):
    """Tokens are cached by id and text (bounded): a service's client may send another text under a known id."""
    from pipeline.core.records import Doc

    reranker = build("knrm", dataset, "")
    query, docs = items[0]
    original = docs[0]
    other = Doc(original.doc_id, docs[-1].text if docs[-1].text != original.text else original.text + " extra")
    assert reranker.score(query, [original]) != reranker.score(query, [other])
    assert reranker.score(query, [other]) == reranker.score(query, [Doc("fresh-id", other.text)])
