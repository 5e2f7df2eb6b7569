"""Evaluation of TREC runs with ir-measures: aggregates, per-query values, paired significance tests against a
baseline with multiple-testing correction, a Markdown table, a JSON report and a per-query delta figure.

Measures use ir-measures' syntax (``AP nDCG@10 P@30 RR@10 R@1000``, ``AP(rel=2)``). The qrels define the
query set: a judged query that a run does not answer counts 0 (ir-measures' behaviour, like
``trec_eval -c``), so restrict the qrels to the queries you ran. Significance tests pair the queries both
runs are scored on. The command line is ``python -m pipeline.evaluate``.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .atomic import atomic_write
from .errors import ConfigError, PipelineError
from .records import Qrel, Run, ScoredDoc
from .trec import natural_key

DEFAULT_MEASURES = "AP nDCG@10 P@10 R@1000"


def parse_measures(spec: str | Sequence) -> list:
    """ir-measures Measure objects from ``"AP nDCG@10"`` (or a list of names / Measure objects)."""
    import ir_measures

    items = spec.split() if isinstance(spec, str) else list(spec)
    measures = []
    for item in items:
        if not isinstance(item, str):
            measures.append(item)
            continue
        try:
            measures.append(ir_measures.parse_measure(item))
        except (ValueError, NameError, SyntaxError) as error:
            raise ConfigError(f"unknown measure {item!r} ({error}); examples: AP nDCG@10 P@30 RR@10 R@1000") from None
    if not measures:
        raise ConfigError("no measures given")
    return measures


@dataclass
class Evaluation:
    """One run's scores: ``aggregate[measure]`` and ``per_query[measure][query_id]``."""

    name: str
    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]


def evaluate(run: Run | Iterable[ScoredDoc], qrels: Iterable[Qrel], measures, name: str = "run") -> Evaluation:
    """Score a run against qrels with ir-measures (aggregate and per query)."""
    import ir_measures

    measures = parse_measures(measures)
    scored = [s for docs in run.values() for s in docs] if isinstance(run, Mapping) else list(run)
    qrels = [ir_measures.Qrel(q.query_id, q.doc_id, int(q.relevance)) for q in qrels]
    runs = [ir_measures.ScoredDoc(s.query_id, s.doc_id, float(s.score)) for s in scored]
    per_query: dict[str, dict[str, float]] = {str(m): {} for m in measures}
    for metric in ir_measures.iter_calc(measures, qrels, runs):
        per_query[str(metric.measure)][metric.query_id] = float(metric.value)
    aggregate = {str(m): float(v) for m, v in ir_measures.calc_aggregate(measures, qrels, runs).items()}
    return Evaluation(name, {str(m): aggregate.get(str(m), float("nan")) for m in measures}, per_query)


def correct_pvalues(pvalues: Sequence[float], method: str = "holm") -> list[float]:
    """Adjust p-values for multiple comparisons: ``holm`` (step-down), ``bonferroni`` or ``none``."""
    n = len(pvalues)
    if method == "none" or n == 0:
        return list(pvalues)
    if method == "bonferroni":
        return [min(1.0, p * n) for p in pvalues]
    if method != "holm":
        raise PipelineError(f"unknown correction {method!r}; expected holm, bonferroni or none")
    order = sorted(range(n), key=lambda i: pvalues[i])
    adjusted = [0.0] * n
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (n - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


@dataclass
class Comparison:
    """Evaluations of several runs, with paired tests of each non-baseline run against the baseline."""

    measures: list[str]
    evaluations: list[Evaluation]
    baseline: str | None = None
    test: str = "ttest"
    correction: str = "holm"
    alpha: float = 0.05
    # pvalues[run_name][measure] (corrected across the compared runs, per measure)
    pvalues: dict[str, dict[str, float]] = field(default_factory=dict)
    paired_queries: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """Everything as plain JSON (aggregates, per-query values, p-values, test settings)."""
        return {
            "measures": self.measures,
            "baseline": self.baseline,
            "test": self.test,
            "correction": self.correction,
            "alpha": self.alpha,
            "runs": {
                e.name: {"aggregate": e.aggregate, "per_query": e.per_query, "pvalues": self.pvalues.get(e.name, {}),
                         "paired_queries": self.paired_queries.get(e.name)}
                for e in self.evaluations
            },
        }

    def markdown(self) -> str:
        """A Markdown table: one row per run, one column per measure; ``*`` marks a significant difference
        from the baseline (corrected p < alpha), with the p-value beside it."""
        header = "| run | " + " | ".join(self.measures) + " |"
        rule = "|---|" + "---|" * len(self.measures)
        rows = [header, rule]
        for evaluation in self.evaluations:
            cells = []
            for measure in self.measures:
                value = evaluation.aggregate.get(measure, float("nan"))
                cell = f"{value:.4f}"
                p = self.pvalues.get(evaluation.name, {}).get(measure)
                if p is not None and not math.isnan(p):
                    cell += f"{'*' if p < self.alpha else ''} (p={p:.3g})"
                cells.append(cell)
            marker = " (baseline)" if evaluation.name == self.baseline else ""
            rows.append(f"| {evaluation.name}{marker} | " + " | ".join(cells) + " |")
        if self.baseline and len(self.evaluations) > 1:
            rows.append("")
            rows.append(f"p: paired {self.test} vs {self.baseline}, {self.correction}-corrected per measure; * p < {self.alpha}")
        return "\n".join(rows)


def paired_test(a: Sequence[float], b: Sequence[float], test: str = "ttest") -> float:
    """Two-sided p-value of a paired test (``ttest`` or ``wilcoxon``); 1.0 when the samples are identical."""
    from scipy import stats

    if len(a) < 2 or all(x == y for x, y in zip(a, b)):
        return 1.0
    if test == "ttest":
        return float(stats.ttest_rel(a, b).pvalue)
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)
    raise PipelineError(f"unknown test {test!r}; expected ttest or wilcoxon")


