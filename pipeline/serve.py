"""An HTTP service that serves a trained re-ranker, and optionally a first stage in front of it.

Command line::

    python -m pipeline.serve --checkpoint models/vaswani/knrm-fold1of5-seed42-0123abcd.pt --port 8000
    python -m pipeline.serve --reranker bi-encoder --model all-MiniLM-L6-v2 --port 0
    python -m pipeline.serve --reranker knrm --dataset vaswani --first-stage bm25 --threads 1

Endpoints (JSON in, JSON out)::

    GET  /health   {"status": "ok", "requests": N, "batches": M}
    GET  /info     re-ranker name, class, options, checkpoint, first stage, limits, version
    POST /rerank   {"query": "...", "documents": [{"id": "...", "text": "..."}], "top_k": 10}
                   -> {"results": [{"id": "...", "score": 1.5}, ...]}   (best first)
    POST /search   {"query": "...", "k": 100, "top_k": 10}   (needs --dataset and --first-stage)
                   -> {"results": [{"id", "score", "first_stage_score", "first_stage_rank"}, ...]}

Concurrent requests are scored together: one worker thread owns the model, takes the first waiting request,
collects more for up to ``--max-wait-ms`` or until ``--max-batch`` requests, and scores them all with one
``score_many`` call (batches filled across queries); each request gets exactly the scores that
``reranker.score(query, docs)`` gives it alone. A client's mistake (malformed JSON, a missing or mistyped
field, too many documents, an unknown path or method) is a 4xx answer ``{"error": "..."}``, never a 500.
Ctrl-C or ``kill`` stops the service after the requests in flight are answered (exit status 130 / 143, as
every command of the project).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import math
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

from indexes import make_first_stage
from rerankers import reranker_class
from rerankers.checkpoints import project_version

from .cli_options import OptionParser
from .config import RunConfig
from .core.datasets import Dataset, load_dataset
from .core.logs import configure_logging
from .core.errors import CheckpointError, ConfigError, PipelineError
from .core.interrupts import exit_cleanly
from .core.records import Doc, Query
from .core.runtime import keep_freed_memory, set_threads
from .model_cache import fold_models, training_plan
from .resolve import RERANK_DEPTH, check_scoring_arithmetic
from .stages import set_scoring_arithmetic

log = logging.getLogger("pipeline.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_WAIT_MS = 5.0
DEFAULT_MAX_DOCS = 1000
#: request bodies above this are refused (413) before they are read: 1,000 documents of 30 KB each fit
MAX_BODY_BYTES = 32 * 1024 * 1024
#: seconds a connection may stall mid-request before its thread gives up on it (bounds the shutdown wait)
SOCKET_TIMEOUT_S = 10.0

KEPT_ON_INTERRUPT = "service stopped after answering the requests in flight; nothing to resume"


# ------------------------------------------------------------------------------------ the served model


@dataclass
class ServedModel:
    """A loaded re-ranker and what ``GET /info`` says about it (name, options, checkpoint, ...)."""

    reranker: Any
    info: dict[str, Any] = field(default_factory=dict)


def model_options(reranker: Any) -> dict[str, Any]:
    """Every option of a torch re-ranker (its config dataclasses' fields, the targets of ``--set``); ``{}``
    for a re-ranker without ``option_configs``."""
    configs = reranker.option_configs() if hasattr(reranker, "option_configs") else []
    return {f.name: getattr(config, f.name) for config in configs if dataclasses.is_dataclass(config)
            for f in dataclasses.fields(config)}


def checkpoint_reranker_name(path: str | Path) -> str:
    """The re-ranker name a checkpoint written by a re-ranker's ``save`` records (its ``"reranker"`` entry).

    The file is read with ``weights_only=True`` (no pickled code runs); the class is then looked up by that
    name in the registry, never imported from a name the file gives. A missing, foreign or nameless file
    is a :class:`CheckpointError` naming it.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (--checkpoint takes a file written by a re-ranker's "
                              "save(), e.g. from models/)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many types for truncated or foreign files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(error).__name__}: {error})") from None
    name = payload.get("reranker") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{path}: not a re-ranker checkpoint (it names no re-ranker)")
    return name


def load_checkpoint_model(path: str | Path) -> ServedModel:
    """The re-ranker saved at ``path``, whichever it is: its class is the registry's entry for the name the
    checkpoint records, and that class's ``load`` checks the rest (format, configs, weights)."""
    name = checkpoint_reranker_name(path)
    cls = reranker_class(name)
    reranker = cls.load(path)
    return ServedModel(reranker, {"reranker": name, "class": f"{cls.__module__}:{cls.__qualname__}",
                                  "options": model_options(reranker), "checkpoint": str(path)})


def obtain_model(config: RunConfig, dataset: Dataset | None) -> ServedModel:
    """The re-ranker ``config`` names: ``config.model`` loaded by the re-ranker's class (a checkpoint, or for
    the bi-encoder a pre-trained encoder by name), else the model ``pipeline.run`` would use for ``dataset``:
    loaded from the model cache or trained now and cached (``pipeline.model_cache``, the one training path).

    A protocol of several folds (k-fold on a dataset without splits) gives one model per fold, each meant
    for the queries it did not see; a service gets unseen queries, so it serves the first fold's model (the
    same cached file ``pipeline.run`` uses for that fold) rather than training every fold.
    """
    cls = reranker_class(config.reranker)
    described = {"reranker": config.reranker, "class": f"{cls.__module__}:{cls.__qualname__}"}
    if config.model:
        reranker = cls.load(config.model)
        return ServedModel(reranker, {**described, "options": model_options(reranker), "model": config.model,
                                      "checkpoint": config.model if Path(config.model).is_file() else None})
    plan = training_plan(config, dataset)
    folds = len(plan.folds)
    plan = dataclasses.replace(plan, folds=plan.folds[:1])
    trained = next(fold_models(plan, dataset))
    checkpoint = trained.cached or trained.path
    return ServedModel(trained.reranker, {**described, "options": model_options(trained.reranker),
                                          "overrides": dict(plan.options), "checkpoint": str(checkpoint),
                                          "dataset": dataset.name, "fold": trained.fold.name,
                                          "folds": folds, "trained_now": trained.cached is None})


# ------------------------------------------------------------------------------------------- batching


class ServiceUnavailable(PipelineError):
    """The service is shutting down and scores no more requests (HTTP 503)."""


@dataclass
class _Job:
    """One request waiting for the batcher: its query, documents and the future its handler waits on."""

    query: Query
    docs: list[Doc]
    future: concurrent.futures.Future


_STOP = object()


class ScoringBatcher:
    """Scores requests from many threads in shared ``score_many`` calls, on one worker thread.

    The worker takes the first waiting request, then collects more for up to ``max_wait_ms`` (or until
    ``max_batch`` requests) and scores them together; requests that arrived while it was scoring are taken at
    once. Only the worker touches the model, so a model need not be thread-safe. A batch that fails is
    scored again request by request, so one request's failure is not its neighbours'.
    """

    def __init__(self, reranker: Any, max_batch: int = DEFAULT_MAX_BATCH, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                 batch_size: int | None = None, threads: int = 0):
        if max_batch < 1:
            raise ConfigError(f"--max-batch must be at least 1, got {max_batch}")
        if max_wait_ms < 0:
            raise ConfigError(f"--max-wait-ms must be at least 0, got {max_wait_ms}")
        self.reranker = reranker
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.batch_size = batch_size
        self.threads = threads
        self.requests = 0       # requests scored
        self.batches = 0        # score_many calls (or query-by-query rounds for a model without it)
        self.largest_batch = 0
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._stopped = False
        self._worker = threading.Thread(target=self._run, name="scoring-batcher", daemon=True)
        self._worker.start()

    def submit(self, query: Query, docs: Sequence[Doc]) -> concurrent.futures.Future:
        """Queue ``(query, docs)``; the future gives the scores in the docs' order."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:  # no job may slip in behind the stop marker and wait forever
            if self._stopped:
                raise ServiceUnavailable("the service is shutting down")
            self._queue.put(_Job(query, list(docs), future))
        return future

    def score(self, query: Query, docs: Sequence[Doc]) -> list[float]:
        """The scores of ``docs`` for ``query``, scored in a batch with whatever else is waiting."""
        if not docs:
            return []
        return self.submit(query, docs).result()

    def close(self) -> None:
        """Score what is queued, stop the worker; later submissions are :class:`ServiceUnavailable`."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._queue.put(_STOP)
        self._worker.join()

    def _run(self) -> None:
        # torch's intra-op thread setting is per thread for OpenMP: set it where the scoring happens
        set_threads(self.threads)
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            jobs = [first]
            deadline = time.monotonic() + self.max_wait
            while len(jobs) < self.max_batch:
                remaining = deadline - time.monotonic()
                try:
                    job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is _STOP:
                    stopping = True
                    break
                jobs.append(job)
            self._score(jobs)

    def _score(self, jobs: list[_Job]) -> None:
        jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        if not jobs:
            return
        items = [(job.query, job.docs) for job in jobs]
        try:
            scores = self._score_items(items)
        except Exception as error:  # noqa: BLE001 - answered to the request(s) it belongs to
            if len(jobs) == 1:
                jobs[0].future.set_exception(error)
                return
            log.warning("a batch of %d requests failed; scoring them one by one", len(jobs), exc_info=True)
            for job in jobs:
                try:
                    job.future.set_result(self._score_items([(job.query, job.docs)])[0])
                except Exception as alone:  # noqa: BLE001 - handed to the request's handler, which answers it
                    job.future.set_exception(alone)
            return
        for job, values in zip(jobs, scores):
            job.future.set_result(values)

    def _score_items(self, items: list[tuple[Query, list[Doc]]]) -> list[list[float]]:
        if hasattr(self.reranker, "score_many"):
            if self.batch_size:
                scores = self.reranker.score_many(items, self.batch_size)
            else:
                scores = self.reranker.score_many(items)
        else:
            scores = [self.reranker.score(query, docs) for query, docs in items]
        self.batches += 1
        self.requests += len(items)
        self.largest_batch = max(self.largest_batch, len(items))
        return [[float(value) for value in values] for values in scores]


# ------------------------------------------------------------------------------------- request parsing


class RequestError(Exception):
    """A client's mistake: answered with ``status`` (4xx) and ``{"error": message}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _check_fields(payload: Any, allowed: Sequence[str], required: Sequence[str]) -> dict:
    if not isinstance(payload, dict):
        raise RequestError(400, f"the body must be a JSON object with {', '.join(repr(n) for n in required)}, "
                                f"got a JSON {_json_kind(payload)}")
    for name in payload:
        if name not in allowed:
            raise RequestError(400, f"unknown field {name!r} (fields: {', '.join(allowed)})")
    for name in required:
        if name not in payload:
            raise RequestError(400, f"missing field {name!r}")
    return payload


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _query_text(payload: dict) -> str:
    text = payload["query"]
    if not isinstance(text, str):
        raise RequestError(400, f"'query' must be a string, got a JSON {_json_kind(text)}")
    if not text.strip():
        raise RequestError(400, "'query' is empty")
    return text


def _positive_int(payload: dict, name: str, default: int | None, high: int | None = None) -> int | None:
    value = payload.get(name, default)
    if value is None:
        return None
    # JSON true is a Python bool, which is an int: refuse it as the wrong type
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name!r} must be an integer, got a JSON {_json_kind(value)}")
    if value < 1:
        raise RequestError(400, f"{name!r} must be at least 1, got {value}")
    if high is not None and value > high:
        raise RequestError(400, f"{name!r} must be at most {high}, got {value}")
    return value


@dataclass(frozen=True)
class RerankRequest:
    """A checked ``POST /rerank`` body: the query text, the documents as ``(id, text)`` and ``top_k``."""

    query: str
    documents: list[tuple[str, str]]
    top_k: int | None


def parse_rerank(payload: Any, max_docs: int) -> RerankRequest:
    """Check a ``POST /rerank`` body; a mistake is a :class:`RequestError` (400, or 413 for more than
    ``max_docs`` documents). An empty documents list is allowed (it gives no results)."""
    payload = _check_fields(payload, ("query", "documents", "top_k"), ("query", "documents"))
    query = _query_text(payload)
    documents = payload["documents"]
    if not isinstance(documents, list):
        raise RequestError(400, f"'documents' must be an array of {{\"id\", \"text\"}} objects, got a JSON "
                                f"{_json_kind(documents)}")
    if len(documents) > max_docs:
        raise RequestError(413, f"{len(documents)} documents; at most {max_docs} per request (--max-docs)")
    parsed, seen = [], set()
    for position, document in enumerate(documents):
        where = f"documents[{position}]"
        if not isinstance(document, dict):
            raise RequestError(400, f"{where} must be an object {{\"id\", \"text\"}}, got a JSON {_json_kind(document)}")
        for name in document:
            if name not in ("id", "text"):
                raise RequestError(400, f"{where}: unknown field {name!r} (fields: id, text)")
        for name in ("id", "text"):
            if name not in document:
                raise RequestError(400, f"{where}: missing field {name!r}")
            if not isinstance(document[name], str):
                raise RequestError(400, f"{where}.{name} must be a string, got a JSON {_json_kind(document[name])}")
        doc_id = document["id"]
        if not doc_id:
            raise RequestError(400, f"{where}.id is empty")
        if doc_id in seen:
            raise RequestError(400, f"{where}: id {doc_id!r} appears twice")
        seen.add(doc_id)
        parsed.append((doc_id, document["text"]))
    return RerankRequest(query, parsed, _positive_int(payload, "top_k", None))


@dataclass(frozen=True)
class SearchRequest:
    """A checked ``POST /search`` body: the query text, the candidates ``k`` and ``top_k``."""

    query: str
    k: int
    top_k: int | None


def parse_search(payload: Any, default_k: int, max_docs: int) -> SearchRequest:
    """Check a ``POST /search`` body (``k``: candidates from the first stage, 1 to ``max_docs``)."""
    payload = _check_fields(payload, ("query", "k", "top_k"), ("query",))
    return SearchRequest(_query_text(payload), _positive_int(payload, "k", default_k, max_docs),
                         _positive_int(payload, "top_k", None))


# --------------------------------------------------------------------------------------------- service


def _text_key(kind: str, text: str) -> str:
    """An id that only this text can have: models may cache by id (word-level models keep a document's
    tokens under its id), and clients reuse ids for other texts, so the model never sees a client's id."""
    return f"{kind}:{hashlib.blake2b(text.encode('utf-8'), digest_size=16).hexdigest()}"


class RerankService:
    """What the endpoints do, without HTTP: re-rank posted documents, search with the first stage and
    re-rank, describe the model. ``retriever`` and ``documents`` (the first stage and the texts of the
    documents it returns, by id) are optional; without them ``/search`` is answered 404."""

    def __init__(self, model: ServedModel, *, retriever: Any = None, documents: Mapping[str, Doc] | None = None,
                 first_stage: str | None = None, k: int = 100, max_docs: int = DEFAULT_MAX_DOCS,
                 max_batch: int = DEFAULT_MAX_BATCH, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                 batch_size: int | None = None, threads: int = 0, max_body_bytes: int = MAX_BODY_BYTES):
        if max_docs < 1:
            raise ConfigError(f"--max-docs must be at least 1, got {max_docs}")
        if k < 1:
            raise ConfigError(f"--k must be at least 1, got {k}")
        if retriever is not None and documents is None:
            raise ConfigError("a first stage needs the documents it returns (their texts, by id)")
        self.model = model
        self.retriever = retriever
        self.documents = documents
        self.first_stage = first_stage or (getattr(retriever, "name", None) if retriever is not None else None)
        self.k = min(k, max_docs)
        self.max_docs = max_docs
        self.max_body_bytes = max_body_bytes
        self.batcher = ScoringBatcher(model.reranker, max_batch, max_wait_ms, batch_size, threads)
        # one thread runs every first-stage search: Lucene is reached through pyjnius, whose threads attach
        # to the JVM; one long-lived thread attaches once and serialises access to the searcher
        self._searcher = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="first-stage")
                          if retriever is not None else None)
        self._searches = 0
        self._search_lock = threading.Lock()

    # -- endpoints ----------------------------------------------------------------------------------
    def health(self, payload: Any = None) -> dict:
        """``GET /health``: alive, with the requests scored and the ``score_many`` calls made so far."""
        return {"status": "ok", "requests": self.batcher.requests, "batches": self.batcher.batches}

    def info(self, payload: Any = None) -> dict:
        """``GET /info``: the model, the first stage and the service's limits."""
        return {**self.model.info, "first_stage": self.first_stage, "k": self.k if self.first_stage else None,
                "max_docs": self.max_docs, "max_batch": self.batcher.max_batch,
                "max_wait_ms": self.batcher.max_wait * 1000.0, "batch_size": self.batcher.batch_size,
                "version": project_version()}

    def rerank(self, payload: Any) -> dict:
        """``POST /rerank``: the posted documents by the re-ranker's score, best first (ties keep the posted
        order), cut to ``top_k``."""
        request = parse_rerank(payload, self.max_docs)
        query = Query(_text_key("q", request.query), request.query)
        docs = [Doc(_text_key("d", text), text) for _, text in request.documents]
        scores = self._scores(query, docs, [doc_id for doc_id, _ in request.documents])
        order = sorted(range(len(docs)), key=lambda i: -scores[i])[: request.top_k]
        return {"results": [{"id": request.documents[i][0], "score": scores[i]} for i in order]}

    def search(self, payload: Any) -> dict:
        """``POST /search``: the first stage's top ``k`` for the query, re-ranked, cut to ``top_k``."""
        if self.retriever is None:
            raise RequestError(404, "no first stage: start the service with --dataset D --first-stage NAME "
                                    "to use /search (POST /rerank re-ranks documents you send)")
        request = parse_search(payload, self.k, self.max_docs)
        with self._search_lock:
            self._searches += 1
            query_id = f"search-{self._searches}"
        query = Query(query_id, request.query)
        hits = self._searcher.submit(self.retriever.search, [query], request.k).result().get(query_id, [])
        missing = [hit.doc_id for hit in hits if hit.doc_id not in self.documents]
        if missing:
            raise PipelineError(f"the first stage returned documents the dataset lacks: {missing[:5]}")
        texts = [self.documents[hit.doc_id].text for hit in hits]
        docs = [Doc(_text_key("d", text), text) for text in texts]
        scores = self._scores(Query(_text_key("q", request.query), request.query), docs,
                              [hit.doc_id for hit in hits])
        order = sorted(range(len(hits)), key=lambda i: -scores[i])[: request.top_k]
        return {"results": [{"id": hits[i].doc_id, "score": scores[i], "first_stage_score": hits[i].score,
                             "first_stage_rank": i + 1} for i in order]}

    def _scores(self, query: Query, docs: list[Doc], ids: list[str]) -> list[float]:
        scores = self.batcher.score(query, docs)
        for doc_id, score in zip(ids, scores):
            if not math.isfinite(score):  # JSON has no NaN; and such a score is the model's fault, not the client's
                raise PipelineError(f"the re-ranker gave document {doc_id!r} a non-finite score ({score})")
        return scores

    def close(self) -> None:
        """Answer what is queued, then stop scoring and searching."""
        self.batcher.close()
        if self._searcher is not None:
            self._searcher.submit(_detach_from_jvm).result()
            self._searcher.shutdown()


