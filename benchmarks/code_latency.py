"""End-to-end latency of the code first stage with and without pruning before exact MaxSim, on one index.

    python benchmarks/code_latency.py [--datasets nfcorpus vaswani-npl] [--steps 100] [--bits 512]
        [--hash-head lsh] [--depths 0 32 64 128 256] [--k 100] [--k-prime 256] [--threads 1]
        [--output benchmarks/results/codes/latency.md]

Per dataset, one :class:`indexes.codes.CodeRetriever` over one built (or cached) index is searched query by
query with every ``rescore_depth`` of ``--depths`` (0: exact MaxSim over every kNN candidate, the search
before pruning); the configurations alternate query by query in this one process (same index, same pages
in memory, same load), so their ratios are fair. Each time is ``retriever.search([query], k)`` end to end:
query encoding, the kNN step, the approximate scores and the pruning, exact MaxSim over the kept
candidates, the sort. Also per configuration: nDCG@10 and R@100 (pipeline.evaluate), the documents scored
exactly per query, and a breakdown of the time into those stages (one more pass, each stage timed alone).
The index's bytes per stored vector and the process's peak resident memory (``VmHWM``) are reported too.
Encoders and indexes are the ones ``code_first_stage.py`` builds with the same options (shared cache).
Results: Markdown at ``--output`` and the same numbers as JSON beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--quiet" in sys.argv:  # before anything imports tqdm, which reads TQDM_DISABLE once
    os.environ["TQDM_DISABLE"] = "1"

from code_first_stage import add_code_arguments, code_options, describe_codes, machine_line  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402

MEASURES = "nDCG@10 R@100"


def peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stage_times(retriever, query, depth: int, k: int) -> dict:
    """Seconds of each stage of one search of ``query`` (the stages of ``CodeRetriever.search``, each timed)."""
    times = {}
    started = time.perf_counter()
    vectors = retriever.encode_queries([query.text])[0]
    times["encode"] = time.perf_counter() - started
    started = time.perf_counter()
    labels, sims = retriever.neighbours(vectors)
    times["knn"] = time.perf_counter() - started
    started = time.perf_counter()
    found, approximate = retriever.approximate_scores(labels, sims)
    if depth and len(found) > depth:
        found = np.sort(found[np.lexsort((found, -approximate))[:depth]])
    times["prune"] = time.perf_counter() - started
    started = time.perf_counter()
    retriever._ranking(query, vectors, found, k)
    times["exact"] = time.perf_counter() - started
    times["scored"] = len(found)
    return times


def benchmark(name: str, args) -> dict:
    """Every depth of ``args.depths`` on ``name``'s index: a dict of the measurements."""
    from indexes.codes import CodeRetriever, build_code_index, index_metadata, storage_bytes

    dataset = load_dataset(name)
    queries = list(dataset.queries.values())[: args.max_queries or None]
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    options = code_options("codes", args)
    path = build_code_index(dataset, options)
    meta = index_metadata(path)
    retriever = CodeRetriever(path, k_prime=args.k_prime, threads=args.threads)
    retriever.search(queries[:2], args.k)  # warm-up: the model's first call, the index's pages
    runs = {depth: {} for depth in args.depths}
    seconds = {depth: [] for depth in args.depths}
    for number, query in enumerate(queries):
        # rotate the order so that no configuration always runs first (caches warmed by the one before)
        order = args.depths[number % len(args.depths):] + args.depths[: number % len(args.depths)]
        for depth in order:
            retriever.rescore_depth = depth
            started = time.perf_counter()
            runs[depth].update(retriever.search([query], args.k))
            seconds[depth].append(time.perf_counter() - started)
    rows = []
    for depth in args.depths:
        stages = [stage_times(retriever, q, max(depth, args.k) if depth else 0, args.k) for q in queries]
        scores = evaluate(runs[depth], qrels, MEASURES).aggregate
        rows.append({
            "rescore_depth": depth, "nDCG@10": scores["nDCG@10"], "R@100": scores["R@100"],
            "ms_per_query": 1000 * float(np.mean(seconds[depth])),
            "ms_median": 1000 * float(np.median(seconds[depth])),
            "scored_per_query": float(np.mean([s["scored"] for s in stages])),
            "stages_ms": {stage: 1000 * float(np.mean([s[stage] for s in stages]))
                          for stage in ("encode", "knn", "prune", "exact")},
        })
    exact = rows[args.depths.index(0)] if 0 in args.depths else rows[0]
    for row in rows:
        row["speedup"] = exact["ms_per_query"] / row["ms_per_query"]
        row["nDCG@10_change"] = row["nDCG@10"] - exact["nDCG@10"]
    stored = storage_bytes(path)
    return {"dataset": dataset.name, "queries": len(queries), "documents": meta["documents"],
            "vectors": meta["vectors"], "index": path.name, "index_format": meta.get("format", 1),
            "storage_bytes": stored, "bytes_per_vector": stored / meta["vectors"],
            "faiss_bytes": retriever.index_bytes, "peak_rss_mib": peak_rss_mib(), "rows": rows}


