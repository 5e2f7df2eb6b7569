"""IASM's PubMed protocol on ``nfcorpus-titles``: rank every test title against all test abstracts.

``pipeline.run`` re-ranks BM25's top 100 over the whole collection, a hard candidate set (every candidate
shares the title's words). The IASM paper instead scores each title against the abstracts of its test
split. This script does that with the re-rankers the reproduce runs trained (same options, same cache
keys: a missing model is trained first), and with BM25 over the test abstracts as the reference:

    python benchmarks/titles_full_ranking.py --reranker drmm --reranker mvlstm --seeds 1 \\
        --set max_examples_per_epoch=6400 --set dev_depth=100 --k 100 --threads 1 \\
        --output benchmarks/results/nfcorpus/titles-full-ranking.md

Each model is scored on every (title, test abstract) pair: P@1 and MRR over the test titles (one relevant
abstract each, so MAP = MRR).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.run import build_parser  # noqa: E402
from pipeline.engine.model_cache import obtain_reranker  # noqa: E402
from pipeline.core.runtime import set_threads
from reproduce import render_table, write_outputs  # noqa: E402  (benchmarks/ is this script's folder)


def ranks_of_own_abstract(scores: np.ndarray) -> np.ndarray:
    """``scores[i, j]``: title i against abstract j, the relevant one on the diagonal. Rank of the diagonal
    entry in its row (1 = best; ties count against it, so a constant scorer gets the worst rank)."""
    own = np.diag(scores)[:, None]
    return (scores > own).sum(axis=1) + (scores == own).sum(axis=1)


def bm25_scores(dataset, test: list[str], threads: int) -> np.ndarray:
    """BM25 (the project's Lucene index) over the test abstracts only."""
    from indexes import BM25Settings, make_first_stage

    store = dataset.doc_store()
    abstracts = [store[q] for q in test]
    small = dataclasses.replace(dataset, name=f"{dataset.name}-test-abstracts", docs_factory=lambda: abstracts,
                                fingerprint=dataset.fingerprint + "-test-abstracts", first_stage=None, _store=None)
    run = make_first_stage("bm25", small, BM25Settings(threads=threads)).search(
        [dataset.queries[q] for q in test], len(test))
    column = {doc_id: j for j, doc_id in enumerate(test)}
    scores = np.full((len(test), len(test)), -np.inf)
    for i, query_id in enumerate(test):
        for hit in run.get(query_id, []):
            scores[i, column[hit.doc_id]] = hit.score
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="nfcorpus-titles")
    parser.add_argument("--split", default="test")
    parser.add_argument("--reranker", action="append", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--set", action="append", default=[], help="model options, as for reproduce.py")
    parser.add_argument("--k", type=int, default=100, help="candidate depth the models were trained with")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    set_threads(args.threads)

    dataset = load_dataset(args.dataset)
    test = sorted(dataset.splits[args.split])
    store = dataset.doc_store()
    abstracts = [store[q] for q in test]
    started = time.time()

    ranks = ranks_of_own_abstract(bm25_scores(dataset, test, args.threads))
    bm25 = {"P@1": float(np.mean(ranks == 1)), "MRR": float(np.mean(1 / ranks))}
    print(f"BM25 over the test abstracts: {bm25}", flush=True)
    results: dict[str, dict[str, list]] = {}
    for name in args.reranker:
        for seed in args.seeds:
            argv = ["--dataset", args.dataset, "--split", args.split, "--reranker", name, "--seed", str(seed),
                    "--k", str(args.k), "--threads", str(args.threads)]
            for option in args.set:
                argv += ["--set", option]
            reranker = obtain_reranker(build_parser().parse_args(argv), dataset)
            scores = np.array([reranker.score(dataset.queries[q], abstracts) for q in test], dtype=np.float64)
            ranks = ranks_of_own_abstract(scores)
            row = results.setdefault(name, {"seeds": [], "P@1": [], "MRR": []})
            row["seeds"].append(seed)
            row["P@1"].append(float(np.mean(ranks == 1)))
            row["MRR"].append(float(np.mean(1 / ranks)))
            print(f"{name} seed {seed}: P@1 {row['P@1'][-1]:.4f} MRR {row['MRR'][-1]:.4f}", flush=True)

    command = shlex.join(sys.argv)  # quoted, so the recorded command can be run (and parsed) again
    # the table's "first stage" row is BM25 over the test abstracts, the reference of this protocol
    header = (f"{command} ({time.strftime('%Y-%m-%d')}, {time.time() - started:.0f} s; {len(test)} titles x "
              f"{len(test)} abstracts; first stage = BM25 over the test abstracts)")
    print(render_table(header, bm25, results))
    if args.output:
        write_outputs(args.output, header, bm25, results, command)


if __name__ == "__main__":
    main()
