"""The service speaks its clients' languages: Cohere's official Python client (``rerank`` of ClientV1 and
ClientV2 against the local base URL), text-embeddings-inference's ``/rerank`` shape over httpx, the OpenAPI
document and ``/docs``, readiness (503 until the model is attached, then 200) and HTTP/1.1 keep-alive."""
from __future__ import annotations

import http.client
import math
import socket
import time
from urllib.parse import urlsplit

import cohere
import httpx
import pytest

from pipeline import serve
from pipeline.core.records import Doc, Query
from tests.helpers import one_torch_thread  # noqa: F401 (autouse fixture)
from tests.pipeline.serve.support import HOST, call, query_items, rerank_body, same_scores, start, trained  # noqa: F401


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


@pytest.fixture(scope="module")
def served(trained):
    """The tiny KNRM served on a free loopback port for the whole module."""
    reranker, path, _ = trained
    server = start(serve.load_checkpoint_model(path), max_wait_ms=1)
    yield server
    server.close()


@pytest.fixture
def http_client():
    """An httpx client that ignores proxy variables (the service is on loopback)."""
    with httpx.Client(trust_env=False, timeout=30) as client:
        yield client


def expected_order(reranker, query_text: str, texts: list[str]) -> tuple[list[int], list[float]]:
    """Positions best first (ties in posted order) and the raw scores, scored directly."""
    raw = reranker.score(Query("q", query_text), [Doc(f"d{i}", text) for i, text in enumerate(texts)])
    return sorted(range(len(texts)), key=lambda i: -raw[i]), raw


def test_the_official_cohere_client_v2_reranks_against_the_service(served, trained, http_client):
    reranker, _, train = trained
    query, docs = query_items(train, 1)[0]
    texts = [doc.text for doc in docs]
    client = cohere.ClientV2(api_key="unused", base_url=served.url, httpx_client=http_client)
    answer = client.rerank(model="knrm", query=query.text, documents=texts, top_n=3)
    order, raw = expected_order(reranker, query.text, texts)
    assert [result.index for result in answer.results] == order[:3]
    assert [result.relevance_score for result in answer.results] == same_scores([sigmoid(raw[i]) for i in order[:3]])
    assert all(0 < result.relevance_score < 1 for result in answer.results)


def test_the_official_cohere_client_v1_gets_documents_back(served, trained, http_client):
    reranker, _, train = trained
    query, docs = query_items(train, 1)[0]
    documents = [doc.text if i % 2 else {"text": doc.text, "title": f"t{i}"} for i, doc in enumerate(docs)]
    client = cohere.Client(api_key="unused", base_url=served.url, httpx_client=http_client)
    answer = client.rerank(model="knrm", query=query.text, documents=documents, return_documents=True)
    order, _ = expected_order(reranker, query.text, [doc.text for doc in docs])
    assert [result.index for result in answer.results] == order
    for result in answer.results:
        assert result.document.text == docs[result.index].text
        if result.index % 2 == 0:  # an object's other fields come back unchanged
            assert result.document.title == f"t{result.index}"
    with pytest.raises(cohere.core.api_error.ApiError) as refused:
        client.rerank(model="knrm", query=query.text, documents=[{"title": "no text"}])
    assert refused.value.status_code == 422 and "documents[0]: missing field 'text'" in str(refused.value.body)


def test_the_tei_shape_over_httpx(served, trained, http_client):
    reranker, _, train = trained
    query, docs = query_items(train, 1)[0]
    texts = [doc.text for doc in docs]
    order, raw = expected_order(reranker, query.text, texts)
    answer = http_client.post(f"{served.url}/rerank", json={"query": query.text, "texts": texts, "raw_scores": True,
                                                            "return_text": True})
    assert answer.status_code == 200, answer.text
    results = answer.json()
    assert [r["index"] for r in results] == order
    assert [r["score"] for r in results] == same_scores([raw[i] for i in order])
    assert [r["text"] for r in results] == [texts[i] for i in order]
    normalised = http_client.post(f"{served.url}/rerank", json={"query": query.text, "texts": texts}).json()
    assert [r["index"] for r in normalised] == order and all("text" not in r for r in normalised)
    assert [r["score"] for r in normalised] == same_scores([sigmoid(raw[i]) for i in order])
    refused = http_client.post(f"{served.url}/rerank", json={"query": query.text, "texts": [1]})
    assert refused.status_code == 422
    assert refused.json() == {"error": "texts[0] must be a string, got a JSON number", "error_type": "Validation"}


