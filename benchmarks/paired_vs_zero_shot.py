"""A trained re-ranker's combination against the zero-shot bi-encoder's, query by query, from two result files of
``benchmarks/beyond_zero_shot.py measure`` (both keep per-query values of the main metric).

::

    python benchmarks/paired_vs_zero_shot.py \\
        --trained benchmarks/results/dl/2019-bi-encoder-in-batch.json \\
        --zero-shot benchmarks/results/dl/2019-bi-encoder-zero-shot-safe.json \\
        --output benchmarks/results/dl/2019-bi-encoder-in-batch.md

For every row of the trained file (alone, old rule, safe rule) and every seed it holds: the mean of the main
metric, the difference from the zero-shot bi-encoder combined by the safe rule (``bi-encoder+safe``, the same
seed) and the two-sided paired t-test over the test queries both files share. The page also records the command,
the date and the load average when it was written.
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

#: the zero-shot row every trained row is compared with
ZERO_SHOT_ROW = "bi-encoder+safe"


def paired_per_seed(trained_runs: dict, zero_runs: dict) -> tuple[list, list, list]:
    """Per seed both hold (``{seed: {query: value}}``), the two-sided paired t-test's p of trained against
    zero-shot over their common queries and the difference of the means: ``(p-values, differences, seeds)``."""
    from scipy import stats

    pvalues, deltas, seeds = [], [], []
    for seed in sorted(set(zero_runs) & set(trained_runs), key=int):
        common = sorted(set(zero_runs[seed]) & set(trained_runs[seed]))
        a = [trained_runs[seed][q] for q in common]
        b = [zero_runs[seed][q] for q in common]
        pvalues.append(1.0 if a == b else float(f"{stats.ttest_rel(a, b).pvalue:.3g}"))
        deltas.append(round(statistics.mean(a) - statistics.mean(b), 4))
        seeds.append(int(seed))
    return pvalues, deltas, seeds


def replayed_against_two_way(replayed: dict, two_way: dict) -> dict:
    """The fields a replayed rule's row shares with :func:`beyond_zero_shot.three_way_summary`, from per-seed
    per-query values (``{seed: {query: value}}``) of the replayed ranking and of the two-way (zero-shot)
    combination of the same queries: the seeds, both means overall and per seed, the paired two-sided p per seed,
    and the seeds significantly above / below (p < .05)."""
    seeds = sorted(replayed, key=int)
    three = [statistics.mean(replayed[s].values()) for s in seeds]
    two = [statistics.mean(two_way[s].values()) for s in seeds]
    pvalues, _, _ = paired_per_seed({s: replayed[s] for s in seeds}, {s: two_way[s] for s in seeds})
    return {"seeds": [int(s) for s in seeds], "two_way": round(statistics.mean(two), 4),
            "three_way": round(statistics.mean(three), 4),
            "three_way_per_seed": [round(v, 4) for v in three], "two_way_per_seed": [round(v, 4) for v in two],
            "p_three_vs_two": pvalues,
            "significant_gain_seeds": [int(s) for s, a, b, p in zip(seeds, three, two, pvalues) if p < 0.05 and a > b],
            "significant_loss_seeds": [int(s) for s, a, b, p in zip(seeds, three, two, pvalues) if p < 0.05 and a < b]}


def checked_against_run(run_file: str, run: dict, replayed: dict) -> dict:
    """The check of a replay (``{seed: {query: value}}``) against a real ``three_way_combination.py`` run of the
    same rule: per seed the run holds, the largest per-query difference (0: the same values)."""
    return {"file": run_file, "max_abs_difference_per_seed": {
        seed: round(max(abs(value - replayed[seed][q]) for q, value in values.items()), 6)
        for seed, values in run["per_query"]["three_way"].items()}}


def compare(trained: dict, zero_shot: dict, zero_row: str = ZERO_SHOT_ROW) -> list[dict]:
    """One entry per (trained row, seed): mean, difference from the zero-shot row, paired two-sided p-value.

    Args:
        trained: a ``beyond_zero_shot.py measure`` result with ``per_query``.
        zero_shot: the same for the zero-shot bi-encoder.
        zero_row: the zero-shot file's row to compare with.

    Returns:
        Entries ``{"row", "seed", "mean", "zero_shot", "difference", "p", "queries"}``.

    Example:
        >>> run = lambda values: {"per_query": {"runs": {"r": {"1": values}}}}
        >>> compare(run({"a": 1.0, "b": 1.0}), run({"a": 0.5, "b": 0.5}), "r")[0]["difference"]
        0.5
    """
    from scipy import stats

    zero_runs = zero_shot["per_query"]["runs"][zero_row]
    entries = []
    for row, seeds in trained["per_query"]["runs"].items():
        for seed, values in sorted(seeds.items(), key=lambda item: int(item[0])):
            base = zero_runs.get(seed) or zero_runs[sorted(zero_runs, key=int)[0]]
            common = sorted(set(values) & set(base))
            a, b = [values[q] for q in common], [base[q] for q in common]
            p = 1.0 if a == b else float(stats.ttest_rel(a, b).pvalue)
            entries.append({"row": row, "seed": int(seed), "mean": round(statistics.mean(a), 4),
                            "zero_shot": round(statistics.mean(b), 4),
                            "difference": round(statistics.mean(a) - statistics.mean(b), 4),
                            "p": float(f"{p:.3g}"), "queries": len(common)})
    return entries


def render(trained_path: Path, zero_path: Path, entries: list[dict], metric: str, command: str) -> str:
    """The Markdown page of :func:`compare`'s entries."""
    with open("/proc/loadavg") as handle:
        load = " ".join(handle.read().split()[:3])
    trained = json.loads(trained_path.read_text())
    lines = [f"<!-- {command} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load}) -->",
             f"Trained by: `python {trained['command']}` ({trained.get('seconds')} s, load at its end "
             f"{trained.get('loadavg_at_end')}{', ' + trained['partial'] if trained.get('partial') else ''}).",
             f"Zero-shot: `{zero_path}` row `{ZERO_SHOT_ROW}`.", "",
             f"| row | seed | {metric} | zero-shot combined | difference | p (paired, two-sided) | queries |",
             "|---|---|---|---|---|---|---|"]
    for e in entries:
        lines.append(f"| {e['row']} | {e['seed']} | {e['mean']:.4f} | {e['zero_shot']:.4f} | {e['difference']:+.4f} | "
                     f"{e['p']:.3g} | {e['queries']} |")
    first = trained["first_stage"]
    lines += ["", "First stage: " + ", ".join(f"{k} {v:.4f}" for k, v in first.items()) + ".", ""]
    for row, values in trained["results"].items():
        cells = [f"{k} {statistics.mean(v):.4f}" for k, v in values.items() if k != "seeds" and not k.startswith("p:")]
        lines.append(f"- `{row}` (seeds {values['seeds']}): " + ", ".join(cells))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trained", required=True)
    parser.add_argument("--zero-shot", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    from pipeline.core.atomic import atomic_write

    trained_path, zero_path = Path(args.trained), Path(args.zero_shot)
    trained, zero_shot = json.loads(trained_path.read_text()), json.loads(zero_path.read_text())
    entries = compare(trained, zero_shot)
    command = shlex.join(["benchmarks/paired_vs_zero_shot.py", *sys.argv[1:]])
    with atomic_write(Path(args.output)) as handle:
        handle.write(render(trained_path, zero_path, entries, trained["metric"], command))
    for e in entries:
        print(f"{e['row']} seed {e['seed']}: {e['mean']:.4f} vs {e['zero_shot']:.4f} ({e['difference']:+.4f}, p={e['p']:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