def _detach_from_jvm() -> None:
    """Detach the calling thread from the JVM when pyjnius attached it (a thread that ends attached can
    hang the JVM's shutdown); nothing when Java was never used."""
    jnius = sys.modules.get("jnius")
    if jnius is not None and hasattr(jnius, "detach"):
        jnius.detach()


# ------------------------------------------------------------------------------------------------ HTTP

#: path -> (method, name of the RerankService method that answers it)
ROUTES: dict[str, tuple[str, str]] = {
    "/health": ("GET", "health"),
    "/info": ("GET", "info"),
    "/rerank": ("POST", "rerank"),
    "/search": ("POST", "search"),
}


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the server's :class:`RerankService`; every answer is JSON."""

    server_version = "pipeline-serve"
    # HTTP/1.0: one request per connection, so no idle keep-alive connection holds a thread at shutdown
    protocol_version = "HTTP/1.0"
    timeout = SOCKET_TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802 - the names http.server dispatches to
        """Answer a GET."""
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        """Answer a POST."""
        self._dispatch()

    # every other common method is answered 405 on a known path (404 elsewhere), never 501
    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_POST

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        route = ROUTES.get(path)
        if route is None:
            self._answer(404, {"error": f"unknown path {path!r} (paths: {', '.join(ROUTES)})"})
            return
        method, action = route
        if self.command != method:
            self._answer(405, {"error": f"{path} takes {method}, not {self.command}"}, {"Allow": method})
            return
        service: RerankService = self.server.service
        try:
            payload = self._read_json(service.max_body_bytes) if method == "POST" else None
            self._answer(200, getattr(service, action)(payload))
        except RequestError as error:
            self._answer(error.status, {"error": error.message})
        except ServiceUnavailable as error:
            self._answer(503, {"error": str(error)})
        except Exception as error:  # noqa: BLE001 - the service's own fault: logged, answered 500, never a crash
            log.exception("%s %s failed", self.command, path)
            self._answer(500, {"error": f"internal error: {error}"})

    def _read_json(self, limit: int) -> Any:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "chunked bodies are not supported: send a Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise RequestError(411, "a POST needs a Content-Length header and a JSON body")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise RequestError(400, f"bad Content-Length {length_text!r}") from None
        if length > limit:
            raise RequestError(413, f"body of {length} bytes; at most {limit}")
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise RequestError(400, f"body ended after {len(raw)} of {length} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise RequestError(400, f"the body is not UTF-8 ({error.reason} at byte {error.start})") from None
        except json.JSONDecodeError as error:
            raise RequestError(400, f"malformed JSON: {error}") from None
        except RecursionError:
            raise RequestError(400, "malformed JSON: nested too deeply") from None

    def _answer(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a garbled request line, an unsupported method, a header too long) as
        JSON like every other answer, not its HTML page."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        self.close_connection = True
        try:
            self._answer(code, {"error": message or phrase})
        except OSError:  # the client went away; nothing to tell it
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Access log lines at DEBUG (one line per request would drown the service's own messages)."""
        log.debug("%s %s", self.address_string(), format % args)


class RerankServer(ThreadingHTTPServer):
    """A threading HTTP server answering with a :class:`RerankService`; a thread per connection, while one
    batcher thread does all the scoring. :meth:`close` stops accepting, waits for the requests in flight
    (their handler threads are joined, not abandoned) and then stops the service."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 resets connections when a few dozen clients connect at once
    request_queue_size = 256

    def __init__(self, service: RerankService, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        self.service = service
        try:
            super().__init__((host, port), _Handler)
        except OSError as error:
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})") from None
        self._background: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound socket (the port picked by the system for ``--port 0``)."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_background(self) -> "RerankServer":
        """Serve from a background thread (tests, notebooks); :meth:`close` stops it."""
        # a short poll interval: shutdown() waits for the serving loop's next poll
        self._background = threading.Thread(target=self.serve_forever, args=(0.05,), name="rerank-server",
                                            daemon=True)
        self._background.start()
        return self

    def close(self) -> None:
        """Stop serving, answer the requests in flight, then stop the batcher (and the first stage)."""
        if self._background is not None:
            self.shutdown()
            self._background.join()
            self._background = None
        self.server_close()
        self.service.close()

    def __enter__(self) -> "RerankServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -------------------------------------------------------------------------------------------- command


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m pipeline.serve`` argument parser (its errors are :class:`ConfigError` s)."""
    parser = OptionParser(prog="python -m pipeline.serve", description=__doc__.split("\n\n")[0])
    model = parser.add_argument_group("the model (--checkpoint, or --reranker with --model or --dataset)")
    model.add_argument("--checkpoint", metavar="PATH",
                       help="a file written by a re-ranker's save() (e.g. under models/); its re-ranker is read from it")
    model.add_argument("--reranker", metavar="NAME", help="re-ranker name (python -m pipeline.run --help lists them)")
    model.add_argument("--model", metavar="CHECKPOINT",
                       help="with --reranker: load this checkpoint, or for bi-encoder a pre-trained encoder by name "
                            "(e.g. all-MiniLM-L6-v2)")
    model.add_argument("--dataset", help="dataset whose cached model is served (trained now when missing, as "
                                         "pipeline.run would) and whose documents --first-stage searches")
    model.add_argument("--split", help="the protocol's test split the model is trained for (default: the dataset's)")
    model.add_argument("--set", dest="overrides", action="append", default=None, metavar="NAME=VALUE",
                       help="model/text/training option of the model trained or looked up (repeatable)")
    model.add_argument("--config", dest="config_file", metavar="CONFIG", help="JSON/YAML file of model options")
    model.add_argument("--seed", type=int, default=42, help="seed of the model trained or looked up (default 42)")
    model.add_argument("--folds", type=int, default=5,
                       help="k of the k-fold protocol on datasets without splits; fold 1's model is served (default 5)")
    model.add_argument("--mirror", help="offline mirror directory for ir_datasets archives (env PIPELINE_MIRROR)")
    search = parser.add_argument_group("first stage (POST /search)")
    search.add_argument("--first-stage", metavar="NAME", help="serve /search with this first stage over --dataset "
                                                              "(e.g. bm25); also the model's training candidates")
    search.add_argument("--k", type=int, default=None,
                        help="candidates /search re-ranks when the request gives no 'k' (default: the dataset's, else 100)")
    serving = parser.add_argument_group("serving")
    serving.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    serving.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help=f"port (default {DEFAULT_PORT}; 0 picks a free one); the URL is printed on one line")
    serving.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                         help=f"requests scored together in one score_many call, at most (default {DEFAULT_MAX_BATCH})")
    serving.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                         help="how long the first request of a batch waits for others (default "
                              f"{DEFAULT_MAX_WAIT_MS:g} ms; 0: only those already waiting)")
    serving.add_argument("--batch-size", type=int, default=None,
                         help="(query, document) pairs per forward pass (default: the model's score_batch_size)")
    serving.add_argument("--max-docs", type=int, default=DEFAULT_MAX_DOCS,
                         help=f"documents per request, at most (default {DEFAULT_MAX_DOCS}; more is a 413)")
    serving.add_argument("--threads", type=int, default=0,
                         help="torch CPU threads for scoring (env PIPELINE_THREADS; default 0: torch's)")
    serving.add_argument("--bf16", action="store_true",
                         help="score with bfloat16 matrix products (as pipeline.run --bf16: several times faster on "
                              "CPUs with AMX or AVX512-BF16)")
    serving.add_argument("--int8", action="store_true",
                         help="score with int8 linear layers (as pipeline.run --int8; transformer re-rankers)")
    return parser


