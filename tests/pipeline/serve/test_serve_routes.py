"""Tests for pipeline.serve: the project's routes (/rerank, /search, /health, /info), the batching, the
answers to bad requests and the command line.

A tiny KNRM is trained on the synthetic dataset of tests/helpers.py (one epoch, about a second) and saved in
a temporary directory; the service runs in this process on a free loopback port (and as ``python -m
pipeline.serve`` for the command line), called over real HTTP with http.client from several threads at once.
"""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import json

import pytest
import torch

from pipeline import serve
from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.core.records import Doc, Query
from rerankers.knrm import KNRMReranker
from tests.conftest import PYTHON, REPO, subprocess_env
from tests.helpers import ctrl_c_as_at_a_terminal, one_torch_thread, tiny_dataset  # noqa: F401 (autouse fixture)
from tests.pipeline.serve.support import (WORDS, Counting, Overlap, call, query_items, rerank_body, same_scores, start,
                                 trained, wait_until_ready)  # noqa: F401 (fixture)


@pytest.fixture
def counted(trained):
    """A served tiny KNRM behind a :class:`Counting` wrapper; batches wait up to 200 ms for company."""
    reranker, path, _ = trained
    counting = Counting(reranker)
    server = start(serve.ServedModel(counting, {"reranker": "knrm", "checkpoint": path.name}),
                   serve.Limits(max_body_bytes=4096), max_wait_ms=200, max_batch=64, max_docs=8)
    yield server, counting
    server.close()


# ------------------------------------------------------------------------------------------- loading


def test_a_checkpoint_is_loaded_by_the_reranker_it_names(trained):
    reranker, path, train = trained
    model = serve.load_checkpoint_model(path)
    assert isinstance(model.reranker, KNRMReranker)
    # named without the server's directories (issue 34: /info showed the absolute path)
    assert model.info["reranker"] == "knrm" and model.info["checkpoint"] == "knrm.pt"
    assert not any(isinstance(v, str) and v.startswith("/") for v in model.info["options"].values())
    assert model.info["options"]["n_kernels"] == reranker.model_config.n_kernels
    query, docs = query_items(train, 1)[0]
    assert model.reranker.score(query, docs) == reranker.score(query, docs)


def test_a_file_that_is_no_reranker_checkpoint_is_a_clear_error(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="notes.pt: not a readable checkpoint"):
        serve.load_checkpoint_model(text)
    nameless = tmp_path / "nameless.pt"
    torch.save({"state_dict": {}}, nameless)
    with pytest.raises(CheckpointError, match="names no re-ranker"):
        serve.load_checkpoint_model(nameless)
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        serve.load_checkpoint_model(tmp_path / "missing.pt")


# ----------------------------------------------------------------------------------- scoring, batching


def post_together(url, items):
    """POST each ``(query, docs)`` of ``items`` to ``/rerank`` at the same moment (behind a barrier), so that
    the server can batch them; the answers in the order of ``items``."""
    barrier = threading.Barrier(len(items))

    def post(item):
        barrier.wait()
        return call(url, "POST", "/rerank", rerank_body(*item))

    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(post, items))


def test_concurrent_requests_are_batched_and_score_as_alone(counted, trained):
    server, counting = counted
    reranker, _, train = trained
    items = query_items(train, 16)
    answers = post_together(server.url, items)
    for (query, docs), (status, answer, _) in zip(items, answers):
        assert status == 200, answer
        expected = dict(zip([d.doc_id for d in docs], reranker.score(query, docs)))
        assert {r["id"]: r["score"] for r in answer["results"]} == same_scores(expected)
        scores = [r["score"] for r in answer["results"]]
        assert scores == sorted(scores, reverse=True)
    assert sum(counting.calls) == len(items)
    assert len(counting.calls) < len(items) and max(counting.calls) > 1, counting.calls
    status, health, _ = call(server.url, "GET", "/health")
    assert status == 200 and health == {"status": "ok", "requests": len(items), "batches": len(counting.calls)}


