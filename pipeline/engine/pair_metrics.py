"""What pair classification measures and reports: confusion counts, accuracy / precision / recall / F1 /
macro-F1 at a threshold, the threshold tuned on dev pairs, ROC AUC, their mean and sd over seeds, and the
Markdown table of ``python -m pipeline.classify`` (:mod:`pipeline.classify`)."""
from __future__ import annotations

import statistics
from typing import Any, Sequence

import numpy as np

from ..core.errors import PipelineError

#: the metrics of each thresholded row, in the table's order
THRESHOLD_METRICS = ("accuracy", "precision", "recall", "f1", "macro_f1")


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


# --------------------------------------------------------------------------------- over seeds, as a table


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