def check_options(options: argparse.Namespace) -> None:
    """Every check that needs no file or model; the first failing one is a :class:`ConfigError`."""
    if bool(options.checkpoint) == bool(options.reranker):
        raise ConfigError("give either --checkpoint PATH or --reranker NAME (with --model, or --dataset to use "
                          "the model pipeline.run trains)")
    if options.checkpoint:
        for flag, value in (("--model", options.model), ("--set", options.overrides), ("--config", options.config_file)):
            if value:
                raise ConfigError(f"{flag} does not go with --checkpoint: the checkpoint holds its model and options")
        if not Path(options.checkpoint).is_file():
            raise ConfigError(f"--checkpoint {options.checkpoint}: no such file")
    if options.reranker == "none":
        raise ConfigError("--reranker none: a service needs a re-ranker to score with")
    if options.model and (options.overrides or options.config_file):
        raise ConfigError("--set/--config do not go with --model: the saved model holds its options")
    if options.reranker and not options.model and not options.dataset:
        raise ConfigError(f"--reranker {options.reranker} needs --model CHECKPOINT or --dataset D (whose cached or "
                          "newly trained model is served)")
    if options.first_stage and not options.dataset:
        raise ConfigError("--first-stage needs --dataset: the collection it searches")
    if options.split and not options.dataset:
        raise ConfigError("--split needs --dataset")
    if not 0 <= options.port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {options.port}")
    for flag, value, low in (("--max-batch", options.max_batch, 1), ("--max-docs", options.max_docs, 1),
                             ("--threads", options.threads, 0), ("--batch-size", options.batch_size, 1),
                             ("--k", options.k, 1), ("--folds", options.folds, 2)):
        if value is not None and value < low:
            raise ConfigError(f"{flag} must be at least {low}, got {value}")
    if not options.max_wait_ms >= 0 or not math.isfinite(options.max_wait_ms):
        raise ConfigError(f"--max-wait-ms must be a number >= 0, got {options.max_wait_ms}")


