"""End to end: BM25 + ADDAX against learned-code first stages + ADDAX (NFCorpus, Vaswani).

    python benchmarks/code_first_stage_rerank.py [--datasets nfcorpus vaswani-npl] [--steps 100]
        [--reranker addax] [--set max_examples_per_epoch=2000 ...] [--seed 1] [--threads 1]
        [--first-stages bm25 codes colbert] [--rerank-depth D]
        [--output benchmarks/results/codes/first-stage-rerank-<experiment>.md]

Neither collection has training queries, so one re-ranker is trained on NFCorpus's dev queries
(``nfcorpus-dev``, its own document pool): 85% train, 15% early-stopping dev, BM25 top ``--k`` candidates,
the pipeline's training loop and model cache (``models/nfcorpus-dev/``). That single checkpoint then
re-ranks the top ``--k`` of each first stage (``bm25``, ``codes``, ``colbert``) on each dataset: NFCorpus's
test queries (same domain, other queries and pool) and Vaswani (zero-shot). The code indexes are the ones
``benchmarks/code_first_stage.py --steps N`` builds (same encoder options, so they are found in the cache
and built, encoder training included, when missing).

Reported per dataset and first stage: nDCG@10 and R@100 of the first stage alone, nDCG@10 and AP after
re-ranking, the p-value of a paired t-test of the re-ranked nDCG@10 against BM25 + the same re-ranker, and
the re-ranking time. ``--interpolate W|auto`` adds the re-ranker interpolated with the first stage
(:mod:`pipeline.engine.fusion`, as ``pipeline.run --interpolate``): ``auto`` tunes the weight on the re-ranker's own
early-stopping queries (``nfcorpus-dev``'s held-out 15%, BM25 candidates, nDCG@10) and applies that one
weight to every first stage and dataset (the code first stages have no index of the training pool: an
index of it would be built by an encoder trained on those very queries). ``--rerank-depth D`` re-scores only each first stage's top D (the rest keep their
first-stage order below them), which bounds the cost of a transformer on a CPU. The re-ranker keeps its document cache between first stages (documents shared by two
first stages are encoded once), so re-ranking times after the first first stage of a dataset are lower.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--quiet" in sys.argv:  # before anything imports tqdm, which reads TQDM_DISABLE once
    os.environ["TQDM_DISABLE"] = "1"

from code_first_stage import add_code_arguments, code_options, describe_codes  # noqa: E402
from common import add_search_arguments, machine_line, publish, set_all_threads  # noqa: E402
from indexes import BM25Settings, make_first_stage  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate, paired_test  # noqa: E402

TRAIN_DATASET = "nfcorpus-dev"
FIRST_STAGES = ("bm25", "codes", "colbert")
FIRST_MEASURES = "nDCG@10 R@100"
RERANK_MEASURES = "nDCG@10 AP"
TUNING_MEASURE = "nDCG@10"


def training_split(dataset, seed: int) -> tuple[list[str], list[str]]:
    """``(train, dev)`` query ids of ``TRAIN_DATASET``: its judged queries, 15% held out for early stopping."""
    from pipeline.engine.protocols import hold_out

    judged = sorted({q.query_id for q in dataset.qrels} & set(dataset.queries))
    return hold_out(judged, 0.15, seed)


def train_reranker(args):
    """The re-ranker trained on ``TRAIN_DATASET`` (loaded from the model cache when already trained)."""
    from pipeline.engine.protocols import Fold
    from pipeline.engine.model_cache import checkpoint_path, train_fold
    from pipeline.core.options import parse_overrides
    from rerankers import reranker_class

    dataset = load_dataset(TRAIN_DATASET)
    train, dev = training_split(dataset, args.seed)
    fold = Fold(TRAIN_DATASET, train, dev, [])
    options = parse_overrides(args.set, None)
    path = checkpoint_path(dataset, args.reranker, options, fold, args.seed, "bm25", args.k)
    if path.is_file():
        return reranker_class(args.reranker).load(path), f"loaded {path}"
    retriever = make_first_stage("bm25", dataset, BM25Settings(threads=args.threads))
    candidates = retriever.search([dataset.queries[q] for q in train + dev], args.k)
    started = time.perf_counter()
    reranker, _ = train_fold(args.reranker, dataset, fold, candidates, options, args.seed, path)
    return reranker, (f"trained on {TRAIN_DATASET} ({len(train)} train, {len(dev)} dev queries, BM25 top "
                            f"{args.k}) in {time.perf_counter() - started:.0f} s -> {path}")


def tuned_weight(reranker, args) -> tuple[float, str]:
    """The interpolation weight of the best dev nDCG@10 over the re-ranker's early-stopping queries
    (BM25 top ``--k``, top ``--rerank-depth`` re-ranked), and a line describing the choice."""
    from pipeline.engine import fusion
    from pipeline.engine.stages import head, rerank

    dataset = load_dataset(TRAIN_DATASET)
    _, dev = training_split(dataset, args.seed)
    retriever = make_first_stage("bm25", dataset, BM25Settings(threads=args.threads))
    top = head(retriever.search([dataset.queries[q] for q in dev], args.k), args.rerank_depth)
    best, values = fusion.tune_weight(top, rerank(reranker, dataset, top), dataset.qrels, TUNING_MEASURE)
    return best, (f"interpolation weight {best:g} on the first stage, tuned on {len(dev)} {TRAIN_DATASET} dev "
                  f"queries ({TUNING_MEASURE} {values[best]:.4f}; re-ranker alone {values[0.0]:.4f}, BM25 alone "
                  f"{values[1.0]:.4f})")


def first_stage(kind: str, dataset, args):
    """BM25, or the code index ``benchmarks/code_first_stage.py --steps args.steps`` builds for ``kind``."""
    if kind == "bm25":
        return make_first_stage("bm25", dataset, BM25Settings(threads=args.threads))
    from indexes.codes import CodeRetriever, build_code_index

    return CodeRetriever(build_code_index(dataset, code_options(kind, args)), k_prime=args.k_prime,
                         threads=args.threads)


def benchmark(name: str, reranker, args, weight: float | None = None) -> list[str]:
    from pipeline.engine.fusion import interpolate
    from pipeline.engine.stages import append_tail, head, rerank

    dataset = load_dataset(name)
    queries = list(dataset.queries.values())[:args.max_queries or None]
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    rows, scores = [], {}
    for kind in args.first_stages:
        run = first_stage(kind, dataset, args).search(queries, args.k)
        alone = evaluate(run, qrels, FIRST_MEASURES)
        before = alone.aggregate
        started = time.perf_counter()
        top = head(run, args.rerank_depth)
        reranked = rerank(reranker, dataset, top)
        after = evaluate(append_tail(reranked, run) if args.rerank_depth else reranked, qrels, RERANK_MEASURES)
        seconds = time.perf_counter() - started
        scores[kind] = after.per_query["nDCG@10"]
        base = scores.get("bm25")
        pvalue = "-"
        if base is not None and kind != "bm25":
            common = sorted(set(base) & set(scores[kind]))
            pvalue = f"{paired_test([scores[kind][q] for q in common], [base[q] for q in common]):.3f}"
        fused = ""
        if weight is not None:
            mixed = interpolate(top, reranked, weight)
            mixed = evaluate(append_tail(mixed, run) if args.rerank_depth else mixed, qrels, RERANK_MEASURES)
            common = sorted(set(alone.per_query["nDCG@10"]) & set(mixed.per_query["nDCG@10"]))
            gain = paired_test([mixed.per_query["nDCG@10"][q] for q in common],
                               [alone.per_query["nDCG@10"][q] for q in common])
            fused = f" {mixed.aggregate['nDCG@10']:.4f} | {mixed.aggregate['AP']:.4f} | {gain:.3f} |"
        rows.append(f"| {dataset.name} ({len(queries)} q) | {kind} | {before['nDCG@10']:.4f} | {before['R@100']:.4f} "
                    f"| {after.aggregate['nDCG@10']:.4f} | {after.aggregate['AP']:.4f} | {pvalue} | {seconds:.0f} |"
                    + fused)
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    parser.add_argument("--reranker", default="addax", help="re-ranker trained on nfcorpus-dev (default addax)")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE", help="re-ranker option (repeatable)")
    add_code_arguments(parser)
    parser.add_argument("--seed", type=int, default=42)
    add_search_arguments(parser, threads=1)
    parser.add_argument("--k", type=int, default=100, help="candidates per query, training and re-ranking")
    parser.add_argument("--first-stages", nargs="+", default=list(FIRST_STAGES), choices=FIRST_STAGES)
    parser.add_argument("--rerank-depth", type=int, default=0,
                        help="re-rank only the top D of the k (the rest follow in first-stage order; 0: all)")
    parser.add_argument("--interpolate", metavar="W|auto",
                        help="also report the re-ranker interpolated with each first stage: a weight in [0, 1] "
                             "on the first stage, or auto (tuned on the re-ranker's dev queries, BM25, nDCG@10)")
    parser.add_argument("--output", help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    from pipeline.core.runtime import seed_everything

    seed_everything(args.seed)
    set_all_threads(args.threads)
    command = "python benchmarks/code_first_stage_rerank.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    reranker, trained = train_reranker(args)
    print(trained, flush=True)
    weight, weighting = None, ""
    if args.interpolate == "auto":
        weight, weighting = tuned_weight(reranker, args)
    elif args.interpolate is not None:
        from pipeline.run import parse_weight

        weight = parse_weight(args.interpolate)
        weighting = f"interpolation weight {weight:g} on the first stage (fixed)"
    if weighting:
        print(weighting, flush=True)
    fused = " nDCG@10 interpolated | AP interpolated | p vs first stage alone (nDCG@10) |" if weight is not None else ""
    rows = [f"| dataset | first stage | nDCG@10 | R@100 | nDCG@10 + {args.reranker} | AP + {args.reranker} "
            f"| p vs BM25 + {args.reranker} (nDCG@10) | re-ranking s |" + fused,
            "|---|---|---|---|---|---|---|---|" + "---|" * (3 if weight is not None else 0)]
    for name in args.datasets:
        rows += benchmark(name, reranker, args, weight)
    machine = machine_line(args.threads)
    text = "\n".join([
        f"<!-- {command} ({time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:.0f} s) -->",
        f"# First stage + {args.reranker}: BM25 vs learned codes ({machine})",
        f"Re-ranker: {trained}.{f' {weighting[0].upper()}{weighting[1:]}.' if weighting else ''} Top {args.k} per query from each first stage"
        f"{f', the top {args.rerank_depth} re-ranked' if args.rerank_depth else ''} (code indexes: "
        f"{describe_codes(args)}; {args.k_prime} neighbours per query token); paired t-test on the queries of "
        "each dataset.",
        *([f"**Smoke run** (--max-queries {args.max_queries}): the numbers mean nothing."] if args.max_queries else []),
        "", *rows,
    ])
    publish(text, args.output)


if __name__ == "__main__":
    main()
