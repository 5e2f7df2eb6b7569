"""Dense and hybrid first stages against BM25 (issue 32, item 2): effectiveness, latency and index size.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PIPELINE_HOME=$(mktemp -d) \\
        python benchmarks/dense_first_stage.py [--datasets cranfield vaswani nfcorpus dl19 dl20] \\
        [--output benchmarks/results/first-stage/dense-hybrid]

For every dataset: BM25 (Lucene, k1 0.9 b 0.4, Porter), ``dense`` (the packaged all-MiniLM-L6-v2, mean
pooled, cosine, flat faiss index, zero-shot) and ``hybrid`` with both fusions (min-max interpolation with the
weight tuned on held-out queries, cross-fitted over 5 folds on these split-less collections; RRF k=60), each
retrieving k=1000. Reported: nDCG@10, R@100, R@1000 (TREC DL: relevance >= 2 for recall, the passage task's
convention; nDCG@10 graded), ms per query end to end (``search`` over all queries in one call, as
``pipeline.run`` does: query encoding in batches of 32, faiss search, BM25 through Anserini, fusion; after a
one-query warm-up; the median of ``--rounds`` rounds in which the systems take turns; the hybrid's weight
tuning is timed apart, it happens once per process), index bytes on
disk (Lucene directory; faiss file and document ids; the hybrid holds both), index build seconds from an
empty ``PIPELINE_HOME`` (when the caches are empty), and the two-sided paired t-test p-value of nDCG@10
against BM25 (per query, every query of the dataset). Everything runs on one thread (torch, faiss, Anserini's
search). TREC DL's shipped data are the passages of the BM25 top-100 pools: every first stage here indexes
and searches that pool (4-5 thousand passages), not MS MARCO's 8.8M.

Writes ``<output>.json`` (every number, the command, the date, the load average before and after each
dataset) and ``<output>.md`` (the table).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexes import BM25Settings, make_first_stage  # noqa: E402
from indexes.dense import DenseOptions  # noqa: E402
from indexes.hybrid import HybridOptions  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate, paired_test  # noqa: E402

DATASETS = ("cranfield", "vaswani", "nfcorpus", "dl19", "dl20")
SYSTEMS = ("bm25", "dense", "hybrid-interpolate", "hybrid-rrf")


def loadavg() -> str:
    """The first three fields of /proc/loadavg."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def measures_of(dataset) -> tuple[str, str, str]:
    """nDCG@10, R@100, R@1000 names for ``dataset`` (TREC DL: recall at relevance >= 2)."""
    if dataset.recipe.pooled:
        return "nDCG@10", "R(rel=2)@100", "R(rel=2)@1000"
    return "nDCG@10", "R@100", "R@1000"


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def retriever_of(system: str, dataset, threads: int):
    """The first stage ``system`` with one search thread, built (and timed) if missing."""
    dense = DenseOptions(threads=threads, progress=False)
    if system == "bm25":
        return make_first_stage("bm25", dataset, BM25Settings(threads=threads))
    if system == "dense":
        return make_first_stage("dense", dataset, BM25Settings(threads=threads, dense=dense))
    fusion = system.split("-", 1)[1]
    return make_first_stage("hybrid", dataset, BM25Settings(threads=threads, dense=dense,
                                                             hybrid=HybridOptions(fusion=fusion)))


def index_bytes(system: str, retriever) -> int:
    """Bytes on disk of what ``retriever`` searches."""
    if system == "bm25":
        return directory_bytes(Path(retriever.path) / "lucene")
    if system == "dense":
        return retriever.index_bytes
    return index_bytes("bm25", retriever.bm25) + index_bytes("dense", retriever.dense)


