"""Load test of ``python -m pipeline.serve``: requests per second and latency under concurrent clients,
against scoring the same requests one after another in this process.

    python benchmarks/serve_load.py [--requests N] [--concurrency 1 4 16] [--threads 1] \
        [--models bi-encoder knrm] [--output benchmarks/results/speed/serve-load.md]

For each model the service is started as its own process (``python -m pipeline.serve ... --port 0``) with
the same model options as this script's in-process copy:

* ``bi-encoder``: the zero-shot all-MiniLM-L6-v2 (``--reranker bi-encoder --model all-MiniLM-L6-v2``);
* ``knrm``: KNRM trained on Vaswani (``--reranker knrm --dataset vaswani``: fold 1 of the 5-fold protocol,
  loaded from the model cache, or trained there by the service's first start, about 30 s).

The requests: one Vaswani query each (in turn) with 20 to 100 Vaswani documents drawn at random (seeded),
no document in two requests, so no cache of the model (the bi-encoder keeps document vectors) makes a later
request cheaper. The reference scores them sequentially with ``reranker.score`` in this process; then, for
every client count C, a fresh service (fresh caches) answers them from C threads, each sending its next
request as soon as its last is answered. A warm-up request of other documents precedes every timed run.
Every answer is checked against the reference scores (the largest difference is in the table). The table is
written atomically, with the command line in a comment at the top.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.core.atomic import atomic_write  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.records import Doc, Query  # noqa: E402
from pipeline.core.runtime import set_threads  # noqa: E402
from pipeline.serve import build_parser, obtain_model, run_config  # noqa: E402

DATASET = "vaswani"
#: the served model of each name: the service's flags (also parsed here to load the same model in-process)
MODELS = {
    "bi-encoder": ["--reranker", "bi-encoder", "--model", "all-MiniLM-L6-v2", "--dataset", DATASET],
    "knrm": ["--reranker", "knrm", "--dataset", DATASET],
}
LABELS = {"bi-encoder": "bi-encoder (all-MiniLM-L6-v2, zero-shot)", "knrm": "KNRM (Vaswani, fold 1 of 5)"}
#: requests per run when --requests is not given: MiniLM takes about 3 s per request on one busy core, KNRM
#: about 10 ms, and the whole benchmark is meant to stay within about 5 minutes
DEFAULT_REQUESTS = {"bi-encoder": 16, "knrm": 64}
STARTUP_TIMEOUT_S = 600


@dataclass
class Request:
    """One ``POST /rerank``: a query and its documents."""

    query: Query
    docs: list[Doc]

    def body(self) -> bytes:
        return json.dumps({"query": self.query.text,
                           "documents": [{"id": d.doc_id, "text": d.text} for d in self.docs]}).encode()


def make_requests(dataset, count: int, low: int, high: int, seed: int) -> tuple[list[Request], Request]:
    """``count`` requests of ``low`` to ``high`` documents each, and one warm-up request; no document twice."""
    rng = random.Random(seed)
    queries = sorted(dataset.queries.values())
    sizes = [rng.randint(low, high) for _ in range(count + 1)]
    pool = sorted(dataset.doc_store().values())
    if sum(sizes) > len(pool):
        raise SystemExit(f"error: {sum(sizes)} documents asked for, the collection has {len(pool)}")
    docs = rng.sample(pool, sum(sizes))
    requests, start = [], 0
    for number, size in enumerate(sizes):
        requests.append(Request(queries[number % len(queries)], docs[start : start + size]))
        start += size
    return requests[1:], requests[0]


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` by the nearest-rank rule (p99 of 48 values is the largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def reference(reranker, requests: list[Request], warmup: Request) -> tuple[dict, list[list[float]]]:
    """Sequential in-process scoring: throughput, latencies and every request's scores."""
    reranker.score(warmup.query, warmup.docs)
    latencies, scores = [], []
    started = time.perf_counter()
    for request in requests:
        begun = time.perf_counter()
        scores.append([float(s) for s in reranker.score(request.query, request.docs)])
        latencies.append(time.perf_counter() - begun)
    wall = time.perf_counter() - started
    return summary(latencies, wall), scores


def summary(latencies: list[float], wall: float) -> dict:
    return {"rps": len(latencies) / wall, "p50": percentile(latencies, 0.5) * 1000,
            "p99": percentile(latencies, 0.99) * 1000, "wall": wall}


