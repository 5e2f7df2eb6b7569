"""Evaluate TREC runs with ir-measures: aggregates, per-query values, paired significance tests against a
baseline with multiple-testing correction, a Markdown table, a JSON report and a per-query delta figure.

Command line::

    python -m pipeline.evaluate runs/a.run runs/b.run --dataset cranfield --baseline runs/a.run \\
        --metrics "AP nDCG@10 P@30" --output-dir runs/eval [--names BM25 KNRM]

Measures use ir-measures' syntax (``AP nDCG@10 P@30 RR@10 R@1000``, ``AP(rel=2)``) or trec_eval's names
(``map P_10 P.10 ndcg_cut_10 recip_rank recall_100 Rprec bpref``); reports show ir-measures' canonical
names. Without ``--metrics``: the dataset's recipe's metrics with ``--dataset``, else the default of
``pipeline.run`` (:data:`~pipeline.core.evaluation.DEFAULT_MEASURES`), ``{k}`` being the deepest ranking of
the runs. The qrels define the query set: a judged query that a run does not answer counts 0 (ir-measures'
behaviour, like ``trec_eval -c``), so restrict the qrels to the queries you ran (``--split`` does).
Significance tests pair the queries both runs are scored on. Runs are labelled by ``--names``, else by
their file names, with parent folders added where two files share a name (``a/x`` and ``b/x``).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from .engine.cli_options import OptionParser
from .core.datasets import load_dataset, select_queries
from .core.errors import ConfigError
from .core.evaluation import DEFAULT_MEASURES, compare, parse_measures, run_labels, run_name, save_report
from .core.records import Run
from .shell import run_command
from .core.formats import read_qrels, read_run

#: depth put for ``{k}`` when no run holds a single document (any value gives the same zeros then)
EMPTY_RUN_DEPTH = 1000


def check_names(names: Sequence[str], paths: Sequence[str]) -> list[str]:
    """``--names``: one distinct, non-empty label per run file, in order (a ConfigError otherwise)."""
    if len(names) != len(paths):
        raise ConfigError(f"--names gives {len(names)} name(s) for {len(paths)} run(s); give one per run, in the same order")
    seen: set[str] = set()
    for name in names:
        if not name.strip():
            raise ConfigError("--names: a name may not be empty")
        if "|" in name or "\n" in name:  # it would break the Markdown table's row
            raise ConfigError(f"--names {name!r}: a name may not hold '|' or a line break")
        if name in seen:
            raise ConfigError(f"--names {name!r} is given twice; each run needs its own name")
        seen.add(name)
    return list(names)


def find_baseline(baseline: str, paths: Sequence[str], labels: Sequence[str]) -> str:
    """The label of the run ``--baseline`` names: one of the run files (as given, or the same file by
    another path), a label, or a bare file name (``x.run`` / ``x``) that only one run has."""
    for path, label in zip(paths, labels):
        if path == baseline:
            return label
    target = os.path.abspath(baseline)
    for path, label in zip(paths, labels):
        if os.path.abspath(path) == target or (os.path.exists(path) and os.path.exists(baseline)
                                               and os.path.samefile(path, baseline)):
            return label
    if baseline in labels:
        return baseline
    if Path(baseline).name == baseline:
        matches = [label for path, label in zip(paths, labels) if run_name(baseline) == run_name(path)]
        if len(matches) == 1:
            return matches[0]
    raise ConfigError(f"--baseline {baseline!r} is not one of the runs; give one of the run files or its label "
                      f"({', '.join(labels)})")


def run_depth(runs: Mapping[str, Run]) -> int:
    """The deepest ranking among the runs (most documents any run returns for one query): ``{k}``."""
    return max((len(docs) for run in runs.values() for docs in run.values()), default=EMPTY_RUN_DEPTH) or EMPTY_RUN_DEPTH


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); bad options and inputs print ``error: ...`` and
    exit with status 2."""
    parser = OptionParser(prog="python -m pipeline.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="TREC run files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--qrels", help="TREC qrels file")
    source.add_argument("--dataset", help="dataset name whose qrels to use (checks run ids against it)")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives")
    parser.add_argument("--metrics", help="measures, ir-measures names (AP nDCG@10 P@30 RR R@1000 AP(rel=2)) or "
                        "trec_eval names (map ndcg_cut_10 P_10 P.10 recip_rank recall_100 Rprec bpref), reported "
                        "under ir-measures' names; {k} is the deepest ranking of the runs (default: the "
                        f"--dataset recipe's metrics, else pipeline.run's default {DEFAULT_MEASURES!r})")
    parser.add_argument("--names", nargs="+", metavar="NAME",
                        help="one label per run, in the order of the runs (default: the file names, with as many "
                             "parent folders as tell apart runs of the same file name)")
    parser.add_argument("--baseline", help="run file (one of the runs) or its label, to test the others against")
    parser.add_argument("--test", choices=["ttest", "wilcoxon"], default="ttest",
                        help="paired significance test of each run against --baseline over the queries both "
                             "are scored on: ttest (Student's paired t-test) or wilcoxon (signed-rank)")
    parser.add_argument("--correction", choices=["holm", "bonferroni", "none"], default="holm",
                        help="multiple-testing correction of each measure's p-values over the runs tested against "
                             "the baseline: holm (Holm-Bonferroni), bonferroni, or none")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance level: a corrected p-value below it marks the difference as "
                             "significant in the table")
    parser.add_argument("--output-dir", help="write <name>.md/.json/.png here (the figure: one panel per measure)")
    parser.add_argument("--name", default="evaluation", help="file stem of the report")
    parser.add_argument("--split", help="with --dataset: evaluate only this split's queries")
    parser.add_argument("--no-check-docs", action="store_true", help="do not check run doc ids against the collection")

    def work() -> None:
        args = parser.parse_args(argv)
        # every option is checked before any data is read
        labels = check_names(args.names, args.runs) if args.names else run_labels(args.runs)
        baseline = find_baseline(args.baseline, args.runs, labels) if args.baseline else None
        if args.metrics is not None:
            parse_measures(args.metrics.replace("{k}", str(EMPTY_RUN_DEPTH)))
        known_docs = known_queries = None
        metrics = args.metrics
        if args.dataset:
            dataset = load_dataset(args.dataset, args.mirror)
            # as pipeline.run does: the recipe's metrics for a built-in dataset, the general default otherwise
            metrics = metrics or dataset.recipe.metrics
            if args.split:
                dataset = dataset.subset([q.query_id for q in select_queries(dataset, args.split)])
            qrels = dataset.qrels
            known_queries = dataset.queries
            known_docs = None if args.no_check_docs else dataset.doc_store()
        else:
            qrels = read_qrels(args.qrels)
        runs = {label: read_run(path, known_docs, known_queries) for label, path in zip(labels, args.runs)}
        metrics = (metrics or DEFAULT_MEASURES).replace("{k}", str(run_depth(runs)))
        comparison = compare(runs, qrels, metrics, baseline, args.test, args.correction, args.alpha)
        comparison.sources = dict(zip(labels, map(str, args.runs)))
        print(comparison.markdown())
        if args.output_dir:
            for kind, path in save_report(comparison, args.output_dir, args.name).items():
                print(f"{kind}: {path}")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
