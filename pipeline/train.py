"""Train (and cache) a re-ranker on a dataset's protocol without re-ranking anything.

Command line::

    python -m pipeline.train --dataset microblog --split 2013 --reranker hcan --set matching=rm
    python -m pipeline.train --dataset cranfield --reranker knrm --folds 5 --seed 1

Trains one model per fold of the protocol (see :func:`pipeline.protocols.make_protocol`) on candidates
from the first stage, saves each checkpoint where ``pipeline.run`` will look for it (same options, seed,
first stage and depth give the same cache key), and prints one line per fold with the dev score. A fold
whose checkpoint exists is skipped unless ``--retrain``.
"""
from __future__ import annotations

import logging
import sys
from typing import Sequence

from indexes import BM25Settings, make_first_stage, resolve_first_stage
from rerankers import reranker_class

from .core.datasets import load_dataset
from .core.errors import PipelineError
from .core.options import parse_overrides
from .core.runtime import seed_everything, set_threads
from .model_cache import cached_checkpoint, checkpoint_path, train_fold
from .protocols import make_protocol
from .run import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; takes the training-related flags of ``pipeline.run``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    parser.prog = "python -m pipeline.train"
    parser.description = __doc__.split("\n\n")[0]
    args = parser.parse_args(argv)
    try:
        if reranker_class(args.reranker) is None:
            raise PipelineError("choose a re-ranker to train (--reranker); 'none' has nothing to train")
        seed_everything(args.seed)
        set_threads(args.threads)
        dataset = load_dataset(args.dataset, args.mirror)
        recipe = dataset.recipe
        folds = make_protocol(dataset, args.split or recipe.split, args.seed, args.folds)
        options = {**recipe.train, **parse_overrides(args.set, args.config)}
        first_stage = resolve_first_stage(args.first_stage, dataset)
        k = args.k or recipe.k or 100
        settings = BM25Settings(k1=args.k1, b=args.b, fb_terms=args.fb_terms, fb_docs=args.fb_docs,
                                original_query_weight=args.rm3_weight, stemmer=args.stemmer,
                                keep_stopwords=args.keep_stopwords)
        candidates = None
        for fold in folds:
            path = checkpoint_path(dataset, args.reranker, options, fold, args.seed, first_stage, k)
            cached = None if args.retrain else cached_checkpoint(path)
            if cached is not None:
                print(f"{fold.name}: cached {cached}")
                continue
            if candidates is None:
                wanted = sorted({q for f in folds for q in f.train + f.dev})
                retriever = make_first_stage(first_stage, dataset, settings)
                candidates = retriever.search([dataset.queries[q] for q in wanted], k)
            _, report = train_fold(args.reranker, dataset, fold, candidates, options, args.seed, path)
            dev = "" if report.best_dev_score is None else f", dev {report.best_dev_score:.4f} at epoch {report.best_epoch}"
            print(f"{fold.name}: {len(fold.train)} train / {len(fold.dev)} dev queries{dev} -> {path}")
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