def compare(
    runs: Mapping[str, Run],
    qrels: Iterable[Qrel],
    measures,
    baseline: str | None = None,
    test: str = "ttest",
    correction: str = "holm",
    alpha: float = 0.05,
) -> Comparison:
    """Evaluate every run and test each against ``baseline`` (a key of ``runs``) on the queries both answer."""
    measures = parse_measures(measures)
    qrels = list(qrels)
    names = [str(m) for m in measures]
    evaluations = [evaluate(run, qrels, measures, name) for name, run in runs.items()]
    comparison = Comparison(names, evaluations, baseline, test, correction, alpha)
    if baseline is None:
        return comparison
    if baseline not in runs:
        raise PipelineError(f"baseline {baseline!r} is not among the evaluated runs {list(runs)}")
    base = next(e for e in evaluations if e.name == baseline)
    others = [e for e in evaluations if e.name != baseline]
    for measure in names:
        raw = []
        for evaluation in others:
            common = sorted(set(base.per_query[measure]) & set(evaluation.per_query[measure]), key=natural_key)
            comparison.paired_queries[evaluation.name] = len(common)
            raw.append(paired_test([evaluation.per_query[measure][q] for q in common],
                                   [base.per_query[measure][q] for q in common], test))
        for evaluation, p in zip(others, correct_pvalues(raw, correction)):
            comparison.pvalues.setdefault(evaluation.name, {})[measure] = p
    return comparison


def delta_figure(comparison: Comparison, path: str | os.PathLike, measure: str | None = None) -> Path:
    """Per-query delta bars (run minus baseline, sorted) for one measure, one panel per compared run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if comparison.baseline is None:
        raise PipelineError("a delta figure needs a baseline run")
    measure = measure or comparison.measures[0]
    base = next(e for e in comparison.evaluations if e.name == comparison.baseline)
    others = [e for e in comparison.evaluations if e.name != comparison.baseline]
    figure, axes = plt.subplots(len(others), 1, figsize=(10, 2.6 * max(1, len(others))), squeeze=False)
    for axis, evaluation in zip(axes[:, 0], others):
        common = set(base.per_query[measure]) & set(evaluation.per_query[measure])
        deltas = sorted((evaluation.per_query[measure][q] - base.per_query[measure][q] for q in common), reverse=True)
        colours = ["tab:green" if d > 0 else "tab:red" for d in deltas]
        axis.bar(range(len(deltas)), deltas, color=colours, width=1.0)
        axis.axhline(0, color="black", linewidth=0.6)
        wins, losses = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
        axis.set_title(f"{evaluation.name} vs {base.name}: {measure} per query ({wins} better, {losses} worse)", fontsize=9)
        axis.set_ylabel(f"delta {measure}")
        axis.set_xticks([])
    figure.tight_layout()
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=110)
    plt.close(figure)
    return path


def save_report(comparison: Comparison, output_dir: str | os.PathLike, stem: str, figure: bool = True) -> dict[str, Path]:
    """Write ``<stem>.md``, ``<stem>.json`` and (with a baseline) ``<stem>.png`` atomically; returns the paths."""
    output_dir = Path(output_dir)
    paths = {"markdown": output_dir / f"{stem}.md", "json": output_dir / f"{stem}.json"}
    with atomic_write(paths["markdown"]) as handle:
        handle.write(comparison.markdown() + "\n")
    with atomic_write(paths["json"]) as handle:
        json.dump(comparison.to_json(), handle, indent=1, sort_keys=True)
    if figure and comparison.baseline and len(comparison.evaluations) > 1:
        paths["figure"] = delta_figure(comparison, output_dir / f"{stem}.png")
    return paths


def run_name(path: str | os.PathLike) -> str:
    """A run's display name: its file name without ``.run``/``.txt``."""
    name = Path(path).name
    for suffix in (".run", ".txt", ".trec"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
