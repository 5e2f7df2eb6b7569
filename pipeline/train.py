"""Train (and cache) a re-ranker on a dataset's protocol without re-ranking anything.

Command line::

    python -m pipeline.train --dataset microblog --split 2013 --reranker hcan --set matching=rm
    python -m pipeline.train --dataset cranfield --reranker knrm --folds 5 --seed 1
    python -m pipeline.train --dataset nfcorpus-dev --reranker bi-encoder --set amp=true --folds 1   # for --model

Takes the flags of ``pipeline.run`` that decide the models (not ``--rerank-depth --metrics --output-dir
--name --model --interpolate --batch-size --int8 --bf16 --precision``) and trains exactly what ``pipeline.run`` would (the same
:func:`pipeline.engine.model_cache.fold_models`): one model per fold of the protocol (see
:func:`pipeline.engine.protocols.make_protocol`) on candidates from the first stage, each checkpoint saved where
``pipeline.run`` will look for it (same options, seed, first stage and depth give the same cache key). It
prints one line per fold with the dev score. A fold whose checkpoint exists is skipped unless ``--retrain``.
``--folds 1`` on a dataset without splits trains one model on every judged query (15% held out for early
stopping) and tests none: its line ends with the checkpoint's path, for ``pipeline.run --model`` on another
collection (:func:`pipeline.engine.protocols.kfold`).

Under ``torchrun --nproc-per-node N -m pipeline.train ...`` the training is data-parallel
(``DistributedDataParallel``, each rank a share of every global batch; rank 0 evaluates, saves and prints);
the ranks wait for each other up to ``PIPELINE_DIST_TIMEOUT_S`` seconds (default 12 h): docs/distributed.md.
"""
from __future__ import annotations

import sys
from typing import Sequence

from infra import distributed

from .engine.config import RunConfig
from .core.datasets import load_dataset
from .core.runtime import seed_everything, set_threads
from .engine.model_cache import FoldModel, fold_models, training_plan
from .run import KEPT_ON_INTERRUPT, build_parser, parse_config
from .shell import run_command


#: flags of pipeline.run that change the run but not the trained models: pipeline.train does not take them
RUN_ONLY = ("rerank_depth", "metrics", "output_dir", "name", "model", "train_dataset", "interpolate", "zero_shot_base",
            "zero_shot_rule", "batch_size",
           "int8", "bf16", "precision")


def fold_line(model: FoldModel) -> str:
    """The line printed for one fold: the cached checkpoint, or the training's queries, dev score and path."""
    fold = model.fold
    if model.cached is not None:
        return f"{fold.name}: cached {model.cached}"
    best = getattr(model.report, "best_dev_score", None)
    dev = "" if best is None else f", dev {best:.4f} at epoch {model.report.best_epoch}"
    return f"{fold.name}: {len(fold.train)} train / {len(fold.dev)} dev queries{dev} -> {model.path}"


def train(config: RunConfig) -> list[FoldModel]:
    """Train the missing models of ``config``'s protocol (cached ones are not loaded), printing one line per
    fold as it finishes; every option is checked before any retrieval or training."""
    seed_everything(config.seed)
    dataset = load_dataset(config.dataset, config.mirror)
    plan = training_plan(config, dataset)
    set_threads(config.threads)
    models = []
    for model in fold_models(plan, dataset, load_cached=False):
        if distributed.is_main():
            print(fold_line(model), flush=True)
        models.append(model)
    return models


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; takes the flags of ``pipeline.run`` that decide the trained models (not
    those of :data:`RUN_ONLY`: an unknown flag is an error, never silently ignored)."""
    parser = build_parser(prog="python -m pipeline.train", description=__doc__.split("\n\n")[0],
                          exclude=RUN_ONLY)

    def work() -> None:
        train(parse_config(argv, parser))

    # under torchrun: data-parallel training, each rank a share of every batch (infra/distributed.py)
    return run_command(work, KEPT_ON_INTERRUPT, "finished folds and epochs are kept in the model cache",
                       distributed=True)


if __name__ == "__main__":
    sys.exit(main())
