"""Property-based tests (hypothesis) of the service's request parsing (issue 34, item 5): whatever the
body, every route answers a result or a 4xx with one JSON error line, never a 500 and never an exception.

The application is called in-process (Starlette's TestClient, which raises any exception of the app) with
a word-overlap scorer in place of a neural model, so the examples exercise decoding and validation, not
torch. Examples: ``EXAMPLES`` per test (raw bytes, any JSON value, near-valid bodies of every shape, valid
bodies of every shape with any text).
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from pipeline import serve
from pipeline.core.records import Doc
from tests.pipeline.serve.support import Overlap

EXAMPLES = 150
PATHS = ["/rerank", "/v1/rerank", "/v2/rerank", "/search"]


class WordOverlap:
    """Scores a document by the query words it contains: instant, deterministic, any text accepted."""

    name = "overlap"

    def score(self, query, docs):
        words = set(query.text.split())
        return [float(len(words & set(doc.text.split()))) for doc in docs]

    def score_many(self, items, batch_size=None):
        return [self.score(query, docs) for query, docs in items]


@pytest.fixture(scope="module")
def client():
    """The application over a word-overlap scorer and first stage, limits small enough to be reached."""
    documents = {f"d{i}": Doc(f"d{i}", f"w{i} w{i + 1} w{i * 2}") for i in range(30)}
    service = serve.RerankService(serve.ServedModel(WordOverlap(), {"reranker": "overlap"}),
                                  retriever=Overlap(documents), documents=documents, k=5, max_docs=20, max_wait_ms=0)
    app = serve.create_app(serve.ServiceState(service), max_body_bytes=20_000, body_timeout=5)
    with TestClient(app, raise_server_exceptions=True) as test_client:
        yield test_client
    service.close()


def check(response) -> None:
    """A result (200) or a client error (4xx) with one line of JSON saying what was wrong."""
    assert response.status_code == 200 or 400 <= response.status_code < 500, (response.status_code, response.text)
    answer = response.json()
    if response.status_code != 200:
        assert isinstance(answer["error"], str) and answer["error"] and "\n" not in answer["error"]


# text with what clients get wrong: lone surrogates, controls, non-BMP characters, long digit runs
texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=30)
numbers = st.one_of(st.integers(), st.integers(min_value=-10**60, max_value=10**60), st.floats(allow_nan=False),
                    st.booleans(), st.none())
scalars = st.one_of(texts, numbers)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(texts, inner, max_size=4)), max_leaves=12)
documents = st.one_of(
    st.lists(st.fixed_dictionaries({"id": st.one_of(texts, values), "text": st.one_of(texts, values)}), max_size=25),
    st.lists(st.one_of(texts, st.fixed_dictionaries({"text": st.one_of(texts, values)}), values), max_size=25),
    values)
bodies = st.fixed_dictionaries({}, optional={
    "query": st.one_of(texts, values), "documents": documents, "texts": st.one_of(st.lists(texts, max_size=25), values),
    "top_k": numbers, "top_n": numbers, "k": numbers, "raw_scores": st.one_of(st.booleans(), values),
    "return_text": st.one_of(st.booleans(), values), "return_documents": st.one_of(st.booleans(), values),
    "model": st.one_of(texts, values), "rank_fields": values, "extra": values})
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


@fuzz
@given(path=st.sampled_from(PATHS), raw=st.binary(max_size=300))
def test_any_bytes_are_a_result_or_a_4xx(client, path, raw):
    check(client.post(path, content=raw, headers={"Content-Type": "application/json"}))


@fuzz
@given(path=st.sampled_from(PATHS), value=values)
def test_any_json_value_is_a_result_or_a_4xx(client, path, value):
    check(client.post(path, content=json.dumps(value).encode(), headers={"Content-Type": "application/json"}))


@fuzz
@given(path=st.sampled_from(PATHS), body=bodies)
def test_near_valid_bodies_are_a_result_or_a_4xx(client, path, body):
    response = client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    check(response)
    if response.status_code == 200 and path == "/rerank" and "texts" not in body:
        scores = [result["score"] for result in response.json()["results"]]
        assert scores == sorted(scores, reverse=True)


words = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=20)
queries = words.filter(lambda text: text.strip() != "")


@fuzz
@given(query=queries, texts=st.lists(words, max_size=20), top=st.integers(min_value=1, max_value=10**30 - 1),
       shape=st.sampled_from(["project", "tei", "cohere", "cohere-objects"]))
def test_valid_bodies_with_any_text_are_answered(client, query, texts, top, shape):
    if shape == "project":
        path, body = "/rerank", {"query": query, "documents": [{"id": f"{i}{t}", "text": t} for i, t in enumerate(texts)],
                                 "top_k": top}
    elif shape == "tei":
        path, body = "/rerank", {"query": query, "texts": texts, "return_text": True}
    else:
        documents = texts if shape == "cohere" else [{"text": t, "meta": t} for t in texts]
        path, body = "/v1/rerank", {"query": query, "documents": documents, "top_n": top, "return_documents": True}
    response = client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    answer = response.json()
    results = answer["results"] if isinstance(answer, dict) else answer
    assert len(results) == (len(texts) if shape == "tei" else min(len(texts), top))
    if shape == "project":  # ids come back exactly, lone surrogates included
        assert {r["id"] for r in results} <= {d["id"] for d in body["documents"]}
        assert len({r["id"] for r in results}) == len(results)
    elif shape == "tei":
        assert sorted((r["index"], r["text"]) for r in results) == list(enumerate(texts))
    else:
        assert all(r["document"] == (body["documents"][r["index"]] if shape == "cohere-objects"
                                     else {"text": texts[r["index"]]}) for r in results)