def test_the_project_shape_on_the_same_path_is_unchanged(served, trained):
    reranker, _, train = trained
    query, docs = query_items(train, 1)[0]
    status, answer, _ = call(served.url, "POST", "/rerank", rerank_body(query, docs, top_k=2))
    assert status == 200 and set(answer) == {"results"} and len(answer["results"]) == 2
    expected = dict(zip([d.doc_id for d in docs], reranker.score(query, docs)))
    assert {r["id"]: r["score"] for r in answer["results"]} == same_scores(
        {doc_id: expected[doc_id] for doc_id in sorted(expected, key=lambda d: -expected[d])[:2]})


def test_openapi_documents_every_route_and_docs_are_served(served, http_client):
    document = http_client.get(f"{served.url}/openapi.json").json()
    assert {"/health", "/ready", "/info", "/rerank", "/search", "/v1/rerank", "/v2/rerank"} <= set(document["paths"])
    schemas = document["components"]["schemas"]
    assert {"RerankRequest", "TEIRerankRequest", "CohereRerankRequest", "SearchRequest"} <= set(schemas)
    body = document["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {ref["$ref"] for ref in body["oneOf"]} == {"#/components/schemas/RerankRequest",
                                                      "#/components/schemas/TEIRerankRequest"}
    assert set(schemas["CohereRerankRequest"]["properties"]) >= {"query", "documents", "top_n", "return_documents"}
    docs = http_client.get(f"{served.url}/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text


def test_ready_is_503_until_the_model_is_attached_and_health_is_live_at_once(trained, http_client):
    reranker, path, train = trained
    server = serve.RerankServer(None, HOST, 0).start_background()
    try:
        assert http_client.get(f"{server.url}/health").json() == {"status": "ok", "requests": 0, "batches": 0}
        waiting = http_client.get(f"{server.url}/ready")
        assert (waiting.status_code, waiting.json()) == (503, {"status": "loading"})
        query, docs = query_items(train, 1)[0]
        early = http_client.post(f"{server.url}/rerank", json=rerank_body(query, docs))
        assert early.status_code == 503 and "loading" in early.json()["error"]
        assert http_client.get(f"{server.url}/info").status_code == 503
        server.attach(serve.RerankService(serve.load_checkpoint_model(path)))
        assert (http_client.get(f"{server.url}/ready").status_code, http_client.get(f"{server.url}/ready").json()) \
            == (200, {"status": "ready"})
        assert http_client.post(f"{server.url}/rerank", json=rerank_body(query, docs)).status_code == 200
    finally:
        server.close()


def test_two_requests_share_one_keep_alive_connection(served, trained):
    _, _, train = trained
    query, docs = query_items(train, 1)[0]
    parts = urlsplit(served.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        status, _, first = call(served.url, "POST", "/rerank", rerank_body(query, docs), connection=connection)
        sock = connection.sock
        assert status == 200 and first.version == 11 and not first.will_close and sock is not None
        status, _, second = call(served.url, "POST", "/v1/rerank", {"query": query.text, "documents": ["w1"]},
                                 connection=connection)
        assert status == 200 and connection.sock is sock  # the same socket: not reopened by http.client
        local = sock.getsockname()
        status, health, _ = call(served.url, "GET", "/health", connection=connection)
        assert status == 200 and connection.sock.getsockname() == local
        # Nagle's algorithm off on the server's connections: with it, every answer on a kept-open connection
        # waited for the client's delayed ACK (40 ms); 10 answers took 0.46 s on a busy machine, 0.08 s without
        assert served._socket.proto == socket.IPPROTO_TCP
        assert served._socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        begun = time.monotonic()
        for _ in range(10):
            assert call(served.url, "GET", "/health", connection=connection)[0] == 200
        assert time.monotonic() - begun < 0.35
    finally:
        connection.close()
