"""Evaluation of TREC runs with ir-measures: aggregates, per-query values, the comparison of runs against a
baseline (paired tests from :mod:`pipeline.core.significance`), its Markdown table, JSON report and per-query
delta figure.

Measures use ir-measures' syntax (``AP nDCG@10 P@30 RR@10 R@1000``, ``AP(rel=2)``); trec_eval's names are
accepted too (``map P_10 P.10 ndcg_cut_10 recip_rank recall_100 Rprec bpref``,
:func:`pipeline.core.measures.parse_measures`) and reported under ir-measures' canonical names. The qrels define the query set: a judged query that a run does
not answer counts 0 (ir-measures' behaviour, like ``trec_eval -c``), so restrict the qrels to the queries you
ran. Significance tests pair the queries both runs are scored on. The command line is
``python -m pipeline.evaluate``.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .atomic import atomic_write
from .errors import PipelineError
from .formats import natural_key
# the measure names were read here before pipeline.core.measures held them: importable from here as before
from .measures import (  # noqa: F401
    DEFAULT_MEASURES, MEASURE_EXAMPLES, canonical_measures, closest_measure, is_trec_name, known_measure_names,
    malformed_measure, parse_measure_name, parse_measures, read_measure_name, split_measure_name,
)
from .records import Qrel, Run, ScoredDoc
# run naming and the significance tests lived here before their own modules: importable from here as before
from .run_names import run_labels, run_name  # noqa: F401
from .significance import correct_pvalues, paired_test


@dataclass
class Evaluation:
    """One run's scores: ``aggregate[measure]`` and ``per_query[measure][query_id]``."""

    name: str
    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]


def evaluate(run: Run | Iterable[ScoredDoc], qrels: Iterable[Qrel], measures, name: str = "run") -> Evaluation:
    """Score a run against qrels with ir-measures (aggregate and per query).

    Args:
        run: a :data:`~pipeline.core.records.Run` or scored documents.
        qrels: the judgments; they define the query set (a judged query the run lacks counts 0).
        measures: measures in ir-measures' or trec_eval's syntax (a string or a list).
        name: the run's display name.

    Returns:
        The aggregates and per-query values, keyed by canonical measure names.

    Raises:
        ConfigError: a measure name that is not known.

    Example:
        >>> run = {"q1": [ScoredDoc("q1", "d1", 2.0), ScoredDoc("q1", "d2", 1.0)]}
        >>> evaluate(run, [Qrel("q1", "d2", 1)], "RR").aggregate
        {'RR': 0.5}
    """
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
    #: where each run came from (its file), by name, when the caller knows it: names may be labels
    sources: dict[str, str] = field(default_factory=dict)

    def evaluation(self, name: str) -> Evaluation:
        """The evaluation of the run called ``name``.

        Args:
            name: a run's name.

        Returns:
            Its evaluation.

        Raises:
            PipelineError: no run of that name.
        """
        for evaluation in self.evaluations:
            if evaluation.name == name:
                return evaluation
        raise PipelineError(f"no run {name!r} among {[e.name for e in self.evaluations]}")

    def deltas(self, name: str, measure: str) -> dict[str, float]:
        """Per query, run ``name`` minus the baseline on ``measure``.

        Args:
            name: a run's name.
            measure: one of the comparison's measures.

        Returns:
            ``query_id -> delta`` over the queries both are scored on (those the paired test uses), in
            natural query order.

        Raises:
            PipelineError: the comparison has no baseline.
        """
        if self.baseline is None:
            raise PipelineError("per-query deltas need a baseline run")
        base, run = self.evaluation(self.baseline).per_query[measure], self.evaluation(name).per_query[measure]
        return {q: run[q] - base[q] for q in sorted(set(base) & set(run), key=natural_key)}

    def mean_delta(self, name: str, measure: str) -> float:
        """The mean of :meth:`deltas`.

        Args:
            name: a run's name.
            measure: one of the comparison's measures.

        Returns:
            The mean delta (NaN without paired queries).
        """
        deltas = list(self.deltas(name, measure).values())
        return sum(deltas) / len(deltas) if deltas else float("nan")

    def to_json(self) -> dict:
        """Everything as plain JSON.

        Returns:
            Aggregates, per-query values, p-values, mean deltas against the baseline, test settings and each
            run's file when known.
        """
        runs = {}
        for e in self.evaluations:
            entry = {"aggregate": e.aggregate, "per_query": e.per_query, "pvalues": self.pvalues.get(e.name, {}),
                     "paired_queries": self.paired_queries.get(e.name)}
            if self.baseline is not None and e.name != self.baseline:
                entry["mean_delta"] = {m: self.mean_delta(e.name, m) for m in self.measures}
            if e.name in self.sources:
                entry["source"] = self.sources[e.name]
            runs[e.name] = entry
        return {
            "measures": self.measures,
            "baseline": self.baseline,
            "test": self.test,
            "correction": self.correction,
            "alpha": self.alpha,
            "runs": runs,
        }

    def markdown(self) -> str:
        """A Markdown table of the comparison.

        Returns:
            One row per run, one column per measure; ``*`` marks a significant difference from the baseline
            (corrected p < alpha), with the p-value beside it.
        """
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