def test_a_reused_id_with_another_text_is_scored_on_its_text(counted, trained):
    server, _ = counted
    reranker, _, _ = trained
    query = Query("q", "w1 w2 w3")
    # the model caches a document's tokens by id: scored directly, each text needs an id of its own
    for number, text in enumerate(("w1 w2 w9 w10", "w20 w21 w22", "w3")):
        status, answer, _ = call(server.url, "POST", "/rerank", rerank_body(query, [Doc("same", text)]))
        assert status == 200
        assert [r["id"] for r in answer["results"]] == ["same"]
        assert [r["score"] for r in answer["results"]] == same_scores(reranker.score(query, [Doc(f"text{number}", text)]))


def test_top_k_keeps_the_best_and_an_empty_list_gives_no_results(counted, trained):
    server, counting = counted
    _, _, train = trained
    query, docs = query_items(train, 1)[0]
    status, full, _ = call(server.url, "POST", "/rerank", rerank_body(query, docs))
    status_top, top, _ = call(server.url, "POST", "/rerank", rerank_body(query, docs, top_k=2))
    assert status == status_top == 200 and top["results"] == full["results"][:2]
    calls = len(counting.calls)
    status, empty, _ = call(server.url, "POST", "/rerank", {"query": "w1", "documents": []})
    assert (status, empty) == (200, {"results": []}) and len(counting.calls) == calls  # nothing scored


def test_a_failing_request_does_not_fail_the_others_of_its_batch(trained):
    reranker, _, train = trained
    counting = Counting(reranker, fail_on="boom")
    server = start(serve.ServedModel(counting, {"reranker": "knrm"}), max_wait_ms=200)
    try:
        items = query_items(train, 5) + [(Query("x", "boom w1"), [Doc("d", "w1 w2")])]
        answers = post_together(server.url, items)
        assert [status for status, _, _ in answers] == [200] * 5 + [500]
        assert "cannot score 'boom'" in answers[-1][1]["error"]
        for (query, docs), (_, answer, _) in zip(items[:5], answers):
            assert [r["score"] for r in answer["results"]] == same_scores(sorted(reranker.score(query, docs), reverse=True))
        assert max(counting.calls) > 1  # the failure happened inside a shared batch
    finally:
        server.close()


def test_closing_answers_what_is_queued_then_refuses(trained):
    reranker, _, train = trained
    batcher = serve.ScoringBatcher(reranker, max_batch=4, max_wait_ms=100)
    items = query_items(train, 6)
    futures = [batcher.submit(query, docs) for query, docs in items]
    batcher.close()
    for future, (query, docs) in zip(futures, items):
        assert future.result(timeout=0) == same_scores(reranker.score(query, docs))
    with pytest.raises(serve.ServiceUnavailable):
        batcher.submit(*items[0])


def test_search_retrieves_then_reranks(trained):
    reranker, _, _ = trained
    dataset = tiny_dataset(WORDS)
    docs = dataset.doc_store()
    server = start(serve.ServedModel(reranker, {"reranker": "knrm"}), retriever=Overlap(docs), documents=docs, k=5)
    try:
        query = dataset.queries["q3"]
        status, answer, _ = call(server.url, "POST", "/search", {"query": query.text})
        assert status == 200 and len(answer["results"]) == 5
        candidates = Overlap(docs).search([query], 5)[query.query_id]
        expected = reranker.score(query, [docs[hit.doc_id] for hit in candidates])
        assert {r["id"]: r["score"] for r in answer["results"]} == same_scores(
            dict(zip([h.doc_id for h in candidates], expected)))
        assert {r["id"]: (r["first_stage_rank"], r["first_stage_score"]) for r in answer["results"]} == {
            hit.doc_id: (rank, hit.score) for rank, hit in enumerate(candidates, 1)}
        status, top, _ = call(server.url, "POST", "/search", {"query": query.text, "k": 9, "top_k": 3})
        assert status == 200 and len(top["results"]) == 3
        assert call(server.url, "GET", "/info")[1]["first_stage"] == "overlap"
    finally:
        server.close()


# --------------------------------------------------------------------------------------- bad requests

GOOD_DOC = {"id": "a", "text": "w1 w2"}

