"""First-stage benchmark: effectiveness of the shipped runs and of BM25 / BM25+RM3 on the project's Lucene
indexes, and the speed of the BM25 stage (start-up to first result, queries per second).

    python benchmarks/first_stage.py [--datasets cranfield vaswani nfcorpus] [--output FILE.md]

Prints Markdown tables (the rows of BENCHMARKS.md). Start-up is measured in a fresh interpreter
(``python -c`` through ``subprocess``): from process start to the first query's results, with the index
already built (the cached case a user meets after the first run).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import publish  # noqa: E402
from indexes import BM25Settings, make_first_stage  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402

STARTUP_SNIPPET = """
import time, sys
started = time.perf_counter()
from pipeline.core.datasets import load_dataset
from indexes import make_first_stage
dataset = load_dataset({name!r})
retriever = make_first_stage("bm25", dataset)
query = next(iter(dataset.queries.values()))
hits = retriever.search([query], 1000)
print(time.perf_counter() - started)
"""


def shipped_rows() -> list[str]:
    rows = ["| dataset | run | measure | value |", "|---|---|---|---|"]
    for name in ("microblog-2011", "microblog-2012", "microblog-2013", "microblog-2014"):
        dataset = load_dataset(name)
        result = evaluate(dataset.first_stage, dataset.qrels, "AP P@30").aggregate
        rows.append(f"| {name} | shipped QL (id.txt) | MAP / P@30 | {result['AP']:.4f} / {result['P@30']:.4f} |")
    for name in ("dl19", "dl20"):
        dataset = load_dataset(name)
        result = evaluate(dataset.first_stage, dataset.qrels, "nDCG@10").aggregate
        rows.append(f"| {name} | shipped BM25 top-100 | nDCG@10 | {result['nDCG@10']:.4f} |")
    return rows


def effectiveness_rows(names: list[str]) -> list[str]:
    rows = ["| dataset | first stage | MAP | nDCG@10 | R@100 | R@1000 | queries |", "|---|---|---|---|---|---|---|"]
    for name in names:
        dataset = load_dataset(name)
        for spec in ("bm25", "bm25+rm3"):
            run = make_first_stage(spec, dataset).search(dataset.queries.values(), 1000)
            result = evaluate(run, dataset.qrels, "AP nDCG@10 R@100 R@1000").aggregate
            rows.append(f"| {name} | {spec} | {result['AP']:.4f} | {result['nDCG@10']:.4f} | {result['R@100']:.4f} "
                        f"| {result['R@1000']:.4f} | {len(dataset.queries)} |")
    return rows


def speed_rows(names: list[str], repeats: int = 3) -> list[str]:
    rows = ["| dataset | docs | start-up to first result (s, median of 3) | k=10 q/s | k=100 q/s | k=1000 q/s |",
            "|---|---|---|---|---|---|"]
    root = Path(__file__).resolve().parent.parent
    for name in names:
        dataset = load_dataset(name)
        retriever = make_first_stage("bm25", dataset, BM25Settings(threads=2))
        queries = list(dataset.queries.values())
        startups = []
        for _ in range(repeats):
            out = subprocess.run([sys.executable, "-c", STARTUP_SNIPPET.format(name=name)], cwd=root,
                                 capture_output=True, text=True, check=True, env={**os.environ, "TQDM_DISABLE": "1"})
            startups.append(float(out.stdout.strip().splitlines()[-1]))
        rates = []
        for k in (10, 100, 1000):
            retriever.search(queries[:8], k)  # warm-up (JIT)
            started = time.perf_counter()
            retriever.search(queries, k)
            rates.append(len(queries) / (time.perf_counter() - started))
        rows.append(f"| {name} | {len(dataset.doc_store())} | {sorted(startups)[len(startups) // 2]:.2f} | "
                    + " | ".join(f"{r:.0f}" for r in rates) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cranfield", "vaswani", "nfcorpus"])
    parser.add_argument("--output", help="also write the tables to this Markdown file")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    sections = [
        f"# First stage ({time.strftime('%Y-%m-%d')}, {machine})",
        "## Shipped runs through the project's loaders", *shipped_rows(),
        "## BM25 / BM25+RM3 (k1=0.9 b=0.4; RM3 10 terms, 10 docs, weight 0.5; Porter, stopwords removed)",
        *effectiveness_rows(args.datasets),
        "## BM25 speed (2 search threads)", *speed_rows(args.datasets),
    ]
    text = "\n".join(sections)
    publish(text, args.output)


if __name__ == "__main__":
    main()
