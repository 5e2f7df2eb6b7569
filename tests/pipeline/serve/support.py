"""What the service's tests share: a tiny trained KNRM, wrappers that count or fail, a first stage, a
server on a free loopback port, and HTTP calls with the standard library (every call has a timeout)."""
from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from pipeline import serve
from pipeline.core.records import ScoredDoc
from rerankers.knrm import KNRMReranker
from tests.helpers import fit_on_tiny_dataset

WORDS = [f"w{i}" for i in range(40)]
SETTINGS = dict(epochs=1, batch_size=16, negatives=3, device="cpu")
HOST = "127.0.0.1"


def same_scores(expected):
    """The model's scores, to float32 precision: the service scores in batches of its own making, on its
    worker thread, so padding and the order of a reduction may change the last bits (3e-8 was seen on a
    busy machine); what it serves must be the model's scores, not bit-identical copies."""
    return pytest.approx(expected, rel=1e-6, abs=1e-7)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny trained KNRM, its checkpoint file and the training data it came from."""
    root = tmp_path_factory.mktemp("serve")
    reranker, _, train = fit_on_tiny_dataset(KNRMReranker, root, WORDS, SETTINGS)
    path = root / "knrm.pt"
    reranker.save(path)
    return reranker, path, train


class Counting:
    """Wraps a re-ranker and records the number of items of every ``score_many`` call (the batching check
    must not trust the batcher's own counters)."""

    def __init__(self, inner, fail_on: str | None = None):
        self.inner = inner
        self.name = inner.name
        self.calls: list[int] = []
        self.fail_on = fail_on

    def score(self, query, docs):
        return self.inner.score(query, docs)

    def score_many(self, items, batch_size=None):
        self.calls.append(len(items))
        if self.fail_on and any(self.fail_on in query.text for query, _ in items):
            raise RuntimeError(f"cannot score {self.fail_on!r}")
        return self.inner.score_many(items, batch_size)


class Overlap:
    """A first stage over the tiny dataset: documents by the number of query words they contain."""

    name = "overlap"

    def __init__(self, docs):
        self.docs = docs

    def search(self, queries, k=1000):
        run = {}
        for query in queries:
            words = set(query.text.split())
            ranked = sorted(self.docs.values(), key=lambda d: (-len(words & set(d.text.split())), d.doc_id))[:k]
            run[query.query_id] = [ScoredDoc(query.query_id, d.doc_id, float(len(words & set(d.text.split()))))
                                   for d in ranked]
        return run


def start(model, limits: serve.Limits = serve.Limits(), **options):
    """A service for ``model`` (a ServedModel) serving on a free loopback port from a background thread."""
    return serve.RerankServer(serve.RerankService(model, **options), HOST, 0, limits).start_background()


def call(url, method, path, body=None, raw=None, headers=None, connection=None):
    """``(status, JSON answer, response)`` of one HTTP request; ``body`` is sent as JSON, ``raw`` as bytes; on
    ``connection`` when given (kept open), else on a new one."""
    parts = urlsplit(url)
    own = connection is None
    connection = connection or http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        text = response.read()
        assert response.getheader("Content-Type", "").startswith("application/json"), text
        return response.status, json.loads(text) if text else None, response
    finally:
        if own:
            connection.close()


def query_items(train, count):
    """``count`` (query, candidate docs) pairs of the tiny training data."""
    items = []
    for query_id in list(train.queries)[:count]:
        items.append((train.queries[query_id], [train.docs[hit.doc_id] for hit in train.candidates[query_id]]))
    return items


def rerank_body(query, docs, **extra):
    """The project's ``/rerank`` body for ``query`` and ``docs``."""
    return {"query": query.text, "documents": [{"id": d.doc_id, "text": d.text} for d in docs], **extra}


def raw_socket(url, timeout=30.0) -> socket.socket:
    """A plain TCP connection to the service, for requests no HTTP client would send."""
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout)


def read_answer(sock: socket.socket, limit_s: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection (or ``limit_s`` passes)."""
    sock.settimeout(limit_s)
    data = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return data


def wait_until_ready(url, limit_s: float = 60.0) -> None:
    """Poll ``GET /ready`` until it answers 200 (at most ``limit_s`` seconds)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if call(url, "GET", "/ready")[0] == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready within {limit_s} s")