BAD_REQUESTS = [
    ("POST", "/rerank", b"{not json", 400, "malformed JSON"),
    ("POST", "/rerank", b"\xff\xfe", 400, "not UTF-8"),
    ("POST", "/rerank", b"[1, 2]", 400, "must be a JSON object"),
    ("POST", "/rerank", {"documents": [GOOD_DOC]}, 400, "missing field 'query'"),
    ("POST", "/rerank", {"query": "w1"}, 400, "missing field 'documents'"),
    ("POST", "/rerank", {"query": 7, "documents": []}, 400, "'query' must be a string"),
    ("POST", "/rerank", {"query": "  ", "documents": []}, 400, "'query' is empty"),
    ("POST", "/rerank", {"query": "w1", "documents": "w2"}, 400, "'documents' must be an array"),
    ("POST", "/rerank", {"query": "w1", "documents": ["w2"]}, 400, "documents[0] must be an object"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": "a"}]}, 400, "documents[0]: missing field 'text'"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": 1, "text": "w2"}]}, 400, "documents[0].id must be a string"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": "", "text": "w2"}]}, 400, "documents[0].id is empty"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": "a", "text": None}]}, 400, "documents[0].text must be"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC, {"id": "b", "body": "x", "text": "y"}]}, 400,
     "documents[1]: unknown field 'body'"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC, GOOD_DOC]}, 400, "id 'a' appears twice"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC], "topk": 1}, 400, "unknown field 'topk'"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC], "top_k": 0}, 400, "'top_k' must be at least 1"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC], "top_k": "2"}, 400, "'top_k' must be an integer"),
    ("POST", "/rerank", {"query": "w1", "documents": [GOOD_DOC], "top_k": True}, 400, "'top_k' must be an integer"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": str(i), "text": "w1"} for i in range(9)]}, 413,
     "9 documents; at most 8"),
    ("POST", "/rerank", {"query": "w1", "documents": [{"id": "a", "text": "w1 " * 2000}]}, 413, "at most 4096"),
    ("POST", "/search", {"query": "w1"}, 404, "no first stage"),
    ("GET", "/rerank", None, 405, "/rerank takes POST, not GET"),
    ("PUT", "/rerank", {"query": "w1", "documents": []}, 405, "takes POST, not PUT"),
    ("POST", "/health", {}, 405, "/health takes GET, not POST"),
    ("DELETE", "/info", None, 405, "/info takes GET"),
    ("GET", "/rank", None, 404, "unknown path '/rank'"),
    ("POST", "/", {}, 404, "unknown path '/'"),
]


@pytest.mark.parametrize("method, path, body, status, message", BAD_REQUESTS,
                         ids=[f"{m} {p} {s} {msg}" for m, p, _, s, msg in BAD_REQUESTS])
def test_client_mistakes_are_4xx_with_a_json_message(counted, method, path, body, status, message):
    server, counting = counted
    raw = body if isinstance(body, bytes) else None
    got, answer, response = call(server.url, method, path, body=None if raw is not None else body, raw=raw)
    assert (got, set(answer)) == (status, {"error"}), answer
    assert message in answer["error"]
    if status == 405:
        assert response.getheader("Allow") == serve.ROUTES[path]
    assert counting.calls == []  # nothing reached the model
    assert call(server.url, "GET", "/health")[0] == 200  # and the service is still up