def compare(
    runs: Mapping[str, Run],
    qrels: Iterable[Qrel],
    measures,
    baseline: str | None = None,
    test: str = "ttest",
    correction: str = "holm",
    alpha: float = 0.05,
) -> Comparison:
    """Evaluate every run and test each against ``baseline`` on the queries both answer.

    Args:
        runs: run name -> run.
        qrels: the judgments.
        measures: measures in ir-measures' or trec_eval's syntax.
        baseline: the key of ``runs`` the others are tested against (``None``: no tests).
        test: ``ttest`` or ``wilcoxon``.
        correction: ``holm``, ``bonferroni`` or ``none`` (across the compared runs, per measure).
        alpha: the significance level the table marks.

    Returns:
        The comparison.

    Raises:
        PipelineError: ``baseline`` is not among ``runs``, or an unknown test or correction.

    Example:
        >>> comparison = compare({"bm25": bm25, "knrm": knrm}, qrels, "AP nDCG@10", baseline="bm25")  # doctest: +SKIP
        >>> print(comparison.markdown())  # doctest: +SKIP
    """
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


def delta_figure_object(comparison: Comparison, measures: str | Sequence[str] | None = None):
    """A matplotlib Figure of per-query deltas against the baseline: one panel per measure (every measure of
    the comparison by default), each query's delta sorted from best to worst for every compared run (green /
    red bars for one run, one coloured line per run for several), titled with each run's mean delta and its
    p-value (corrected, as in the table; ``*`` below alpha) and how many queries it wins and loses.

    Built on :class:`matplotlib.figure.Figure`, not pyplot: no global backend is switched (a notebook keeps
    its own) and nothing needs closing.

    Args:
        comparison: a comparison with a baseline and at least one other run.
        measures: the measures to draw (default: all of the comparison's).

    Returns:
        The figure.

    Raises:
        PipelineError: no baseline, no other run, or a measure not evaluated.
    """
    from matplotlib.figure import Figure

    if comparison.baseline is None:
        raise PipelineError("a delta figure needs a baseline run")
    measures = [measures] if isinstance(measures, str) else list(measures or comparison.measures)
    for measure in measures:
        if measure not in comparison.measures:
            raise PipelineError(f"measure {measure!r} is not among the evaluated ones {comparison.measures}")
    others = [e.name for e in comparison.evaluations if e.name != comparison.baseline]
    if not others:
        raise PipelineError("a delta figure needs a run besides the baseline")
    # each panel: its plot plus one title line per compared run
    panel_height = 2.0 + 0.2 * (len(others) + 1)
    figure = Figure(figsize=(10, panel_height * len(measures)), layout="constrained")
    axes = figure.subplots(len(measures), 1, squeeze=False)[:, 0]
    colours = [f"C{i % 10}" for i in range(len(others))]
    for axis, measure in zip(axes, measures):
        lines = [f"{measure}: per-query delta vs {comparison.baseline}, sorted "
                 f"(p: paired {comparison.test}, {comparison.correction}-corrected)"]
        for name, colour in zip(others, colours):
            deltas = sorted(comparison.deltas(name, measure).values(), reverse=True)
            if len(others) == 1:
                axis.bar(range(len(deltas)), deltas, width=1.0,
                         color=["tab:green" if d > 0 else "tab:red" for d in deltas])
            else:
                axis.step(range(len(deltas)), deltas, where="mid", color=colour, linewidth=1.3, label=name)
            p = comparison.pvalues.get(name, {}).get(measure, float("nan"))
            star = "*" if p < comparison.alpha else ""
            wins, losses = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
            lines.append(f"{name}: mean delta {comparison.mean_delta(name, measure):+.4f}, p={p:.3g}{star} "
                         f"({wins} better, {losses} worse of {len(deltas)})")
        axis.axhline(0, color="black", linewidth=0.6)
        axis.set_title("\n".join(lines), fontsize=8, loc="left")
        axis.set_ylabel(f"delta {measure}")
        axis.set_xticks([])
        if len(others) > 1:
            axis.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("queries, sorted by delta")
    return figure


def delta_figure(comparison: Comparison, path: str | os.PathLike, measures: str | Sequence[str] | None = None) -> Path:
    """Write :func:`delta_figure_object` as a PNG, atomically.

    Args:
        comparison: a comparison with a baseline and at least one other run.
        path: the PNG file.
        measures: the measures to draw (default: all of the comparison's).

    Returns:
        The path written.
    """
    figure = delta_figure_object(comparison, measures)
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=110)
    return path


def save_report(comparison: Comparison, output_dir: str | os.PathLike, stem: str, figure: bool = True) -> dict[str, Path]:
    """Write ``<stem>.md``, ``<stem>.json`` and (with a baseline) ``<stem>.png``, atomically.

    Args:
        comparison: the comparison to report.
        output_dir: the folder to write into.
        stem: the files' name without suffix.
        figure: also write the per-query delta figure (with a baseline and another run).

    Returns:
        ``"markdown"``, ``"json"`` and maybe ``"figure"`` -> the paths written.
    """
    output_dir = Path(output_dir)
    paths = {"markdown": output_dir / f"{stem}.md", "json": output_dir / f"{stem}.json"}
    with atomic_write(paths["markdown"]) as handle:
        handle.write(comparison.markdown() + "\n")
    with atomic_write(paths["json"]) as handle:
        json.dump(comparison.to_json(), handle, indent=1, sort_keys=True)
    if figure and comparison.baseline and len(comparison.evaluations) > 1:
        paths["figure"] = delta_figure(comparison, output_dir / f"{stem}.png")
    return paths


