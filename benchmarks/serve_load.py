"""Load test of ``python -m pipeline.serve``: requests per second and latency under concurrent clients,
against scoring the same requests one after another in this process, and optionally against another
version of the service.

    python benchmarks/serve_load.py [--requests N] [--concurrency 1 4 16] [--threads 1] \
        [--models bi-encoder knrm] [--output benchmarks/results/speed/serve-load.md]
    git show 9ba21d8^:pipeline/serve.py > /tmp/old_serve.py    # the http.server service, before FastAPI
    python benchmarks/serve_load.py --threads 1 --baseline /tmp/old_serve.py \
        --output benchmarks/results/speed/serve-load-fastapi.md

With ``--baseline FILE`` (a ``pipeline/serve.py`` of an earlier commit, run as a module of the ``pipeline``
package), every run is made against both services, the baseline first, on the same requests, one after
the other; the table gives the current service's throughput and latencies as ratios to the baseline's.
Clients open a new connection per request (the old service spoke HTTP/1.0); for the models in
``--keep-alive-models`` the current service is also measured with one HTTP/1.1 connection per client.
The service is ready when ``GET /ready`` answers 200 (a service without ``/ready`` is ready once it
prints its URL). A JSON file beside the table holds every number.

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
import datetime
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
#: runs an earlier ``pipeline/serve.py`` (argv[1]) as ``pipeline._serve_baseline``: its relative imports
#: resolve in the current ``pipeline`` package
BASELINE_LAUNCHER = """import importlib.util, sys
path = sys.argv[1]; sys.argv = ["python -m pipeline.serve", *sys.argv[2:]]
spec = importlib.util.spec_from_file_location("pipeline._serve_baseline", path)
module = importlib.util.module_from_spec(spec); sys.modules[spec.name] = module; spec.loader.exec_module(module)
sys.exit(module.main())
"""


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
    """The service in a child process, on a free port; its log goes to a temporary file.

    Args:
        flags: the model's flags.
        threads, max_batch, max_wait_ms: the service's.
        baseline: an earlier ``pipeline/serve.py`` to run instead of ``python -m pipeline.serve``.
    """

    def __init__(self, flags: list[str], threads: int, max_batch: int, max_wait_ms: float, baseline: Path | None = None):
        program = [sys.executable, "-c", BASELINE_LAUNCHER, str(baseline)] if baseline else [
            sys.executable, "-m", "pipeline.serve"]
        self.command = [*program, *flags, "--port", "0", "--threads", str(threads),
                        "--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True)
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(STARTUP_TIMEOUT_S)
        line = found[0] if found else ""
        if not line.startswith("serving "):
            self.fail()
        self.url = line.split()[-1]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while status_of(self.url, "/ready") not in (200, 404):   # 404: a service without /ready
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.fail()
            time.sleep(0.2)

    def fail(self) -> None:
        """Stop and report a service that did not start."""
        self.stop()
        self.log.seek(0)
        raise SystemExit(f"error: the service did not start: {shlex.join(self.command)}\n{self.log.read()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 60 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.log.closed:
            self.log.close()


def status_of(url: str, path: str) -> int | None:
    """The status of ``GET path`` (``None`` when the connection fails)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        connection.close()


def post(url: str, path: str, body: bytes | None = None, connection: http.client.HTTPConnection | None = None) -> dict:
    """The JSON answer of one request (``GET`` without a body), on ``connection`` (kept open) or a new one;
    anything but 200 stops the benchmark."""
    parts = urlsplit(url)
    own = connection is None
    connection = connection or http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        connection.request("POST" if body is not None else "GET", path, body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise SystemExit(f"error: {path} answered {response.status}: {data[:300]!r}")
        return json.loads(data)
    finally:
        if own:
            connection.close()


def load(url: str, requests: list[Request], clients: int, keep_alive: bool = False) -> tuple[dict, list[list[float]]]:
    """Send every request from ``clients`` threads (each on one kept-open connection with ``keep_alive``, else
    a new connection per request); throughput, latencies and the scores in posted order."""
    bodies = [request.body() for request in requests]
    latencies = [0.0] * len(requests)
    scores: list[list[float]] = [[] for _ in requests]
    next_index = iter(range(len(requests)))
    lock = threading.Lock()

    def client():
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600) if keep_alive else None
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                if connection is not None:
                    connection.close()
                return
            begun = time.perf_counter()
            answer = post(url, "/rerank", bodies[index], connection)
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


def measure(flags: list[str], args, requests: list[Request], warmup: Request, clients: int,
            baseline: Path | None = None, keep_alive: bool = False) -> dict:
    """One run: a fresh service (fresh caches), a warm-up request, then every request from ``clients``."""
    service = Service(flags, args.threads, args.max_batch, args.max_wait_ms, baseline)
    try:
        post(service.url, "/rerank", warmup.body())
        before = post(service.url, "/health")
        result, scores = load(service.url, requests, clients, keep_alive)
        after = post(service.url, "/health")
    finally:
        service.stop()
    batches = after["batches"] - before["batches"]
    return {**result, "clients": clients, "scores": scores,
            "mean_batch": (after["requests"] - before["requests"]) / max(1, batches)}


