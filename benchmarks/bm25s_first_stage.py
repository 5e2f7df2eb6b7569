"""The in-memory BM25 first stage (``--first-stage bm25s``) against the Lucene one (``bm25``), in one process:
queries per second, AP, nDCG@10 and top-10 overlap per collection.

    python benchmarks/bm25s_first_stage.py [--datasets cranfield vaswani nfcorpus] [--repeats 3] [--k 1000]
        [--output benchmarks/results/first-stage/bm25s.md] [--json benchmarks/results/first-stage/bm25s.json]

Both first stages are built with their defaults (``make_first_stage(name, dataset)``: Porter, Lucene's
stopwords, k1 = 0.9, b = 0.4; both search with the first stage's default 2 threads) before anything is
timed; building (Lucene index, bm25s matrix) is reported apart. Then every query of the collection is
searched for its top ``--k`` by Lucene, then by bm25s, alternately ``--repeats`` times after one warm-up of
each, so that a change of load on the shared machine hits both; queries/s are from the medians. AP and
nDCG@10 are over the collection's qrels; top-10 overlap is the mean share of Lucene's top 10 that bm25s
also returns in its top 10 (queries Lucene answers), and beside it the same counting a document Lucene
scores as its 10th (ties at the cut, which Lucene breaks by its internal document order). The load average is recorded with every collection.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TQDM_DISABLE", "1")  # before anything imports tqdm

from indexes import make_first_stage  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402


def top10_overlap(reference: dict, candidate: dict) -> float:
    """Mean share of ``reference``'s top 10 found in ``candidate``'s top 10 (queries ``reference`` answers)."""
    shares = [len({h.doc_id for h in hits[:10]} & {h.doc_id for h in candidate.get(q, [])[:10]}) / len(hits[:10])
              for q, hits in reference.items() if hits]
    return sum(shares) / len(shares) if shares else float("nan")


def top10_overlap_with_ties(reference: dict, candidate: dict, tolerance: float = 1e-4) -> float:
    """:func:`top10_overlap`, where a candidate document also counts when ``reference`` scores it as its 10th
    (within ``tolerance``, relative): on short texts (tweets) many documents tie at the cut, and which of
    them Lucene keeps follows its internal document order, which bm25s cannot know."""
    shares = []
    for q, hits in reference.items():
        if not hits:
            continue
        top, scores = {h.doc_id for h in hits[:10]}, {h.doc_id: h.score for h in hits}
        cut = hits[:10][-1].score
        agree = sum(1 for h in candidate.get(q, [])[:10]
                    if h.doc_id in top or abs(scores.get(h.doc_id, float("-inf")) - cut) <= tolerance * abs(cut))
        shares.append(agree / len(hits[:10]))
    return sum(shares) / len(shares) if shares else float("nan")


def compare(name: str, repeats: int = 3, k: int = 1000) -> dict:
    """One collection's row: build times, queries/s of both, their ratio, AP / nDCG@10 of both, overlap."""
    dataset = load_dataset(name)
    queries = list(dataset.queries.values())
    started = time.perf_counter()
    lucene = make_first_stage("bm25", dataset)
    lucene_build = time.perf_counter() - started
    started = time.perf_counter()
    fast = make_first_stage("bm25s", dataset)
    fast_build = time.perf_counter() - started
    runs = {"bm25": lucene.search(queries, k), "bm25s": fast.search(queries, k)}  # warm-ups (JIT, JVM)
    times = {"bm25": [], "bm25s": []}
    for _ in range(repeats):
        for spec, retriever in (("bm25", lucene), ("bm25s", fast)):
            started = time.perf_counter()
            retriever.search(queries, k)
            times[spec].append(time.perf_counter() - started)
    qps = {spec: len(queries) / statistics.median(values) for spec, values in times.items()}
    effectiveness = {spec: evaluate(run, dataset.qrels, "AP nDCG@10").aggregate for spec, run in runs.items()}
    return {"dataset": name, "queries": len(queries), "k": k,
            "build_s": {"bm25": round(lucene_build, 2), "bm25s": round(fast_build, 2)},
            "qps": qps, "qps_ratio": qps["bm25s"] / qps["bm25"],
            "AP": {spec: e["AP"] for spec, e in effectiveness.items()},
            "nDCG@10": {spec: e["nDCG@10"] for spec, e in effectiveness.items()},
            "AP_diff": effectiveness["bm25s"]["AP"] - effectiveness["bm25"]["AP"],
            "top10_overlap": top10_overlap(runs["bm25"], runs["bm25s"]),
            "top10_overlap_ties": top10_overlap_with_ties(runs["bm25"], runs["bm25s"]), "loadavg": os.getloadavg()[0]}


def table(rows: list[dict]) -> list[str]:
    """Markdown rows of :func:`compare` results."""
    lines = ["| collection | queries | Lucene q/s | bm25s q/s | ratio | AP Lucene | AP bm25s | AP diff | "
             "nDCG@10 Lucene / bm25s | top-10 overlap | with ties at rank 10 | build s Lucene / bm25s (cached after) | load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['queries']} | {r['qps']['bm25']:.1f} | {r['qps']['bm25s']:.1f} | "
                     f"**{r['qps_ratio']:.1f}x** | {r['AP']['bm25']:.4f} | {r['AP']['bm25s']:.4f} | "
                     f"{r['AP_diff']:+.4f} | {r['nDCG@10']['bm25']:.4f} / {r['nDCG@10']['bm25s']:.4f} | "
                     f"{r['top10_overlap']:.4f} | {r['top10_overlap_ties']:.4f} | {r['build_s']['bm25']:.1f} / {r['build_s']['bm25s']:.1f} | "
                     f"{r['loadavg']:.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["cranfield", "vaswani", "nfcorpus"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--output", help="also write the table to this Markdown file")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    machine = f"{platform.machine()}, {os.cpu_count()} cores (shared; load average at start {load})"
    command = "python benchmarks/bm25s_first_stage.py " + " ".join(sys.argv[1:])
    header = [f"# bm25s vs Lucene first stage ({time.strftime('%Y-%m-%d %H:%M')}, {machine})",
              f"Command: `{command}`", "",
              f"Every query's top {args.k}, Lucene and bm25s (2 search threads each, the first stage default) "
              f"alternately, median of {args.repeats} after a warm-up; both built with their defaults before timing.", ""]
    rows = []
    for name in args.datasets:
        rows.append(compare(name, args.repeats, args.k))
        print(table(rows)[-1], flush=True)
    lines = [*header, *table(rows)]
    print("\n".join(lines))
    from pipeline.core.atomic import write_text

    if args.output:
        write_text(args.output, "\n".join(lines) + "\n")
    if args.json:
        write_text(args.json, json.dumps({"command": command, "date": time.strftime("%Y-%m-%d %H:%M"),
                                          "machine": machine, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
