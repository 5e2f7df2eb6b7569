"""End to end: load a dataset, build what is missing, retrieve, re-rank, write the run, evaluate.

Command line::

    python -m pipeline.run --reranker hcan        # Microblog 2014: QL, HCAN alone, HCAN + QL
    python -m pipeline.run --dataset cranfield --reranker none
    python -m pipeline.run --dataset microblog --split 2013 --first-stage shipped --metrics "AP P@30"

Every step is a function a notebook can call one at a time::

    from pipeline import run as p
    dataset = p.load_dataset("cranfield")
    first = p.retrieve(dataset, "bm25", k=100)
    final = p.rerank(None, dataset, first)          # None: keep the first stage's ranking
    path = p.write_run("runs/cranfield-bm25.run", final, tag="bm25")
    print(p.evaluate(final, dataset.qrels, "AP nDCG@10").aggregate)
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from indexes import FIRST_STAGES, BM25Settings, resolve_first_stage
from rerankers import available, reranker_class

from . import fusion
from .core import evaluation
from .core.datasets import load_dataset, select_queries
from .core.errors import PipelineError
from .core.evaluation import evaluate  # noqa: F401  (for notebooks: ``p.evaluate``, see above)
from .core.records import Run
from .core.runtime import seed_everything
from .core.trec import write_run
from .model_cache import obtain_reranker
from .protocols import make_protocol
from .stages import append_tail, head, rerank, retrieve

log = logging.getLogger("pipeline.run")
DEFAULT_OUTPUT_DIR = Path("runs")
#: the dataset of the headline command ``python -m pipeline.run --reranker hcan`` (see README: why Microblog)
DEFAULT_DATASET = "microblog"
#: metrics when neither the command line nor the dataset's recipe names any (the first is the main one)
DEFAULT_METRICS = "AP nDCG@10 P@30 R@{k}"


def main_metric(metrics: str) -> str:
    """The first of an ir-measures metric list: interpolation weights are tuned on it."""
    names = metrics.split()
    if not names:
        raise PipelineError("--metrics is empty")
    return names[0]


def default_run_name(dataset: str, first_stage: str, reranker: str, split: str | None) -> str:
    """``<dataset>[-<split>]-<first stage>[-<reranker>]`` with file-name-safe characters."""
    parts = [dataset, split, first_stage.replace("run:", "run-"), None if reranker == "none" else reranker]
    return re.sub(r"[^A-Za-z0-9.+_-]+", "_", "-".join(p for p in parts if p)).strip("_")


@dataclass
class PipelineResult:
    """What :func:`run_pipeline` produced."""

    run_path: Path
    run: Run
    comparison: evaluation.Comparison | None
    timings: dict[str, float] = field(default_factory=dict)
    #: with ``--interpolate``: the re-ranker's own run (``run`` is the interpolated one); otherwise None
    reranked: Run | None = None


def parse_weight(text: str) -> float:
    """``--interpolate``'s fixed weight: a number in [0, 1]."""
    try:
        weight = float(text)
    except ValueError:
        raise PipelineError(f"--interpolate takes 'auto', 'none' or a weight in [0, 1], got {text!r}") from None
    if not 0.0 <= weight <= 1.0:
        raise PipelineError(f"--interpolate weight must be in [0, 1], got {weight}")
    return weight