def test_a_post_without_content_length_is_411(counted):
    server, _ = counted
    parts = urlsplit(server.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.putrequest("POST", "/rerank")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and "Content-Length" in json.loads(response.read())["error"]
    connection.close()


def test_health_and_info(counted):
    server, _ = counted
    assert call(server.url, "GET", "/health")[:2] == (200, {"status": "ok", "requests": 0, "batches": 0})
    status, info, _ = call(server.url, "GET", "/info?verbose=1")
    assert status == 200
    assert info["reranker"] == "knrm" and info["checkpoint"].endswith("knrm.pt")
    assert info["first_stage"] is None and info["max_docs"] == 8 and info["max_batch"] == 64
    assert info["version"] == serve.project_version()


# ------------------------------------------------------------------------------------------ command line


@pytest.mark.parametrize("argv, message", [
    ([], "give either --checkpoint PATH or --reranker NAME"),
    (["--reranker", "knrm"], "--reranker knrm needs --model CHECKPOINT or --dataset D"),
    (["--reranker", "nope", "--dataset", "cranfield"], "--reranker: unknown re-ranker 'nope'"),
    (["--reranker", "none", "--dataset", "cranfield"], "--reranker none"),
    (["--checkpoint", "missing.pt"], "--checkpoint missing.pt: no such file"),
    (["--reranker", "knrm", "--model", "m.pt", "--set", "epochs=2"], "--set/--config do not go with --model"),
    (["--reranker", "knrm", "--model", "m.pt", "--first-stage", "bm25"], "--first-stage needs --dataset"),
    (["--reranker", "knrm", "--model", "m.pt", "--port", "70000"], "--port must be in [0, 65535]"),
    (["--reranker", "knrm", "--model", "m.pt", "--max-batch", "0"], "--max-batch must be at least 1"),
    (["--reranker", "knrm", "--model", "m.pt", "--max-wait-ms", "-1"], "--max-wait-ms must be a number >= 0"),
    (["--reranker", "knrm", "--model", "m.pt", "--port", "eighty"], "argument --port: invalid int value"),
])
def test_bad_options_are_one_error_line_and_status_2(argv, message, capsys):
    assert serve.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and message in captured.err and captured.err.count("\n") == 1
    assert captured.out == ""


def test_a_checkpoint_with_model_options_is_refused(trained, capsys):
    _, path, _ = trained
    assert serve.main(["--checkpoint", str(path), "--set", "epochs=2"]) == 2
    assert "--set does not go with --checkpoint" in capsys.readouterr().err


def test_a_checkpoint_served_in_bf16_scores_in_bf16_and_int8_is_refused_for_knrm(trained, capsys):
    reranker, path, train = trained
    options = serve.build_parser().parse_args(["--checkpoint", str(path), "--bf16"])
    service = serve.build_service(options)
    try:
        assert service.model.reranker.bf16 and service.model.info["arithmetic"] == "bf16"
        query, docs = query_items(train, 1)[0]
        assert service.model.reranker.score(query, docs) == pytest.approx(reranker.score(query, docs), abs=0.05)
    finally:
        service.close()
    assert serve.main(["--checkpoint", str(path), "--int8"]) == 2
    assert "--int8 applies to the transformer re-rankers" in capsys.readouterr().err
    assert serve.main(["--checkpoint", str(path), "--int8", "--bf16"]) == 2
    assert "choose one scoring arithmetic" in capsys.readouterr().err


def test_a_port_in_use_is_a_config_error(trained):
    reranker, _, _ = trained
    with start(serve.ServedModel(reranker, {})) as server:
        port = server.server_address[1]
        with pytest.raises(ConfigError, match=f"--port {port}: cannot listen there"):
            serve.RerankServer(None, "127.0.0.1", port)


@pytest.mark.parametrize("signum, status, word", [(signal.SIGTERM, 143, "terminated"),
                                                  (signal.SIGINT, 130, "interrupted")])
def test_the_command_serves_and_stops_cleanly_on_a_signal(trained, signum, status, word):
    reranker, path, train = trained
    process = subprocess.Popen([PYTHON, "-m", "pipeline.serve", "--checkpoint", str(path), "--port", "0",
                                "--threads", "1"], cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        line = process.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), (line, process.stderr.read() if not line else "")
        url = line.split()[-1]
        assert call(url, "GET", "/health")[0] == 200   # live at once; ready once the model is loaded
        wait_until_ready(url)
        assert call(url, "GET", "/health")[:2] == (200, {"status": "ok", "requests": 0, "batches": 0})
        query, docs = query_items(train, 1)[0]
        status_code, answer, _ = call(url, "POST", "/rerank", rerank_body(query, docs))
        assert status_code == 200
        assert {r["id"]: r["score"] for r in answer["results"]} == same_scores(dict(
            zip([d.doc_id for d in docs], reranker.score(query, docs))))
        os.kill(process.pid, signum)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == status, err
    assert f"{word}: service stopped after answering the requests in flight" in err
    assert "Traceback" not in err
