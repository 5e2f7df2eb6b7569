"""Evaluate TREC runs with ir-measures: aggregates, per-query values, paired significance tests against a
baseline with multiple-testing correction, a Markdown table, a JSON report and a per-query delta figure.

Command line::

    python -m pipeline.evaluate runs/a.run runs/b.run --dataset cranfield --baseline runs/a.run \\
        --metrics "AP nDCG@10 P@30" --output-dir runs/eval

Measures use ir-measures' syntax (``AP nDCG@10 P@30 RR@10 R@1000``, ``AP(rel=2)``). The qrels define the
query set: a judged query that a run does not answer counts 0 (ir-measures' behaviour, like
``trec_eval -c``), so restrict the qrels to the queries you ran (``--split`` does). Significance tests pair
the queries both runs are scored on.
"""
from __future__ import annotations

import sys
from typing import Sequence

from .cli_options import OptionParser
from .core.datasets import load_dataset, select_queries
from .core.errors import PipelineError
from .core.evaluation import DEFAULT_MEASURES, compare, run_name, save_report
from .core.trec import read_qrels, read_run


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); bad options and inputs print ``error: ...`` and
    exit with status 2."""
    parser = OptionParser(prog="python -m pipeline.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="TREC run files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--qrels", help="TREC qrels file")
    source.add_argument("--dataset", help="dataset name whose qrels to use (checks run ids against it)")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives")
    parser.add_argument("--metrics", default=DEFAULT_MEASURES, help=f"ir-measures names (default: {DEFAULT_MEASURES!r})")
    parser.add_argument("--baseline", help="run file (one of the runs) to test the others against")
    parser.add_argument("--test", choices=["ttest", "wilcoxon"], default="ttest")
    parser.add_argument("--correction", choices=["holm", "bonferroni", "none"], default="holm")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--output-dir", help="write <name>.md/.json/.png here")
    parser.add_argument("--name", default="evaluation", help="file stem of the report")
    parser.add_argument("--split", help="with --dataset: evaluate only this split's queries")
    parser.add_argument("--no-check-docs", action="store_true", help="do not check run doc ids against the collection")
    try:
        args = parser.parse_args(argv)
        known_docs = known_queries = None
        if args.dataset:
            dataset = load_dataset(args.dataset, args.mirror)
            if args.split:
                dataset = dataset.subset([q.query_id for q in select_queries(dataset, args.split)])
            qrels = dataset.qrels
            known_queries = dataset.queries
            known_docs = None if args.no_check_docs else dataset.doc_store()
        else:
            qrels = read_qrels(args.qrels)
        runs = {run_name(p): read_run(p, known_docs, known_queries) for p in args.runs}
        if len(runs) != len(args.runs):
            raise PipelineError("two runs share a file name; give them distinct names")
        baseline = run_name(args.baseline) if args.baseline else None
        comparison = compare(runs, qrels, args.metrics, baseline, args.test, args.correction, args.alpha)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comparison.markdown())
    if args.output_dir:
        for kind, path in save_report(comparison, args.output_dir, args.name).items():
            print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