def render(results: list[dict], args, command: str) -> str:
    """The Markdown of :func:`benchmark`'s results."""
    lines = [
        f"# Code first stage: pruning before exact MaxSim ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{machine_line(args.threads)})",
        "",
        f"Command: `{command}`. Load average before / after: {args.load_before} / {args.load_after}.",
        "",
        f"Top {args.k} per query, {args.k_prime} neighbours per query token (flat index), {describe_codes(args)}. "
        "ms/query: `CodeRetriever.search([query], k)` end to end (query encoding, kNN, approximate scores and "
        "pruning, exact MaxSim, sort), one query at a time, the configurations alternating query by query in "
        "one process. rescore_depth 0: exact MaxSim over every candidate (the search before pruning); N: the "
        f"max(N, k) candidates with the best score estimated from the kNN results. Stage columns: a second pass, "
        "each stage timed alone (means).",
        "",
        "| dataset | rescore_depth | docs scored exactly / query | nDCG@10 | change | R@100 | ms/query (mean) "
        "| median | speed-up | encode | kNN | prune | exact MaxSim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for row in result["rows"]:
            stages = row["stages_ms"]
            label = "0 (exact, before)" if row["rescore_depth"] == 0 else str(row["rescore_depth"])
            lines.append(
                f"| {result['dataset']} | {label} | {row['scored_per_query']:.0f} | {row['nDCG@10']:.4f} "
                f"| {row['nDCG@10_change']:+.4f} | {row['R@100']:.4f} | {row['ms_per_query']:.1f} "
                f"| {row['ms_median']:.1f} | {row['speedup']:.1f}x | {stages['encode']:.1f} | {stages['knn']:.1f} "
                f"| {stages['prune']:.1f} | {stages['exact']:.1f} |")
    lines += ["", "| dataset | queries | documents | vectors | index format | bytes on disk / vector | "
              "faiss file bytes | peak RSS (MiB, whole process) |", "|---|---|---|---|---|---|---|---|"]
    for result in results:
        lines.append(f"| {result['dataset']} | {result['queries']} | {result['documents']:,} | {result['vectors']:,} "
                     f"| {result['index_format']} | {result['bytes_per_vector']:.1f} | {result['faiss_bytes']:,} "
                     f"| {result['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    add_code_arguments(parser)
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 32, 64, 128, 256],
                        help="rescore_depth values (0: exact MaxSim over every candidate)")
    parser.add_argument("--threads", type=int, default=1, help="torch / faiss threads (default 1)")
    parser.add_argument("--k", type=int, default=100, help="documents retrieved per query (default 100)")
    parser.add_argument("--k-prime", type=int, default=256, help="neighbours per query token (default 256)")
    parser.add_argument("--max-queries", type=int, help="only the first N queries of each dataset")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--output", help="write the table to this Markdown file (and the numbers to .json beside it)")
    args = parser.parse_args(argv)
    from pipeline.core.runtime import set_threads

    set_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    command = "python " + shlex.join(["benchmarks/code_latency.py", *(argv if argv is not None else sys.argv[1:])])
    args.load_before = Path("/proc/loadavg").read_text().split()[:3]
    results = [benchmark(name, args) for name in args.datasets]
    args.load_after = Path("/proc/loadavg").read_text().split()[:3]
    text = render(results, args, command)
    print(text)
    if args.output:
        from pipeline.core.atomic import write_text

        write_text(args.output, text + "\n")
        write_text(Path(args.output).with_suffix(".json"), json.dumps(
            {"command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "load_before": args.load_before, "load_after": args.load_after, "threads": args.threads,
             "k": args.k, "k_prime": args.k_prime, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
