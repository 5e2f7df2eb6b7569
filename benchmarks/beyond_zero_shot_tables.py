"""The Markdown tables ``benchmarks/beyond_zero_shot.py build`` writes from ``beyond-zero-shot.json``: the old-vs-safe
table (block ``safe-combination`` of docs/recommendations.md and BENCHMARKS.md), the three-way table and the table
of issue 36 item 3 (blocks ``three-way`` and ``versus-zero-shot`` of BENCHMARKS.md). The tests compare each block
with what these functions render from the kept summary.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from safe_rule_replay import SIGNIFICANCE  # noqa: E402
from zero_shot_files import load  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "recommendations.md"
#: the files holding the ``safe-combination`` block: the recommendations page and BENCHMARKS.md
DOCS = (DOC, DOC.parent.parent / "BENCHMARKS.md")


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def render_safe_table(summary: dict) -> str:
    """The old-vs-safe table of docs/recommendations.md (block ``safe-combination``), from the summary."""
    lines = ["| collection | re-ranker | metric | first stage | old rule: combined (sig. above / below, of 3) "
             "| safe rule: combined (above / below) | source |", "|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        old = row.get("old")
        if old is None:
            continue
        safe = row.get("safe")
        remeasured = row.get("old_remeasured")

        def cell(counted):
            if counted is None:
                return "not re-measured"
            marks = ("n/r" if counted.get("above") is None else
                     f"{counted['above']}↑ {counted['below']}↓ /{counted['seeds']}")
            return f"{fmt(counted.get('mean'))} ({marks})"
        old_cell = cell(old) + (" (re-measured: the table's run has no combined row)" if row.get("old_source") else
                                f"; re-measured {cell(remeasured)}" if remeasured else "")
        source = f"`{row['file']}`" + (f", `{row['safe_file']}`" if row.get("safe_file") else "")
        first = load(row["file"])["first_stage"][row["metric"]]
        lines.append(f"| {row['collection']} | {row['model']} | {row['metric']} | {first:.4f} | {old_cell} | "
                     f"{cell(safe)} | {source} |")
    below, above = summary["below_first_stage_count"], summary["above_first_stage_count"]
    lines += ["", f"Seeds significantly below the first stage over the table: old rule {below['old_rule']}, safe "
                  f"rule {below['safe_rule']}; significantly above: old rule {above['old_rule']}, safe rule "
                  f"{above['safe_rule']} ({summary['safe_rule_counts_note']})."]
    return "\n".join(lines) + "\n"


def render_three_way_table(summary: dict) -> str:
    """The three-way table of BENCHMARKS.md (block ``three-way``), from the summary's ``three_way`` entries."""
    lines = ["| collection | metric | seed model | seeds | two-way: first stage + zero-shot bi-encoder | three-way: "
             "+ the seed model (stacked; fallback rule: its own combination where proven, else the two-way; anchor "
             "rule: its own combination at the two-way's weight) | per "
             "seed: three-way (paired p vs two-way) | folds where the seed model entered | file |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in summary["collections"]:
        for three in entry.get("three_way", []):
            per_seed = ", ".join(f"{value:.4f} ({p:.2g})" for value, p in zip(three["three_way_per_seed"],
                                                                              three["p_three_vs_two"]))
            lines.append(f"| {entry['collection']} | {entry['metric']} | {three['seed_model']} | "
                         f"{len(three['seeds'])} | {three['two_way']:.4f} | {three['three_way']:.4f} | {per_seed} | "
                         f"{three['folds_where_the_seed_model_entered']} of {three['folds']} | `{three['file']}` |")
    return "\n".join(lines) + "\n"


def render_versus_zero_shot_table(summary: dict) -> str:
    """The table of issue 36 item 3 (block ``versus-zero-shot`` of BENCHMARKS.md): per collection, the zero-shot
    combination against the best trained two-way combination (first stage + a trained model, safe rule) and the
    best three-way one (first stage + zero-shot bi-encoder + a trained model), with the per-seed paired tests."""
    lines = ["| collection | metric | first stage | zero-shot bi-encoder combined (safe rule) | best trained pipeline "
             "(two-way) | its combination (safe rule) | per seed: difference (paired p) | seeds significantly above "
             "| best three-way: + seed model | three-way | per seed: difference (paired p) | seeds significantly above |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for entry in summary["collections"]:
        zero = entry.get("zero_shot_combined_safe") or {}
        trained = entry.get("best_trained_combined_safe") or {}
        three = entry.get("best_three_way") or {}
        if not zero or not (trained or three):
            continue
        if trained:
            pvalues = entry.get("p_vs_zero_shot") or []
            deltas = entry.get("best_trained_minus_zero_shot_per_seed") or []
            per_seed = ", ".join(f"{d:+.4f} ({p:.2g})" for d, p in zip(deltas, pvalues)) or "n/a"
            above = sum(1 for d, p in zip(deltas, pvalues) if p < SIGNIFICANCE and d > 0)
            two_cells = (f"{entry['best_trained']['name']} | {fmt(trained.get('mean'))} | {per_seed} | "
                         f"{above} of {len(pvalues)}")
        else:
            two_cells = "— | — | — | —"
        if three:
            per_seed = ", ".join(f"{d:+.4f} ({p:.2g})" for d, p in zip(three["minus_zero_shot_per_seed"],
                                                                       three["p_vs_zero_shot"]))
            three_cells = (f"{three['seed_model']} | {fmt(three['mean'])} | {per_seed} | "
                           f"{len(three['significant_gain_seeds'])} of {len(three['seeds'])}")
        else:
            three_cells = "— | — | — | —"
        lines.append(f"| {entry['collection']} | {entry['metric']} | {fmt(entry['first_stage'])} | "
                     f"{fmt(zero.get('mean'))} | {two_cells} | {three_cells} |")
    return "\n".join(lines) + "\n"
