"""Every wait of the service is bounded and no request is a 500 (issue 34): a huge integer, lone
surrogates, a body shorter than its Content-Length, headers or bodies trickled, a client that hangs up,
SIGTERM while a client trickles its body; a bad checkpoint is one error line; ``/info`` shows no server
paths. Only loopback addresses; every loop and read has a bound."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest
import torch

from pipeline import serve
from pipeline.core.home import model_root
from pipeline.core.records import Doc, Query
from pipeline.serve.models import shown_path
from tests.conftest import PYTHON, REPO, subprocess_env
from tests.helpers import one_torch_thread  # noqa: F401 (autouse fixture)
from tests.pipeline.serve.support import (call, raw_socket, read_answer, same_scores, start, trained,  # noqa: F401
                                 wait_until_ready)

FAST = serve.Limits(body_timeout=1.0, header_timeout=1.0, keep_alive=1.0, shutdown_timeout=2.0, max_body_bytes=1 << 20)


@pytest.fixture(scope="module")
def served(trained):
    """The tiny KNRM behind a server with one-second timeouts."""
    _, path, _ = trained
    server = start(serve.load_checkpoint_model(path), FAST, max_wait_ms=1)
    yield server
    server.close()


def status_line(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode("latin-1")


@pytest.mark.parametrize("path, body", [
    ("/rerank", '{"query": "w1", "documents": [{"id": "a", "text": "w1"}], "top_k": %s}'),
    ("/v1/rerank", '{"query": "w1", "documents": ["w1"], "top_n": %s}'),
    ("/search", '{"query": "w1", "k": %s}'),
])
def test_an_integer_of_5000_digits_is_422_not_500(served, path, body):
    status, answer, _ = call(served.url, "POST", path, raw=(body % ("7" * 5000)).encode())
    assert status == 422 and "a number of 5000 digits" in answer["error"]


@pytest.mark.parametrize("where", ["query", "text", "id"])
def test_a_lone_surrogate_is_scored_as_a_replacement_character(served, trained, where):
    reranker, _, _ = trained
    fields = {"query": "w1 w2", "text": "w1 w3", "id": "a"}
    fields[where] += "\ud800"
    body = json.dumps({"query": fields["query"], "documents": [{"id": fields["id"], "text": fields["text"]}]})
    assert "\\ud800" in body  # json.dumps writes the lone surrogate as an escape, as a client would
    status, answer, _ = call(served.url, "POST", "/rerank", raw=body.encode())
    assert status == 200, answer
    assert answer["results"][0]["id"] == fields["id"]  # given back exactly (as a JSON escape)
    clean = {name: value.replace("\ud800", "\ufffd") for name, value in fields.items()}
    assert answer["results"][0]["score"] == same_scores(
        reranker.score(Query("q", clean["query"]), [Doc("d", clean["text"])])[0])
    tei = json.dumps({"query": fields["query"], "texts": [fields["text"]], "return_text": True, "raw_scores": True})
    status, answer, _ = call(served.url, "POST", "/rerank", raw=tei.encode())
    assert status == 200 and answer[0]["text"] == fields["text"]


def test_a_body_shorter_than_its_content_length_is_408_within_the_body_timeout(served):
    sock = raw_socket(served.url)
    try:
        begun = time.monotonic()
        sock.sendall(b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"query\": ")
        answer = read_answer(sock, 10)   # the connection held open by the client
        elapsed = time.monotonic() - begun
    finally:
        sock.close()
    assert status_line(answer) == "HTTP/1.1 408 Request Timeout", answer
    assert b"did not arrive within 1 s (10 of 100 bytes came)" in answer
    assert FAST.body_timeout <= elapsed < FAST.body_timeout + 3


def test_a_body_over_the_limit_is_413_before_it_is_read(served):
    sock = raw_socket(served.url)
    try:
        sock.sendall(b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n")
        answer = read_answer(sock, 10)
    finally:
        sock.close()
    assert status_line(answer).startswith("HTTP/1.1 413 ") and b"at most 1048576" in answer


@pytest.mark.parametrize("trickle", [False, True], ids=["stalled", "trickled"])
def test_a_connection_that_never_completes_its_headers_is_closed(served, trickle):
    sock = raw_socket(served.url)
    try:
        begun = time.monotonic()
        sock.sendall(b"POST /rerank HTTP/1.1\r\n")
        closed = False
        for _ in range(40):  # 0.25 s apart: 10 s at most
            if trickle:
                try:
                    sock.sendall(b"X")
                except OSError:
                    closed = True
                    break
            sock.settimeout(0.25)
            try:
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed = True
                break
        elapsed = time.monotonic() - begun
    finally:
        sock.close()
    # the server starts the clock when it accepts, a moment before the client has its connected socket
    assert closed and FAST.header_timeout - 0.2 <= elapsed < FAST.header_timeout + 3


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_time(served):
    sock = raw_socket(served.url)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        begun = time.monotonic()
        answer = read_answer(sock, 10)
        elapsed = time.monotonic() - begun
    finally:
        sock.close()
    assert status_line(answer) == "HTTP/1.1 200 OK" and FAST.keep_alive <= elapsed < FAST.keep_alive + 3


def test_close_ends_within_the_shutdown_deadline_while_a_client_trickles(trained):
    _, path, _ = trained
    server = start(serve.load_checkpoint_model(path), serve.Limits(body_timeout=60, shutdown_timeout=1.0))
    sock = raw_socket(server.url)
    try:
        sock.sendall(b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
        time.sleep(0.3)
        begun = time.monotonic()
        assert server.close()
        assert time.monotonic() - begun < 1.0 + serve.STOP_MARGIN_S
        answer = read_answer(sock, 5)
        assert status_line(answer).startswith("HTTP/1.1 503 ") and b"shutting down" in answer, answer
    finally:
        sock.close()


def test_shown_paths_reveal_no_server_directory(tmp_path):
    inside = model_root() / "vaswani" / "knrm.pt"
    assert shown_path(inside) == os.path.join("models", "vaswani", "knrm.pt")
    assert shown_path(tmp_path / "deep" / "knrm.pt") == "knrm.pt"


def test_a_bad_checkpoint_is_one_error_line(tmp_path, trained, capsys):
    _, path, _ = trained
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:300])
    pickled = tmp_path / "pickled.pt"
    torch.save({"reranker": object}, pickled)  # a class, not a tensor: refused by weights_only
    for bad in (text, truncated, pickled):
        assert serve.main(["--checkpoint", str(bad), "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {bad}: not a readable checkpoint (") and err.count("\n") == 1, err


def test_sigterm_while_a_client_trickles_ends_the_command_within_its_bound(trained):
    """The service as a command: a client that hangs up before its answer leaves no traceback, and SIGTERM
    ends the process within --shutdown-timeout + STOP_MARGIN_S while another client trickles its body
    (1 byte every 2 s)."""
    _, path, _ = trained
    shutdown = 2.0
    process = subprocess.Popen([PYTHON, "-m", "pipeline.serve", "--checkpoint", str(path), "--port", "0", "--threads",
                                "1", "--shutdown-timeout", str(shutdown), "--body-timeout", "120"],
                               cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    try:
        line = process.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), (line, process.stderr.read() if not line else "")
        url = line.split()[-1]
        wait_until_ready(url)
        # a client that sends a large request and hangs up at once: the answer has nobody to go to
        documents = [{"id": str(i), "text": f"w{i % 40} w{(i * 7) % 40}"} for i in range(800)]
        body = json.dumps({"query": "w1 w2", "documents": documents}).encode()
        for _ in range(3):
            hang_up = raw_socket(url)
            hang_up.sendall(b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            hang_up.close()
        assert call(url, "GET", "/health")[0] == 200
        trickler = raw_socket(url)
        trickler.sendall(b"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")

        def trickle():
            for _ in range(60):  # 1 byte every 2 s, 2 minutes at most
                try:
                    trickler.sendall(b" ")
                except OSError:
                    return
                if stop.wait(2.0):
                    return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        time.sleep(2.5)
        begun = time.monotonic()
        os.kill(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=60)
        elapsed = time.monotonic() - begun
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert elapsed < shutdown + serve.STOP_MARGIN_S, (elapsed, err)
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception" not in err, err
    assert "terminated: service stopped after answering the requests in flight" in err