def run_pipeline(args: argparse.Namespace) -> PipelineResult:
    """The whole pipeline for parsed command-line arguments (see :func:`build_parser`)."""

    seed_everything(args.seed)
    if args.threads:
        import os

        os.environ["PIPELINE_THREADS"] = str(args.threads)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    dataset = load_dataset(args.dataset, args.mirror)
    reranker_cls = reranker_class(args.reranker)
    int8 = bool(getattr(args, "int8", False))
    if int8 and not hasattr(reranker_cls, "quantize_int8"):
        raise PipelineError("--int8 applies to the transformer re-rankers (cross-encoder, bi-encoder, addax*)")
    folds = None
    model_path = getattr(args, "model", None)
    if model_path and reranker_cls is None:
        raise PipelineError("--model needs --reranker: the name of the re-ranker the checkpoint holds")
    # checked before any work is done
    recipe = dataset.recipe
    interpolation = getattr(args, "interpolate", None) or recipe.interpolate
    interpolation = None if interpolation == "none" or reranker_cls is None else interpolation
    weight = None if interpolation in (None, "auto") else parse_weight(interpolation)
    depth = getattr(args, "rerank_depth", 0) or 0
    if depth < 0:
        raise PipelineError(f"--rerank-depth must be >= 0, got {depth}")
    split = args.split or (recipe.split if reranker_cls is not None else None)
    metrics = args.metrics or recipe.metrics or DEFAULT_METRICS
    if reranker_cls is None or (model_path and interpolation != "auto"):
        # no training and no tuning: every query of the split (a given checkpoint never saw this collection)
        queries = select_queries(dataset, split)
    else:
        # a trained re-ranker only scores queries it was not trained on, and the interpolation weight is tuned
        # on the protocol's dev queries only: the protocol's test queries are the ones evaluated
        folds = make_protocol(dataset, split, args.seed, args.folds)
        tested = {q for fold in folds for q in fold.test}
        queries = [q for qid, q in dataset.queries.items() if qid in tested]
    timings["load"] = time.perf_counter() - started

    settings = BM25Settings(k1=args.k1, b=args.b, fb_terms=args.fb_terms, fb_docs=args.fb_docs,
                            original_query_weight=args.rm3_weight, stemmer=args.stemmer,
                            keep_stopwords=args.keep_stopwords)
    k = args.k or recipe.k or (100 if reranker_cls is not None else 1000)
    args.k = k
    started = time.perf_counter()
    first_stage = resolve_first_stage(args.first_stage, dataset)
    first = retrieve(dataset, first_stage, k, queries, settings)
    timings["first_stage"] = time.perf_counter() - started

    reranker = None
    if model_path:
        started = time.perf_counter()
        reranker = reranker_cls.load(model_path)
        timings["train_or_load"] = time.perf_counter() - started
    elif reranker_cls is not None:
        started = time.perf_counter()
        reranker = obtain_reranker(args.reranker, dataset, args, folds, settings, split)
        timings["train_or_load"] = time.perf_counter() - started
    if int8:
        reranker.quantize_int8()  # before any scoring: the dev queries tuning the interpolation see it too
    depth = 0 if depth >= k else depth
    started = time.perf_counter()
    top = head(first, depth)
    final = rerank(reranker, dataset, top, batch_size=getattr(args, "batch_size", None))
    timings["rerank"] = time.perf_counter() - started

    name = args.name or default_run_name(dataset.name, first_stage, args.reranker, split)
    if int8 and not args.name:
        name += "-int8"  # an int8 run must not overwrite the float run it is compared with
    reranked, reranked_name = None, None
    if reranker is not None and interpolation:
        # the re-ranker alone is reported beside the interpolation: the same scores, no second scoring pass
        reranked, reranked_name = final, f"{name}-alone"
        started = time.perf_counter()
        if interpolation == "auto":
            weight = fusion.fold_weights(folds, reranker, dataset, first_stage, depth or k, settings,
                                         metric=main_metric(metrics))
        final = fusion.interpolate(top, final, weight)
        timings["interpolate"] = time.perf_counter() - started
        if not args.name and interpolation != "auto":
            name += f"-interp{weight:g}"
    elif reranker is not None and not args.name:
        name += "-alone"  # --interpolate none: the re-ranker's own scores are the result
    if reranker is not None and depth:
        final = append_tail(final, first)
        if reranked is not None:
            reranked = append_tail(reranked, first)
        if not args.name:
            name += f"-top{depth}"
            if reranked_name:
                reranked_name += f"-top{depth}"
    output_dir = Path(args.output_dir)
    if reranked is not None:
        write_run(output_dir / f"{reranked_name}.run", reranked, tag=reranked_name[:60])
    run_path = write_run(output_dir / f"{name}.run", final, tag=name[:60])

    comparison = None
    evaluated = dataset.subset([q.query_id for q in queries])
    if evaluated.qrels:
        runs = {name: final}
        baseline = None
        if reranker is not None:
            baseline = default_run_name(dataset.name, first_stage, "none", split)
            runs = {baseline: first, **({reranked_name: reranked} if reranked is not None else {}), name: final}
        comparison = evaluation.compare(runs, evaluated.qrels, metrics.replace("{k}", str(k)), baseline)
        evaluation.save_report(comparison, output_dir, f"{name}.eval")
    return PipelineResult(run_path, final, comparison, timings, reranked)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m pipeline.run`` argument parser."""

    parser = argparse.ArgumentParser(prog="python -m pipeline.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=DEFAULT_DATASET,
                        help=f"dataset name, ir_datasets id or directory (default: {DEFAULT_DATASET}: TREC Microblog, "
                             "HCAN's own data, re-ranking 2014 with models trained on 2011-2013)")
    parser.add_argument("--split", help="run only this split's queries (e.g. test, 2013, raw-test); with a re-ranker, "
                                         "the protocol's test split (default: the dataset's)")
    parser.add_argument("--reranker", default="none", choices=available(), help="re-ranker (default: none)")
    parser.add_argument("--first-stage", default="auto", help=f"one of {', '.join(FIRST_STAGES)} (default: auto)")
    parser.add_argument("--k", type=int, default=0,
                        help="candidates per query from the first stage (default: 1000, or 100 with a re-ranker)")
    parser.add_argument("--rerank-depth", type=int, default=0, metavar="D",
                        help="re-rank only each query's top D candidates; the rest follow in first-stage order "
                             "(default 0: all k)")
    parser.add_argument("--metrics", help="ir-measures names, the first is the main one; {k} is replaced by --k "
                                           f"(default: the dataset's, else {DEFAULT_METRICS!r})")
    parser.add_argument("--output-dir", default=str(DEFAULT_OUTPUT_DIR), help="where runs and reports go (default: runs/)")
    parser.add_argument("--name", help="run name (default: derived from dataset, split, first stage, re-ranker)")
    parser.add_argument("--seed", type=int, default=42, help="random seed (same seed -> same run file)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads for training/scoring (env PIPELINE_THREADS; default: torch's)")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives (env PIPELINE_MIRROR)")
    model = parser.add_argument_group("re-ranker training (when no cached model exists)")
    model.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="model/text/training option, e.g. --set matching=rm --set epochs=5 (repeatable)")
    model.add_argument("--config", help="JSON/YAML file of model options (--set wins)")
    model.add_argument("--folds", type=int, default=5, help="k for k-fold training on datasets without splits")
    model.add_argument("--retrain", action="store_true", help="train even when a cached model exists")
    model.add_argument("--model", metavar="CHECKPOINT",
                       help="re-rank with this saved model (e.g. trained on another dataset) instead of training")
    model.add_argument("--interpolate", metavar="auto|W|none",
                       help="final score = W * first stage + (1 - W) * re-ranker, both min-max normalised per "
                            "query. 'auto' (default, unless the dataset's recipe says otherwise) tunes W on the protocol's dev queries (never the test "
                            "queries) by the main metric; 'none' keeps the re-ranker's own scores. The "
                            "re-ranker alone is written and evaluated beside the combination (same scores)")
    scoring = parser.add_argument_group("re-ranker scoring (changes no trained model and no cache key)")
    scoring.add_argument("--batch-size", type=int, metavar="N",
                         help="scoring batch in (query, document) pairs, filled across queries (default: the "
                              "model's score_batch_size)")
    scoring.add_argument("--int8", action="store_true",
                         help="score with int8 dynamically quantized linear layers (transformer re-rankers, CPU "
                              "only; faster, slightly different scores)")
    lucene = parser.add_argument_group("BM25 / RM3")
    lucene.add_argument("--k1", type=float, default=0.9)
    lucene.add_argument("--b", type=float, default=0.4)
    lucene.add_argument("--fb-terms", type=int, default=10)
    lucene.add_argument("--fb-docs", type=int, default=10)
    lucene.add_argument("--rm3-weight", type=float, default=0.5, help="RM3 original query weight")
    lucene.add_argument("--stemmer", default="porter", choices=["porter", "krovetz", "none"])
    lucene.add_argument("--keep-stopwords", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        result = run_pipeline(args)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"run: {result.run_path}")
    if result.comparison is not None:
        print(result.comparison.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