class Service:
    """``python -m pipeline.serve`` in a child process, on a free port; its log goes to a temporary file."""

    def __init__(self, flags: list[str], threads: int, max_batch: int, max_wait_ms: float):
        self.command = [sys.executable, "-m", "pipeline.serve", *flags, "--port", "0", "--threads", str(threads),
                        "--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True)
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(STARTUP_TIMEOUT_S)
        line = found[0] if found else ""
        if not line.startswith("serving "):
            self.stop()
            self.log.seek(0)
            raise SystemExit(f"error: the service did not start: {shlex.join(self.command)}\n{self.log.read()[-3000:]}")
        self.url = line.split()[-1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def post(url: str, path: str, body: bytes | None = None) -> dict:
    """The JSON answer of one request (``GET`` without a body); anything but 200 stops the benchmark."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        connection.request("POST" if body is not None else "GET", path, body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise SystemExit(f"error: {path} answered {response.status}: {data[:300]!r}")
        return json.loads(data)
    finally:
        connection.close()


def load(url: str, requests: list[Request], clients: int) -> tuple[dict, list[list[float]]]:
    """Send every request from ``clients`` threads; throughput, latencies and the scores in posted order."""
    bodies = [request.body() for request in requests]
    latencies = [0.0] * len(requests)
    scores: list[list[float]] = [[] for _ in requests]
    next_index = iter(range(len(requests)))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            begun = time.perf_counter()
            answer = post(url, "/rerank", bodies[index])
            latencies[index] = time.perf_counter() - begun
            by_id = {r["id"]: r["score"] for r in answer["results"]}
            scores[index] = [by_id[d.doc_id] for d in requests[index].docs]

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(latencies, time.perf_counter() - started), scores


def largest_difference(first: list[list[float]], second: list[list[float]]) -> float:
    return max((abs(a - b) for x, y in zip(first, second) for a, b in zip(x, y)), default=0.0)


def main(argv: list[str] | None = None) -> int:
    """Run the load test and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per run (default: 16 for the bi-encoder, 64 for KNRM)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="client counts (default 1 4 16)")
    parser.add_argument("--min-docs", type=int, default=20)
    parser.add_argument("--max-docs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, service and reference (default 1)")
    parser.add_argument("--max-batch", type=int, default=32, help="the service's --max-batch (default 32)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the service's --max-wait-ms (default 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "speed" / "serve-load.md")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/serve_load.py", *(sys.argv[1:] if argv is None else argv)])

    os.environ["PIPELINE_THREADS"] = str(args.threads)
    set_threads(args.threads)
    dataset = load_dataset(DATASET)
    rows = []
    started = time.perf_counter()
    for name in args.models:
        flags = MODELS[name]
        count = args.requests or DEFAULT_REQUESTS[name]
        requests, warmup = make_requests(dataset, count, args.min_docs, args.max_docs, args.seed)
        pairs = sum(len(r.docs) for r in requests)
        runs = []
        for clients in args.concurrency:
            service = Service(flags, args.threads, args.max_batch, args.max_wait_ms)  # fresh caches every run
            try:
                post(service.url, "/rerank", warmup.body())
                before = post(service.url, "/health")
                result, scores = load(service.url, requests, clients)
                after = post(service.url, "/health")
            finally:
                service.stop()
            batches = after["batches"] - before["batches"]
            runs.append((clients, result, scores, (after["requests"] - before["requests"]) / max(1, batches)))
            print(f"{name} C={clients}: {result['rps']:.2f} req/s, p50 {result['p50']:.0f} ms, "
                  f"p99 {result['p99']:.0f} ms", flush=True)
        # after the services: a first start may have trained the model the reference loads from the cache
        model = obtain_model(run_config(build_parser().parse_args(flags)), dataset)
        base, expected = reference(model.reranker, requests, warmup)
        print(f"{name} sequential in-process: {base['rps']:.2f} req/s", flush=True)
        rows.append(f"| {LABELS[name]} | {count} ({pairs} pairs) | in-process, sequential | {base['rps']:.2f} | "
                    f"{base['p50']:.0f} | "
                    f"{base['p99']:.0f} | 1 | 1.00 | 0 |")
        for clients, result, scores, mean_batch in runs:
            rows.append(f"| {LABELS[name]} | {count} ({pairs} pairs) | service, {clients} client{'s' if clients > 1 else ''} | "
                        f"{result['rps']:.2f} | {result['p50']:.0f} | {result['p99']:.0f} | {mean_batch:.1f} | "
                        f"{result['rps'] / base['rps']:.2f} | {largest_difference(scores, expected):.1e} |")
    import torch

    load_average = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    text = "\n".join([
        f"<!-- command: {command} -->",
        "# pipeline.serve under load",
        "",
        f"`POST /rerank` requests, each one Vaswani query with {args.min_docs}-{args.max_docs} "
        f"random Vaswani documents (no document in two requests of a run; the same requests in every run of a "
        f"model); service flags "
        f"`--threads {args.threads} --max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms:g}`, a fresh "
        "service per run, one warm-up request first. Clients are threads of the benchmark process, each sending "
        "its next request when its last is answered. Reference: `reranker.score` on the same requests one after "
        f"another in the benchmark process ({args.threads} torch thread(s)). p50/p99: request latency (nearest "
        "rank; with fewer than 100 requests p99 is the slowest). Mean batch: requests per `score_many` call. "
        "Max |diff|: largest difference between a served score and the reference's.",
        "",
        "| model | requests | run | requests/s | p50 ms | p99 ms | mean batch | vs. sequential | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Machine: {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), Python "
        f"{platform.python_version()}, torch {torch.__version__}; load average at the end {load_average}; "
        f"total {time.perf_counter() - started:.0f} s.",
        "",
    ])
    with atomic_write(args.output) as handle:
        handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
