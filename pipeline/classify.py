"""Pair classification: any re-ranker trained and evaluated as a classifier of labelled (a, b) pairs.

Command line::

    python -m pipeline.classify --dataset wikiqa --reranker knrm --threads 1
    python -m pipeline.classify --dataset trecqa --split raw-test --reranker hcan --seed 1 2 3 \\
        --output benchmarks/results/pairs/trecqa-hcan.json
    python -m pipeline.classify --dataset path/to/pairs --reranker knrm --set epochs=3

The seed papers evaluate their models on sentence-pair tasks too (paraphrase identification, answer
selection as classification), with accuracy and F1. Here the data is the pair format (one folder per split
of line-aligned ``a.toks b.toks id.txt sim.txt``; a label > 0 is the positive class). The model is the one
``python -m pipeline.run`` would use (:func:`pipeline.model_cache.obtain_reranker`: trained on the protocol's
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
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .cli_options import OptionParser, add_config_arguments
from .config import RunConfig
from .core.atomic import write_text
from .core.datasets import Dataset, load_dataset
from .core.errors import ConfigError, PipelineError
from .core.interrupts import exit_cleanly
from .core.logs import configure_logging
from .core.records import Run, ScoredDoc
from .core.runtime import keep_freed_memory, seed_everything, set_threads
from .model_cache import TrainingPlan, trained_reranker, training_plan
from .protocols import Fold, make_protocol
from .resolve import model_options, run_split
from .stages import rerank

log = logging.getLogger("pipeline.classify")

#: flags of pipeline.run that mean nothing for pair classification: the pairs are the data's own (no first
#: stage, depth or Lucene options), nothing is ranked, interpolated or written as a run, no k-fold protocol
#: (a test split is needed); ``seed`` is replaced by a repeatable ``--seed``, ``dataset`` by a required one
NOT_CLASSIFICATION = ("dataset", "seed", "folds", "first_stage", "k", "rerank_depth", "metrics", "output_dir", "name", "interpolate",
                      "int8", "bf16", "k1", "b", "fb_terms", "fb_docs", "rm3_weight", "stemmer", "keep_stopwords",
                      "code_overrides")

#: what an interrupted command keeps, printed with the exit status 130 (Ctrl-C) or 143 (kill)
KEPT_ON_INTERRUPT = ("trained models and finished training epochs are kept in the model cache, no partial result "
                     "file; run the same command to resume")

#: the metrics of each thresholded row, in the table's order
THRESHOLD_METRICS = ("accuracy", "precision", "recall", "f1", "macro_f1")


# ------------------------------------------------------------------------------------------- the metrics


def confusion(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[int, int, int, int]:
    """``(tp, fp, tn, fn)`` when a pair is called positive iff its score is above ``threshold``."""
    predicted = np.asarray(scores, dtype=np.float64) > threshold
    truth = np.asarray(labels) > 0
    tp = int(np.sum(predicted & truth))
    fp = int(np.sum(predicted & ~truth))
    fn = int(np.sum(~predicted & truth))
    tn = int(np.sum(~predicted & ~truth))
    return tp, fp, tn, fn


def _f1(tp: int | np.ndarray, fp: int | np.ndarray, fn: int | np.ndarray):
    """F1 = 2 tp / (2 tp + fp + fn); 0 when the class is neither predicted nor present (no division by 0)."""
    denominator = 2 * np.asarray(tp) + fp + fn
    return np.where(denominator > 0, 2 * np.asarray(tp) / np.maximum(denominator, 1), 0.0)


def classification_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    """Accuracy, precision, recall, F1 (positive class: label > 0) and macro-F1 (the mean of the positive
    and the negative class's F1) of calling a pair positive iff its score is above ``threshold``. Precision
    is 0 when nothing is called positive (as scikit-learn's ``zero_division=0``)."""
    tp, fp, tn, fn = confusion(scores, labels, threshold)
    total = tp + fp + tn + fn
    if total == 0:
        raise PipelineError("no pairs to classify")
    f1 = float(_f1(tp, fp, fn))
    return {"accuracy": (tp + tn) / total, "precision": tp / (tp + fp) if tp + fp else 0.0,
            "recall": tp / (tp + fn) if tp + fn else 0.0, "f1": f1,
            "macro_f1": (f1 + float(_f1(tn, fn, fp))) / 2, "tp": tp, "fp": fp, "tn": tn, "fn": fn}


def candidate_thresholds(scores: np.ndarray) -> np.ndarray:
    """Every distinct way a threshold can split ``scores``: the highest score (nothing above it: all
    negative), the midpoints between consecutive distinct scores, and one below the lowest (all positive)."""
    distinct = np.unique(np.asarray(scores, dtype=np.float64))[::-1]
    if distinct.size == 0:
        raise PipelineError("no scores to choose a threshold from")
    midpoints = (distinct[:-1] + distinct[1:]) / 2
    return np.concatenate([distinct[:1], midpoints, distinct[-1:] - 1.0])


def tune_threshold(scores: np.ndarray, labels: np.ndarray, by: str = "f1") -> dict[str, float]:
    """The threshold maximising ``by`` (``f1``: ties go to the higher accuracy; ``accuracy``: ties go to the
    higher F1) over :func:`candidate_thresholds` of ``scores`` with their ``labels``; remaining ties go to
    the highest threshold (the fewest positive calls). Returns ``{"threshold", "f1", "accuracy"}`` measured
    on these pairs. One sweep over the sorted scores, so dev sets of any size cost a sort."""
    if by not in ("f1", "accuracy"):
        raise ValueError(f"by must be 'f1' or 'accuracy', got {by!r}")
    scores = np.asarray(scores, dtype=np.float64)
    truth = (np.asarray(labels) > 0).astype(np.int64)
    if scores.shape != truth.shape:
        raise PipelineError(f"{scores.size} scores for {truth.size} labels")
    thresholds = candidate_thresholds(scores)
    # positives called at each candidate: every pair scoring above it (candidates descend, so counts ascend)
    order = np.sort(scores)
    called = scores.size - np.searchsorted(order, thresholds, side="right")
    ranked_truth = truth[np.argsort(-scores, kind="stable")]
    tp = np.concatenate([[0], np.cumsum(ranked_truth)])[called]
    fp = called - tp
    positives = int(truth.sum())
    fn = positives - tp
    tn = (scores.size - positives) - fp
    f1 = _f1(tp, fp, fn)
    accuracy = (tp + tn) / scores.size
    primary, secondary = (f1, accuracy) if by == "f1" else (accuracy, f1)
    # lexsort sorts by its last key first: the best primary, then secondary, then the highest threshold
    best = np.lexsort((-thresholds, -secondary, -primary))[0]
    return {"threshold": float(thresholds[best]), "f1": float(f1[best]), "accuracy": float(accuracy[best])}


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """The area under the ROC curve: the probability that a random positive pair scores above a random
    negative one, ties counting one half (Mann-Whitney). ``None`` when a class is absent."""
    scores = np.asarray(scores, dtype=np.float64)
    truth = np.asarray(labels) > 0
    positive, negative = scores[truth], np.sort(scores[~truth])
    if positive.size == 0 or negative.size == 0:
        return None
    below = np.searchsorted(negative, positive, side="left")
    tied = np.searchsorted(negative, positive, side="right") - below
    return float((below.sum() + 0.5 * tied.sum()) / (positive.size * negative.size))


# ---------------------------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class PairSet:
    """The labelled pairs of some queries: ``pairs[i]`` is ``(query_id, doc_id)`` with label ``labels[i]``
    (1 when the data's label is > 0, else 0), in the data's order."""

    name: str
    pairs: tuple[tuple[str, str], ...]
    labels: np.ndarray

    @property
    def positives(self) -> int:
        """How many pairs are positive."""
        return int(self.labels.sum())

    def describe(self) -> dict[str, Any]:
        """Its name, size and positives (for the report)."""
        return {"name": self.name, "pairs": len(self.pairs), "positives": self.positives}


def check_pair_data(dataset: Dataset) -> None:
    """A :class:`ConfigError` unless ``dataset`` comes with its pairs (the candidate lists of pair-format
    folders): a TREC-format collection has queries and documents but no pairs to classify."""
    if not dataset.first_stage:
        raise ConfigError(f"--dataset {dataset.name!r} is not pair data: pair classification needs pair-format "
                          "folders (a.toks b.toks id.txt sim.txt, one per split) or a built-in pair dataset "
                          "(wikiqa, trecqa)")


def labelled_pairs(dataset: Dataset, query_ids: Sequence[str], name: str, need_both: bool = True) -> PairSet:
    """Every pair of ``query_ids`` in the pair data (the dataset's shipped candidate lists) with its label.

    A pair without a label, queries without pairs, or (with ``need_both``) a set without a positive or
    without a negative pair is a :class:`ConfigError` naming the set: thresholds, F1 and AUC need both."""
    check_pair_data(dataset)
    qrels = dataset.qrels_dict()
    pairs: list[tuple[str, str]] = []
    labels: list[int] = []
    unlabelled: list[tuple[str, str]] = []
    if dataset.pairs is not None:  # every line of pair files, a pair listed twice included with its own label
        by_query: dict[str, list[tuple[str, str, int]]] = {}
        for line in dataset.pairs:
            by_query.setdefault(line[0], []).append(line)
        lines = [line for query_id in query_ids for line in by_query.get(query_id, [])]
        pairs = [(query_id, doc_id) for query_id, doc_id, _ in lines]
        labels = [int(label > 0) for _, _, label in lines]
    for query_id in (query_ids if dataset.pairs is None else ()):
        for hit in dataset.first_stage.get(query_id, []):
            label = qrels.get(query_id, {}).get(hit.doc_id)
            if label is None:
                unlabelled.append((query_id, hit.doc_id))
                continue
            pairs.append((query_id, hit.doc_id))
            labels.append(int(label > 0))
    if unlabelled:
        query_id, doc_id = unlabelled[0]
        raise ConfigError(f"{name}: {len(unlabelled)} pairs have no label (e.g. query {query_id!r}, doc {doc_id!r}); "
                          "pair classification needs a label for every pair (sim.txt, or qrels covering every pair)")
    if not pairs:
        raise ConfigError(f"{name}: no pairs (its {len(query_ids)} queries have no candidates in the pair data)")
    result = PairSet(name, tuple(pairs), np.asarray(labels, dtype=np.int64))
    if need_both and result.positives in (0, len(pairs)):
        missing = "positive (label > 0)" if result.positives == 0 else "negative (label 0)"
        raise ConfigError(f"{name}: {len(pairs)} pairs without a single {missing} one; a threshold, F1 and AUC "
                          "need both classes")
    return result


def score_pairs(reranker, dataset: Dataset, pairs: PairSet, batch_size: int | None = None) -> np.ndarray:
    """The re-ranker's score of every pair of ``pairs``, in its order (batched across queries as
    :func:`pipeline.stages.rerank` batches them; non-finite scores are refused there)."""
    run: Run = {}
    for query_id, doc_id in pairs.pairs:
        run.setdefault(query_id, []).append(ScoredDoc(query_id, doc_id, 0.0))
    scored = rerank(reranker, dataset, run, batch_size=batch_size)
    by_pair = {(hit.query_id, hit.doc_id): hit.score for hits in scored.values() for hit in hits}
    return np.asarray([by_pair[pair] for pair in pairs.pairs], dtype=np.float64)


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
    if config.model:
        if not Path(config.model).is_file():
            raise ConfigError(f"--model {config.model}: no such checkpoint file")
        from rerankers import reranker_class

        model_options(config, dataset, reranker_class(config.reranker))  # an unknown --set is a mistake either way
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
            training = training_plan(dataclasses.replace(config, seed=seed), dataset, split, folds)
        per_seed.append(SeedPlan(seed, fold, dev, training))
    assert test is not None and train_labels is not None  # seeds is never empty: the parser's default is [42]
    majority = int(2 * int(train_labels.sum()) > train_labels.size)
    return ClassificationPlan(config, tuple(seeds), split, test, majority, int(train_labels.size), tuple(per_seed))


# ------------------------------------------------------------------------------------------------ running


def classify_seed(plan: ClassificationPlan, seed_plan: SeedPlan, dataset: Dataset) -> dict[str, Any]:
    """One seed: the model (cached, trained now, or ``--model``), its scores of the dev and test pairs, the
    two thresholds tuned on dev and the test metrics at each, and the AUC."""
    started = time.perf_counter()
    config = plan.config
    seed_everything(seed_plan.seed)
    if config.model:
        from rerankers import reranker_class

        reranker = reranker_class(config.reranker).load(config.model)
    else:
        reranker = trained_reranker(seed_plan.training, dataset)
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


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for one value), as the other benchmark reports give them."""
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0}


def summarise(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sd over seeds of every test metric at both thresholds, of the thresholds and of the AUC."""
    summary: dict[str, Any] = {}
    for by in ("f1", "accuracy"):
        row = {name: mean_sd([r[f"{by}_threshold"]["test"][name] for r in per_seed]) for name in THRESHOLD_METRICS}
        row["threshold"] = mean_sd([r[f"{by}_threshold"]["threshold"] for r in per_seed])
        summary[f"{by}_threshold"] = row
    summary["auc"] = mean_sd([r["test_auc"] for r in per_seed])
    return summary


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table: the majority-class baseline, then the re-ranker at the F1-tuned and
    at the accuracy-tuned threshold (mean ± sd over seeds; thresholds tuned on dev, metrics on test)."""
    test = report["test"]
    seeds = report["seeds"]
    lines = [f"{report['dataset']} {test['name']} ({test['pairs']} pairs, {test['positives']} positive), "
             f"{report['reranker']}, {len(seeds)} seed{'s' if len(seeds) > 1 else ''} "
             f"({', '.join(map(str, seeds))}); thresholds tuned on {report['dev']['name']}",
             "", "| classifier | accuracy | precision | recall | F1 | macro-F1 | AUC |", "|---|---|---|---|---|---|---|"]

    def cell(value: dict[str, float] | None) -> str:
        if value is None:
            return "—"
        return f"{value['mean']:.4f}" + (f" ± {value['sd']:.4f}" if len(seeds) > 1 else "")

    baseline = report["majority"]
    lines.append(f"| majority class ({'positive' if baseline['class'] else 'negative'}, of the training pairs) | "
                 f"{baseline['test']['accuracy']:.4f} | {baseline['test']['precision']:.4f} | "
                 f"{baseline['test']['recall']:.4f} | {baseline['test']['f1']:.4f} | "
                 f"{baseline['test']['macro_f1']:.4f} | 0.5000 |")
    summary = report["summary"]
    for by, label in (("f1", "F1"), ("accuracy", "accuracy")):
        row = summary[f"{by}_threshold"]
        lines.append(f"| {report['reranker']}, threshold maximising dev {label} ({cell(row['threshold'])}) | "
                     + " | ".join(cell(row[name]) for name in THRESHOLD_METRICS) + f" | {cell(summary['auc'])} |")
    return "\n".join(lines)


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
    configure_logging()
    keep_freed_memory()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with exit_cleanly(KEPT_ON_INTERRUPT):
            arguments = build_parser().parse_args(argv)
            config = RunConfig.from_namespace(arguments)
            command = shlex.join(["python", "-m", "pipeline.classify", *argv])
            report = classify(config, arguments.seeds or [42], command, arguments.output)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled up or went away: the result file is whole or absent
        where = f" {error.filename}" if error.filename else ""
        print(f"error: cannot write{where}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(report["markdown"])
    if arguments.output is not None:
        print(f"\nwritten: {arguments.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