def run_config(options: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` the model is looked up (or trained) with: the same cache key as
    ``python -m pipeline.run`` with these options (names checked here, before any work)."""
    given = {"reranker": options.reranker, "model": options.model, "split": options.split, "seed": options.seed,
             "folds": options.folds, "overrides": tuple(options.overrides or ()), "config_file": options.config_file,
             "k": options.k, "threads": options.threads, "mirror": options.mirror, "int8": options.int8,
             "bf16": options.bf16}
    if options.dataset:
        given["dataset"] = options.dataset
    if options.first_stage:
        given["first_stage"] = options.first_stage
    return RunConfig(**given)


def build_service(options: argparse.Namespace) -> RerankService:
    """Load (or train) the model and build the first stage the options ask for; bad options are a
    :class:`ConfigError` before anything is loaded."""
    check_options(options)
    config = run_config(options) if options.reranker else None
    # the first stage's name and BM25 options are checked now, before a model is loaded or trained
    search_config = (config or RunConfig(dataset=options.dataset, first_stage=options.first_stage)
                     if options.first_stage else None)
    if options.threads:  # read by the re-rankers when they first score or train
        os.environ["PIPELINE_THREADS"] = str(options.threads)
        set_threads(options.threads)
    # the dataset is read only when something uses it: the model's training (or cache key), or the first stage
    needed = options.first_stage or (options.reranker and not options.model)
    dataset = load_dataset(options.dataset, options.mirror) if options.dataset and needed else None
    if options.checkpoint:
        model = load_checkpoint_model(options.checkpoint)
        arithmetic = RunConfig(reranker=model.info["reranker"], int8=options.int8, bf16=options.bf16)
        check_scoring_arithmetic(arithmetic, type(model.reranker))
    else:
        check_scoring_arithmetic(config, reranker_class(config.reranker))   # before any training
        model = obtain_model(config, dataset)
    set_scoring_arithmetic(model.reranker, options)
    model.info["arithmetic"] = "int8" if options.int8 else "bf16" if options.bf16 else "fp32"
    retriever, documents, k = None, None, RERANK_DEPTH
    if search_config is not None:
        retriever = make_first_stage(options.first_stage, dataset, search_config.first_stage_settings())
        documents = dataset.doc_store()
        k = options.k or dataset.recipe.k or RERANK_DEPTH
        model.info["dataset"] = dataset.name
    elif options.dataset and not needed:
        log.info("--dataset %s is not used: the model comes from --checkpoint/--model and there is no --first-stage",
                 options.dataset)
    return RerankService(model, retriever=retriever, documents=documents, first_stage=options.first_stage, k=k,
                         max_docs=options.max_docs, max_batch=options.max_batch, max_wait_ms=options.max_wait_ms,
                         batch_size=options.batch_size, threads=options.threads)


def serve(options: argparse.Namespace, announce: Callable[[str], None] = print) -> None:
    """Build the service, listen, ``announce`` the URL (one line) and serve until interrupted; on the way out
    the requests in flight are answered before the model stops."""
    service = build_service(options)
    try:
        server = RerankServer(service, options.host, options.port)
    except BaseException:
        service.close()
        raise
    try:
        announce(f"serving {server.url}")
        server.serve_forever()
    finally:
        server.server_close()
        service.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: a bad option prints ``error: ...`` and exits with status 2; Ctrl-C and
    ``kill`` stop the service cleanly (130 / 143)."""
    configure_logging()
    keep_freed_memory()
    try:
        with exit_cleanly(KEPT_ON_INTERRUPT):
            serve(build_parser().parse_args(argv), lambda line: print(line, flush=True))
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