def main(argv: list[str] | None = None) -> int:
    """Run the load test and write the table (and, beside it, the JSON of every number)."""
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
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier pipeline/serve.py to measure against, run by run (default: none)")
    parser.add_argument("--keep-alive-models", nargs="*", choices=list(MODELS), default=["knrm"],
                        help="models also measured with one kept-open connection per client (default: knrm)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "speed" / "serve-load.md")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/serve_load.py", *(sys.argv[1:] if argv is None else argv)])
    if args.baseline is not None and not args.baseline.is_file():
        raise SystemExit(f"error: --baseline {args.baseline}: no such file")

    os.environ["PIPELINE_THREADS"] = str(args.threads)
    set_threads(args.threads)
    dataset = load_dataset(DATASET)
    rows, records = [], []
    load_before = os.getloadavg()
    started = time.perf_counter()
    for name in args.models:
        flags = MODELS[name]
        count = args.requests or DEFAULT_REQUESTS[name]
        requests, warmup = make_requests(dataset, count, args.min_docs, args.max_docs, args.seed)
        pairs = sum(len(r.docs) for r in requests)
        runs = []
        for clients in args.concurrency:
            # the baseline and the current service one after the other, on the same requests
            variants = ([("baseline (http.server)", args.baseline, False)] if args.baseline else []) + [
                ("current", None, False)] + ([("current, keep-alive", None, True)] if name in args.keep_alive_models else [])
            for label, baseline, keep_alive in variants:
                result = measure(flags, args, requests, warmup, clients, baseline, keep_alive)
                runs.append((label, result))
                print(f"{name} {label} C={clients}: {result['rps']:.2f} req/s, p50 {result['p50']:.0f} ms, "
                      f"p99 {result['p99']:.0f} ms, load {os.getloadavg()[0]:.2f}", flush=True)
        # after the services: a first start may have trained the model the reference loads from the cache
        model = obtain_model(run_config(build_parser().parse_args(flags)), dataset)
        base, expected = reference(model.reranker, requests, warmup)
        print(f"{name} sequential in-process: {base['rps']:.2f} req/s", flush=True)
        rows.append(f"| {LABELS[name]} | {count} ({pairs} pairs) | in-process, sequential | {base['rps']:.2f} | "
                    f"{base['p50']:.0f} | {base['p99']:.0f} | 1 | 1.00 |  |  |  | 0 |")
        records.append({"model": name, "run": "in-process, sequential", "clients": 1,
                        **{key: base[key] for key in ("rps", "p50", "p99", "wall")}})
        baselines = {result["clients"]: result for label, result in runs if label.startswith("baseline")}
        for label, result in runs:
            clients = result["clients"]
            old = baselines.get(clients)
            ratios = (["", "", ""] if old is None or label.startswith("baseline") else
                      [f"{result['rps'] / old['rps']:.2f}", f"{result['p50'] / old['p50']:.2f}",
                       f"{result['p99'] / old['p99']:.2f}"])
            difference = largest_difference(result["scores"], expected)
            rows.append(f"| {LABELS[name]} | {count} ({pairs} pairs) | {label}, {clients} client"
                        f"{'s' if clients > 1 else ''} | {result['rps']:.2f} | {result['p50']:.0f} | {result['p99']:.0f} | "
                        f"{result['mean_batch']:.1f} | {result['rps'] / base['rps']:.2f} | {' | '.join(ratios)} | "
                        f"{difference:.1e} |")
            records.append({"model": name, "run": label, "clients": clients, "requests": count, "pairs": pairs,
                            **{key: result[key] for key in ("rps", "p50", "p99", "wall", "mean_batch")},
                            "vs_sequential": result["rps"] / base["rps"], "max_abs_diff": difference,
                            **({} if old is None or label.startswith("baseline") else {
                                "rps_ratio": result["rps"] / old["rps"], "p50_ratio": result["p50"] / old["p50"],
                                "p99_ratio": result["p99"] / old["p99"]})})
    import torch

    load_after = os.getloadavg()
    load_text = (f"load average at the start {' / '.join(f'{v:.2f}' for v in load_before)}, at the end "
                 f"{' / '.join(f'{v:.2f}' for v in load_after)}")
    machine = (f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), Python "
               f"{platform.python_version()}, torch {torch.__version__}")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    baseline_text = (f" Baseline: `{args.baseline.name}` (the `http.server` service), run as a module of the current "
                     "`pipeline` package; ratios are current / baseline for the same client count (requests/s: "
                     "higher is better; p50/p99: lower is better)." if args.baseline else "")
    text = "\n".join([
        f"<!-- command: {command} -->",
        "# pipeline.serve under load",
        "",
        f"`POST /rerank` requests, each one Vaswani query with {args.min_docs}-{args.max_docs} "
        f"random Vaswani documents (no document in two requests of a run; the same requests in every run of a "
        f"model); service flags "
        f"`--threads {args.threads} --max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms:g}`, a fresh "
        "service per run, one warm-up request first. Clients are threads of the benchmark process, each sending "
        "its next request when its last is answered, on a new connection per request (keep-alive rows: one "
        "HTTP/1.1 connection per client). Reference: `reranker.score` on the same requests one after "
        f"another in the benchmark process ({args.threads} torch thread(s)). p50/p99: request latency (nearest "
        "rank; with fewer than 100 requests p99 is the slowest). Mean batch: requests per `score_many` call. "
        "Max |diff|: largest difference between a served score and the reference's." + baseline_text,
        "",
        "| model | requests | run | requests/s | p50 ms | p99 ms | mean batch | vs. sequential | requests/s vs. "
        "baseline | p50 vs. baseline | p99 vs. baseline | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"{date}. Machine: {machine}; {load_text}; total {time.perf_counter() - started:.0f} s.",
        "",
    ])
    with atomic_write(args.output) as handle:
        handle.write(text)
    with atomic_write(args.output.with_suffix(".json")) as handle:
        json.dump({"command": command, "date": date, "machine": machine, "load_average_start": load_before,
                   "load_average_end": load_after, "baseline": str(args.baseline) if args.baseline else None,
                   "service_flags": {"threads": args.threads, "max_batch": args.max_batch,
                                     "max_wait_ms": args.max_wait_ms},
                   "runs": records}, handle, indent=2)
        handle.write("\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
