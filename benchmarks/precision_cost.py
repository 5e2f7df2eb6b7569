"""What scoring in bfloat16 (or int8) costs in effectiveness: the same trained models' runs scored in float32
and in the other arithmetic, compared query by query.

    python benchmarks/precision_cost.py --dataset dl --metric nDCG@10 --label "ADDAX, DL19" \
        --pair FLOAT32_SEED1.run BF16_SEED1.run --pair FLOAT32_SEED2.run BF16_SEED2.run ... \
        [--other bf16] --output benchmarks/results/speed/bf16-cost.md

Each ``--pair`` is one seed's final run (the re-ranker combined with its first stage) in float32 and in the
other arithmetic, both written by ``pipeline.run`` (or ``benchmarks/reproduce.py``) from the same cached
model; the re-ranker's own runs are read beside them (``<name>-alone.run``) when they exist. The row gives
the mean over seeds of each side and the per-seed p-values of a paired t-test over queries (float32 against
the other). With ``--output`` the row is added to that Markdown table (a row with the same label is
replaced) and the values to the ``.json`` beside it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.atomic import write_text  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate, paired_test  # noqa: E402
from pipeline.core.formats import read_run  # noqa: E402

HEADER = ["| model, collection | metric | alone, fp32 | alone, {other} | p per seed | combined, fp32 | "
          "combined, {other} | p per seed |", "|---|---|---|---|---|---|---|---|"]


def alone_path(path: Path) -> Path | None:
    """The re-ranker's own run written beside a combined run, if there is one."""
    candidate = path.with_name(path.name[: -len(".run")] + "-alone.run")
    return candidate if candidate.is_file() else None


def compare_pair(first: Path, second: Path, qrels, metric: str) -> tuple[float, float, float]:
    """``(float32 value, other value, p)`` of two runs of the same queries."""
    runs = [read_run(first), read_run(second)]
    if set(runs[0]) != set(runs[1]):
        raise SystemExit(f"{first} and {second} rank different queries")
    judged = [q for q in qrels if q.query_id in runs[0]]     # the runs' queries only (a split of the dataset)
    evaluations = [evaluate(run, judged, metric) for run in runs]
    per_query = [e.per_query[metric] for e in evaluations]
    queries = sorted(per_query[0])
    p = paired_test([per_query[0][q] for q in queries], [per_query[1][q] for q in queries])
    return evaluations[0].aggregate[metric], evaluations[1].aggregate[metric], p


def row(label: str, metric: str, results: dict) -> str:
    """One Markdown row: means over seeds and per-seed p-values, alone then combined."""
    cells = [label, metric]
    for kind in ("alone", "combined"):
        values = results.get(kind)
        if not values:
            cells += ["", "", ""]
            continue
        for side in (0, 1):
            series = [v[side] for v in values]
            spread = statistics.stdev(series) if len(series) > 1 else 0.0
            cells.append(f"{statistics.mean(series):.4f} ± {spread:.4f}")
        cells.append(" / ".join(f"{v[2]:.2f}" for v in values))
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="the dataset whose qrels judge the runs")
    parser.add_argument("--metric", required=True, help="one ir-measures name, e.g. nDCG@10 or AP")
    parser.add_argument("--label", required=True, help="the row's label, e.g. 'ADDAX, DL19'")
    parser.add_argument("--pair", nargs=2, action="append", required=True, metavar=("FLOAT32_RUN", "OTHER_RUN"),
                        help="one seed's combined runs (repeatable)")
    parser.add_argument("--other", default="bf16", help="the other arithmetic's name (default bf16)")
    parser.add_argument("--output", help="Markdown table to add the row to (and .json beside it)")
    args = parser.parse_args()
    qrels = load_dataset(args.dataset).qrels
    results: dict[str, list] = {"alone": [], "combined": []}
    for first, second in args.pair:
        first, second = Path(first), Path(second)
        results["combined"].append(compare_pair(first, second, qrels, args.metric))
        alone = alone_path(first), alone_path(second)
        if alone[0] and alone[1]:
            results["alone"].append(compare_pair(alone[0], alone[1], qrels, args.metric))
    line = row(args.label, args.metric, results)
    print(line)
    if not args.output:
        return
    output = Path(args.output)
    header = [h.format(other=args.other) for h in HEADER]
    rows = [r for r in (output.read_text().splitlines()[2:] if output.is_file() else [])
            if not r.startswith(f"| {args.label} |")]
    write_text(output, "\n".join(header + rows + [line]) + "\n")
    store = output.with_suffix(".json")
    data = json.loads(store.read_text()) if store.is_file() else {}
    data[args.label] = {"metric": args.metric, "other": args.other, "pairs": args.pair, **results}
    write_text(store, json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
