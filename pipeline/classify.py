"""Pair classification: any re-ranker trained and evaluated as a classifier of labelled (a, b) pairs.

Command line::

    python -m pipeline.classify --dataset wikiqa --reranker knrm --threads 1
    python -m pipeline.classify --dataset trecqa --split raw-test --reranker hcan --seed 1 2 3 \\
        --output benchmarks/results/pairs/trecqa-hcan.json
    python -m pipeline.classify --dataset path/to/pairs --reranker knrm --set epochs=3

The seed papers evaluate their models on sentence-pair tasks too (paraphrase identification, answer
selection as classification), with accuracy and F1. Here the data is the pair format (one folder per split
of line-aligned ``a.toks b.toks id.txt sim.txt``; a label > 0 is the positive class). The model is the one
``python -m pipeline.run`` would use (:func:`pipeline.engine.obtain.obtain_model`: trained on the protocol's
training queries with the dataset's recipe and cached, or ``--model CHECKPOINT``). Its score of every pair of
the protocol's dev queries chooses the decision threshold (the one maximising F1, ties to accuracy; and,
reported beside it, the one maximising accuracy); the test split's pairs are then classified with those
thresholds, never tuned on them. Reported on test: accuracy, precision, recall, F1 and macro-F1 (the mean of
the positive and negative classes' F1, HCAN's measure on TwitterURL) at each threshold, the threshold-free
ROC AUC, and the accuracy of always answering the training pairs' majority class.

Training is exactly ``pipeline.run``'s (same cache keys, so a model trained by either serves both), with
each model's own default loss: pointwise binary cross-entropy (a classifier's loss) for HCAN and the
cross-encoder, the pairwise hinge loss for KNRM and the other ad-hoc baselines, MV-LSTM and ADDAX. No loss is
forced: a global threshold only needs scores that order pairs across questions, and on KNRM ``--set
loss=pointwise`` lowered test AUC (WikiQA .599 against .644 with its hinge loss, TrecQA .568 against .638;
3 seeds, ``benchmarks/results/pairs/*-knrm-pointwise.json``). ``--set loss=...`` and every other training
option work as with ``pipeline.run``; the tuned threshold absorbs the training's 1:``negatives`` class ratio.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .engine.cli_options import OptionParser, add_config_arguments
from .engine.config import RunConfig
from .core.atomic import write_text
from .core.datasets import Dataset, load_dataset
from .core.errors import ConfigError
from .core.runtime import seed_everything, set_threads
from .engine.model_cache import TrainingPlan, training_plan
from .engine.obtain import obtain_model
# the metrics and the pairs have modules of their own; imported from here too (one import path for scripts)
from .engine.pair_data import PairSet, check_pair_data, labelled_pairs, score_pairs  # noqa: F401
from .engine.pair_metrics import (THRESHOLD_METRICS, candidate_thresholds, classification_metrics, confusion,  # noqa: F401
                           markdown, mean_sd, roc_auc, summarise, tune_threshold)
from .engine.protocols import Fold, make_protocol
from .engine.resolve import model_options, run_split
from .shell import run_command

log = logging.getLogger("pipeline.classify")

#: flags of pipeline.run that mean nothing for pair classification: the pairs are the data's own (no first
#: stage, depth or Lucene options), nothing is ranked, interpolated or written as a run, no k-fold protocol
#: (a test split is needed); ``seed`` is replaced by a repeatable ``--seed``, ``dataset`` by a required one
NOT_CLASSIFICATION = ("dataset", "seed", "folds", "first_stage", "k", "rerank_depth", "metrics", "output_dir", "name", "interpolate",
                      "zero_shot_base", "zero_shot_rule", "int8", "bf16", "first_stage_overrides")

#: what an interrupted command keeps, printed with the exit status 130 (Ctrl-C) or 143 (kill)
KEPT_ON_INTERRUPT = ("trained models and finished training epochs are kept in the model cache, no partial result "
                     "file; run the same command to resume")


# ---------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class SeedPlan:
    """What one seed does: its protocol fold, its dev pairs (the threshold's) and the models to load or
    train (``None`` with ``--model``)."""

    seed: int
    fold: Fold
    dev: PairSet
    training: TrainingPlan | None


@dataclass(frozen=True)
class ClassificationPlan:
    """Every decision of a classification run, checked before any training (see :func:`plan_classification`)."""

    config: RunConfig
    #: the re-ranker's class, looked up once for every seed
    reranker_class: type
    seeds: tuple[int, ...]
    test_split: str
    test: PairSet
    majority_class: int
    train_pairs: int
    per_seed: tuple[SeedPlan, ...]


def plan_classification(config: RunConfig, seeds: Sequence[int], dataset: Dataset) -> ClassificationPlan:
    """Settle ``config`` against ``dataset`` for each seed: the protocol (one train / dev / test fold: pair
    classification needs a test split, so datasets without splits are refused), the labelled dev and test
    pairs, the training pairs' majority class, the checked model options. A bad option or input is a
    :class:`ConfigError`; nothing is trained or scored."""
    if not config.reranking:
        raise ConfigError("--reranker: choose the re-ranker to classify pairs with; 'none' has no scores")
    check_pair_data(dataset)
    from rerankers import reranker_class

    cls = reranker_class(config.reranker)
    if config.model:
        if not Path(config.model).is_file():
            raise ConfigError(f"--model {config.model}: no such checkpoint file")
        model_options(config, dataset, cls)  # an unknown --set is a mistake either way
    split = run_split(config, dataset) or ("test" if "test" in dataset.splits else None)
    if split is None:
        raise ConfigError(f"--split: dataset {dataset.name!r} has no test split; name one "
                          f"({', '.join(dataset.splits) or 'it has no splits'})")
    per_seed: list[SeedPlan] = []
    test = None
    train_labels: np.ndarray | None = None
    for seed in seeds:
        folds = make_protocol(dataset, split, seed, config.folds)
        if len(folds) != 1:
            raise ConfigError(f"dataset {dataset.name!r} has no train/test splits (it would be {len(folds)}-fold "
                              "cross-validation): pair classification needs a training split and a test split "
                              "(a folder per split, e.g. train/ dev/ test/)")
        fold = folds[0]
        if not fold.train:
            raise ConfigError(f"dataset {dataset.name!r}: no training queries for test split {split!r}")
        if not fold.dev:
            raise ConfigError(f"dataset {dataset.name!r}: no dev queries to tune the threshold on (add a dev split)")
        dev_split = next((name for name, qids in dataset.splits.items() if sorted(qids) == sorted(fold.dev)), None)
        dev_name = (f"dev split {dev_split!r}" if dev_split else
                    f"dev: {len(fold.dev)} training queries held out (no dev split)")
        dev = labelled_pairs(dataset, fold.dev, dev_name)
        if test is None:
            test = labelled_pairs(dataset, fold.test, f"test split {split!r}")
            train_labels = labelled_pairs(dataset, fold.train, "training split", need_both=False).labels
        training = None
        if not config.model:
            training = training_plan(dataclasses.replace(config, seed=seed), dataset, split, folds, cls=cls)
        per_seed.append(SeedPlan(seed, fold, dev, training))
    assert test is not None and train_labels is not None  # seeds is never empty: the parser's default is [42]
    majority = int(2 * int(train_labels.sum()) > train_labels.size)
    return ClassificationPlan(config, cls, tuple(seeds), split, test, majority, int(train_labels.size), tuple(per_seed))


# ------------------------------------------------------------------------------------------------ running


def classify_seed(plan: ClassificationPlan, seed_plan: SeedPlan, dataset: Dataset) -> dict[str, Any]:
    """One seed: the model (cached, trained now, or ``--model``), its scores of the dev and test pairs, the
    two thresholds tuned on dev and the test metrics at each, and the AUC."""
    started = time.perf_counter()
    config = plan.config
    seed_everything(seed_plan.seed)
    reranker = obtain_model(config.reranker, config.model, training=seed_plan.training, dataset=dataset,
                            cls=plan.reranker_class).reranker
    dev_scores = score_pairs(reranker, dataset, seed_plan.dev, config.batch_size)
    test_scores = score_pairs(reranker, dataset, plan.test, config.batch_size)
    result: dict[str, Any] = {"seed": seed_plan.seed, "dev": seed_plan.dev.describe()}
    for by in ("f1", "accuracy"):
        tuned = tune_threshold(dev_scores, seed_plan.dev.labels, by)
        result[f"{by}_threshold"] = {"threshold": tuned["threshold"], "dev_f1": tuned["f1"],
                                     "dev_accuracy": tuned["accuracy"],
                                     "test": classification_metrics(test_scores, plan.test.labels, tuned["threshold"])}
    result["test_auc"] = roc_auc(test_scores, plan.test.labels)
    result["dev_auc"] = roc_auc(dev_scores, seed_plan.dev.labels)
    result["seconds"] = round(time.perf_counter() - started, 1)
    log.info("seed %d: test F1 %.4f (threshold %.4g tuned on dev), accuracy %.4f, AUC %.4f", seed_plan.seed,
             result["f1_threshold"]["test"]["f1"], result["f1_threshold"]["threshold"],
             result["f1_threshold"]["test"]["accuracy"], result["test_auc"])
    return result


def classify(config: RunConfig, seeds: Sequence[int] = (42,), command: str = "",
             output: Path | None = None) -> dict[str, Any]:
    """The whole experiment: load the dataset, check every option and input (:func:`plan_classification`),
    then per seed get the model and classify (:func:`classify_seed`); returns the report (see
    :func:`markdown`), also written as JSON to ``output`` (atomically) when given."""
    started = time.perf_counter()
    seeds = tuple(dict.fromkeys(seeds))  # a seed given twice is the same model twice
    if not seeds:
        raise ConfigError("--seed: give at least one seed")
    if output is not None:
        check_output(output)
    dataset = load_dataset(config.dataset, config.mirror)
    plan = plan_classification(config, seeds, dataset)
    if config.threads:  # read by the re-rankers when they first score or train, as in pipeline.run
        os.environ["PIPELINE_THREADS"] = str(config.threads)
    set_threads(config.threads)
    per_seed = [classify_seed(plan, seed_plan, dataset) for seed_plan in plan.per_seed]
    majority_scores = np.full(plan.test.labels.shape, float(plan.majority_class))
    report: dict[str, Any] = {
        "command": command,
        "dataset": dataset.name,
        "reranker": config.reranker,
        "model": config.model,
        "options": list(config.overrides),
        "config_file": config.config_file,
        "seeds": list(seeds),
        "test_split": plan.test_split,
        "test": plan.test.describe(),
        "dev": per_seed[0]["dev"],
        "train_pairs": plan.train_pairs,
        # always the training pairs' majority class: scores 1.0 (positive) or 0.0 against threshold 0.5
        "majority": {"class": plan.majority_class,
                     "test": classification_metrics(majority_scores, plan.test.labels, 0.5)},
        "per_seed": per_seed,
        "summary": summarise(per_seed),
    }
    report["markdown"] = markdown(report)
    report["seconds"] = round(time.perf_counter() - started, 1)
    if output is not None:
        write_text(output, json.dumps(report, indent=2) + "\n")
    return report


def check_output(path: Path) -> None:
    """A :class:`ConfigError` now, before any training, when ``--output`` cannot be written."""
    if path.is_dir():
        raise ConfigError(f"--output {path}: is a directory; give a file name such as result.json")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--output {path}: cannot create its folder ({error.strerror or error})") from None
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"--output {path}: its folder is not writable")


# ------------------------------------------------------------------------------------------- command line


def build_parser() -> OptionParser:
    """The ``python -m pipeline.classify`` parser: the flags of ``pipeline.run`` that decide the model
    (``--split --reranker --set --config --model --retrain --threads --batch-size --mirror``), a required
    ``--dataset``, a repeatable ``--seed`` and ``--output``."""
    parser = OptionParser(prog="python -m pipeline.classify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True,
                        help="pair data: a built-in name (wikiqa, trecqa) or a directory of pair-format folders "
                             "(a.toks b.toks id.txt sim.txt), one per split (train, dev, test ...)")
    add_config_arguments(parser, RunConfig, exclude=NOT_CLASSIFICATION)
    parser.add_argument("--seed", dest="seeds", type=int, nargs="+", action="extend", default=None, metavar="SEED",
                        help="random seed(s) of training; several give mean ± sd (repeatable; default: 42)")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE.json",
                        help="write the numbers and the command line to this JSON file (atomically)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: prints the Markdown table; a bad option or input prints one ``error: ...``
    line and exits with status 2, before any training."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def work() -> None:
        arguments = build_parser().parse_args(argv)
        config = RunConfig.from_namespace(arguments)
        command = shlex.join(["python", "-m", "pipeline.classify", *argv])
        report = classify(config, arguments.seeds or [42], command, arguments.output)
        print(report["markdown"])
        if arguments.output is not None:
            print(f"\nwritten: {arguments.output}")

    # the result file is written atomically: whole or absent
    return run_command(work, KEPT_ON_INTERRUPT)


if __name__ == "__main__":
    sys.exit(main())
