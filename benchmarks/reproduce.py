"""Train and evaluate re-rankers over several seeds and report mean and spread: the effectiveness rows of
BENCHMARKS.md.

    python benchmarks/reproduce.py --dataset microblog --split 2013 --reranker hcan \\
        --variant RM:matching=rm --variant SM:matching=sm --variant HCAN:matching=full \\
        --seeds 1 2 3 --metrics "AP P@30" --set max_examples_per_epoch=12800 \\
        --output benchmarks/results/microblog/2013-<experiment>.md

Each (variant, seed) is one ``pipeline.run`` (trained models are cached under ``models/``, runs written to
``--output-dir``); the table gives the first stage's scores, then mean ± sample standard deviation over
seeds and the per-seed values of each variant. With ``--output``, the table is rewritten after every run,
marked partial until the last one, so a stopped benchmark keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.run import build_parser, run_pipeline  # noqa: E402


def reproduce_parser() -> argparse.ArgumentParser:
    """The command line of this script (also used by ``merge_results.py`` to compare protocols)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split")
    parser.add_argument("--reranker", action="append", required=True,
                        help="re-ranker name (repeatable: several models on the same protocol)")
    parser.add_argument("--variant", action="append", default=[],
                        help="LABEL:name=value,name=value (repeatable); default one variant with no options")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--metrics", help="ir-measures names (default: the dataset's)")
    parser.add_argument("--set", action="append", default=[], help="options for every variant")
    parser.add_argument("--first-stage", default="auto")
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--rerank-depth", type=int, default=0, metavar="D",
                        help="re-rank only the top D of the k candidates (pipeline.run --rerank-depth)")
    parser.add_argument("--interpolate", metavar="auto|W|none",
                        help="how each model meets the first stage (pipeline.run --interpolate; default: the "
                             "dataset's, usually auto: the model alone and combined; 'none': alone only)")
    parser.add_argument("--model", help="re-rank with this checkpoint or pre-trained model instead of training "
                                        "(pipeline.run --model; e.g. --reranker bi-encoder --model all-MiniLM-L6-v2)")
    parser.add_argument("--bf16", action="store_true", help="score in bfloat16 (pipeline.run --bf16)")
    parser.add_argument("--int8", action="store_true", help="score with int8 linear layers (pipeline.run --int8)")
    parser.add_argument("--output-dir", default="runs/reproduce")
    parser.add_argument("--output", help="write the Markdown table here (and .json beside it)")
    return parser


def main() -> None:
    args = reproduce_parser().parse_args()
    from pipeline.core.logs import configure_logging

    configure_logging()  # hours of runs: the project's progress and training lines on stderr, results on stdout

    variants = []
    for spec in args.variant or [":"]:
        label, _, options = spec.partition(":")
        variants.append((label, [o for o in options.split(",") if o]))
    results: dict[str, dict[str, list[float]]] = {}
    baseline: dict[str, float] = {}
    command = shlex.join(sys.argv)  # quoted, so the recorded command can be run (and parsed) again
    started = time.time()
    combined = args.interpolate != "none"  # the dataset's recipe may still say none: rows follow the results
    planned = len(args.reranker) * len(variants) * len(args.seeds) * (2 if combined else 1)
    done = 0
    for reranker in args.reranker:
        for label, options in variants:
            plain = f"{reranker}{'-' + label if label else ''}"
            run_label = f"{plain}+interp" if combined else plain
            for seed in args.seeds:
                argv = ["--dataset", args.dataset, "--reranker", reranker, "--seed", str(seed),
                        *(["--metrics", args.metrics] if args.metrics else []), "--first-stage", args.first_stage, *(["--k", str(args.k)] if args.k else []),
                        "--output-dir", args.output_dir, "--threads", str(args.threads),
                        "--rerank-depth", str(args.rerank_depth),
                        "--name", f"{args.dataset}-{args.split or 'all'}-{run_label}-seed{seed}"]
                if args.split:
                    argv += ["--split", args.split]
                for option in [*args.set, *options]:
                    argv += ["--set", option]
                if args.interpolate:
                    argv += ["--interpolate", args.interpolate]
                if args.model:
                    argv += ["--model", args.model]
                argv += ["--bf16"] * args.bf16 + ["--int8"] * args.int8
                # one call per seed: with --interpolate its table holds the re-ranker alone and interpolated,
                # from one scoring pass (the rows: first stage, [alone,] final)
                result = run_pipeline(build_parser().parse_args(argv))
                evaluations = result.comparison.evaluations
                baseline = evaluations[0].aggregate
                rows = ([(plain, evaluations[1]), (f"{plain}+interp", evaluations[2])] if len(evaluations) == 3
                        else [(plain, evaluations[-1])])
                pvalues = result.comparison.pvalues
                for name, evaluation in rows:
                    results.setdefault(name, {"seeds": []})["seeds"].append(seed)
                    for measure, value in evaluation.aggregate.items():
                        results[name].setdefault(measure, []).append(value)
                        # paired t-test against the first stage, per seed (Holm-corrected over the rows)
                        p = pvalues.get(evaluation.name, {}).get(measure, float("nan"))
                        results[name].setdefault(f"p:{measure}", []).append(p)
                    print(f"{name} seed {seed}: {evaluation.aggregate}", flush=True)
                done += len(rows)
                if args.output:  # after every run, so a stopped benchmark keeps what it measured
                    status = "" if done == planned else f"; partial: {done} of {planned} runs"
                    header = f"{command} ({time.strftime('%Y-%m-%d')}, {time.time() - started:.0f} s{status})"
                    write_outputs(args.output, header, baseline, results, command)
    print(render_table(f"{command} ({time.strftime('%Y-%m-%d')}, {time.time() - started:.0f} s)", baseline, results))


def render_table(header: str, baseline: dict[str, float], results: dict[str, dict[str, list]]) -> str:
    """The Markdown table: first stage, then mean ± sample sd over seeds and per-seed values of each row."""
    measures = list(baseline)
    lines = [f"<!-- {header} -->",
             "| model | " + " | ".join(measures) + " | per seed |", "|---|" + "---|" * (len(measures) + 1)]
    lines.append("| first stage | " + " | ".join(f"{baseline[m]:.4f}" for m in measures) + " | |")
    for name, values in results.items():
        cells = []
        for measure in measures:
            series = values[measure]
            spread = statistics.stdev(series) if len(series) > 1 else 0.0
            cells.append(f"{statistics.mean(series):.4f} ± {spread:.4f}")
        per_seed = "; ".join("/".join(f"{values[m][i]:.4f}" for m in measures) for i in range(len(values["seeds"])))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {per_seed} |")
    return "\n".join(lines)


def write_outputs(output: str, header: str, baseline: dict[str, float], results: dict[str, dict[str, list]],
                  command: str) -> None:
    """Write the table to ``output`` and the raw values to the ``.json`` beside it, each atomically."""
    from pipeline.core.atomic import atomic_write

    with atomic_write(output) as handle:
        handle.write(render_table(header, baseline, results) + "\n")
    with atomic_write(Path(output).with_suffix(".json")) as handle:
        json.dump({"command": command, "first_stage": baseline, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