def measure_dataset(name: str, k: int, threads: int, rounds: int = 1) -> dict:
    """Every system's numbers on dataset ``name``; ms per query is the median of ``rounds`` rounds, each
    timing every system once in turn (so a change of the machine's load hits all systems alike)."""
    dataset = load_dataset(name)
    queries = list(dataset.queries.values())
    metrics = measures_of(dataset)
    result = {"dataset": name, "queries": len(queries), "documents": len(dataset.doc_store()),
              "measures": list(metrics), "load_before": loadavg(), "systems": {}}
    retrievers, rows = {}, {}
    for system in SYSTEMS:
        started = time.perf_counter()
        retrievers[system] = retriever_of(system, dataset, threads)
        rows[system] = {"open_or_build_seconds": round(time.perf_counter() - started, 2)}
        if system == "hybrid-interpolate":
            started = time.perf_counter()
            retrievers[system].tune()
            rows[system]["tuning_seconds"] = round(time.perf_counter() - started, 2)
            rows[system]["weights"] = retrievers[system].tuning
        if system == "dense":
            rows[system]["dense_build_seconds"] = retrievers[system].meta.get("seconds")
        retrievers[system].search(queries[:1], k)  # warm-up: the JVM's JIT, torch's first call
    runs, times = {}, {system: [] for system in SYSTEMS}
    for _ in range(rounds):
        for system in SYSTEMS:
            started = time.perf_counter()
            runs[system] = retrievers[system].search(queries, k)
            times[system].append(1000 * (time.perf_counter() - started) / len(queries))
    per_query = {}
    for system in SYSTEMS:
        evaluation = evaluate(runs[system], dataset.qrels, " ".join(metrics))
        per_query[system] = evaluation.per_query["nDCG@10"]
        ordered = sorted(times[system])
        row = {**{m: round(evaluation.aggregate[m], 4) for m in metrics},
               "ms_per_query": round(ordered[len(ordered) // 2], 2), "ms_per_query_rounds": [round(t, 2) for t in times[system]],
               "index_bytes": index_bytes(system, retrievers[system]), **rows[system]}
        result["systems"][system] = row
        print(f"{name} {system}: {json.dumps(row)}", flush=True)
    judged = sorted({q.query_id for q in dataset.qrels} & set(dataset.queries))
    base = [per_query["bm25"].get(q, 0.0) for q in judged]
    for system in SYSTEMS[1:]:
        other = [per_query[system].get(q, 0.0) for q in judged]
        result["systems"][system]["p_ndcg10_vs_bm25"] = float(f"{paired_test(other, base):.3g}")
    best_single = max(result["systems"]["bm25"][metrics[1]], result["systems"]["dense"][metrics[1]])
    result["goal"] = {
        fusion: {"recall100_at_least_best_single": result["systems"][fusion][metrics[1]] >= best_single,
                 "ndcg10_significantly_above_bm25": (result["systems"][fusion]["nDCG@10"]
                                                     > result["systems"]["bm25"]["nDCG@10"]
                                                     and result["systems"][fusion]["p_ndcg10_vs_bm25"] < 0.05)}
        for fusion in ("hybrid-interpolate", "hybrid-rrf")}
    result["load_after"] = loadavg()
    return result


def markdown(report: dict) -> str:
    """The table of ``report`` (see :func:`main`)."""
    lines = [f"# Dense and hybrid first stages ({report['date']})", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {report['machine']}; one thread; load average per dataset in the JSON file.", "",
             "| dataset | first stage | nDCG@10 | p vs BM25 | R@100 | R@1000 | ms/query | index bytes |",
             "|---|---|---|---|---|---|---|---|"]
    for item in report["datasets"]:
        metrics = item["measures"]
        for system, row in item["systems"].items():
            p = row.get("p_ndcg10_vs_bm25")
            lines.append(f"| {item['dataset']} | {system} | {row['nDCG@10']:.4f} | "
                         f"{'' if p is None else f'{p:.3g}'} | {row[metrics[1]]:.4f} | {row[metrics[2]]:.4f} | "
                         f"{row['ms_per_query']:.1f} | {row['index_bytes']:,} |")
    lines += ["", "Goal (issue 32): hybrid R@100 >= max(BM25, dense) and nDCG@10 significantly above BM25 "
              "(paired t-test, p < 0.05) on at least 3 of Cranfield, Vaswani, NFCorpus, DL19, DL20.", ""]
    for fusion in ("hybrid-interpolate", "hybrid-rrf"):
        met = [item["dataset"] for item in report["datasets"] if all(item["goal"][fusion].values())]
        lines.append(f"- {fusion}: both parts met on {len(met)} of {len(report['datasets'])} "
                     f"({', '.join(met) or 'none'})")
    lines += ["", "Load average (1/5/15 min) before -> after each dataset: " + "; ".join(
        f"{item['dataset']} {item['load_before']} -> {item['load_after']}" for item in report["datasets"])]
    lines += ["", "TREC DL: the collection is the shipped BM25 top-100 pool passages (not MS MARCO); recall at "
              "relevance >= 2. Hybrid weights (BM25's share) per fold are in the JSON file."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume", action="store_true",
                        help="keep the other datasets of an existing OUTPUT.json (measured by an earlier run)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (median; systems alternate)")
    parser.add_argument("--output", default="benchmarks/results/first-stage/dense-hybrid",
                        help="write OUTPUT.json and OUTPUT.md")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}, torch {torch.__version__}",
              "threads": args.threads, "k": args.k, "timing_rounds": args.rounds, "load_start": loadavg(), "datasets": []}
    from pipeline.core.atomic import write_text

    if args.resume and Path(f"{args.output}.json").is_file():  # keep the datasets measured by an earlier run
        earlier = json.loads(Path(f"{args.output}.json").read_text(encoding="utf-8"))
        report["datasets"] = [item for item in earlier["datasets"] if item["dataset"] not in args.datasets]
        report["command"] = f"{earlier['command']}; then {report['command']}"
        report["date"] = f"{earlier['date']} to {report['date']}"
    for name in args.datasets:
        report["datasets"].append(measure_dataset(name, args.k, args.threads, args.rounds))
        report["load_end"] = loadavg()
        write_text(f"{args.output}.json", json.dumps(report, indent=1) + "\n")  # partial results survive
        write_text(f"{args.output}.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
