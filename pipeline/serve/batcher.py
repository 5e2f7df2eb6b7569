"""Cross-request batching: one worker thread owns the model and scores the requests of many clients in
shared ``score_many`` calls."""
from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.errors import ConfigError, PipelineError
from ..core.records import Doc, Query
from ..core.runtime import set_threads

log = logging.getLogger("pipeline.serve")

DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_WAIT_MS = 5.0


class ServiceUnavailable(PipelineError):
    """The service is shutting down, or its model is not loaded yet, and scores nothing (HTTP 503)."""


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
    scored again request by request, so one request's failure is not its neighbours'. A request whose
    future was cancelled before its batch started (its client gave up, or the server cancelled it at
    shutdown) is skipped.

    Args:
        reranker: the model (``score_many`` when it has one, else ``score`` per request).
        max_batch: requests per ``score_many`` call, at most.
        max_wait_ms: how long the first request of a batch waits for company.
        batch_size: (query, document) pairs per forward pass (``None``: the model's default).
        threads: torch CPU threads of the worker (0: torch's default).

    Example:
        >>> batcher = ScoringBatcher(reranker, max_batch=8)
        >>> batcher.score(Query("q", "cheap flights"), [Doc("d", "flights to Oslo")])
        [1.25]
        >>> batcher.close()
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
        """Queue ``(query, docs)``.

        Returns:
            a future of the scores, in the docs' order.

        Raises:
            ServiceUnavailable: after :meth:`close`.
        """
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

    def close(self, timeout: float | None = None) -> bool:
        """Score what is queued, then stop the worker; later submissions are :class:`ServiceUnavailable`.

        Args:
            timeout: seconds to wait for the worker, at most (``None``: until it is done). A worker still
                scoring then is left behind (it is a daemon thread: it does not keep the process alive).

        Returns:
            whether the worker finished within ``timeout``.
        """
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._queue.put(_STOP)
        self._worker.join(timeout)
        if self._worker.is_alive():
            log.warning("the scoring worker is still busy after %.0f s; stopping without it", timeout)
            return False
        return True

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
            log.warning("a batch of %d requests failed (%s); scoring them one by one", len(jobs), error)
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
