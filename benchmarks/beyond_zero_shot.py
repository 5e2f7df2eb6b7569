"""Beyond the zero-shot bi-encoder: the safe combination measured, and ``benchmarks/results/combination/beyond-zero-shot.json``.

Two commands::

    # re-measure one (collection, re-ranker) under the old and the safe --interpolate auto, 3 seeds
    python benchmarks/beyond_zero_shot.py measure --dataset cranfield --reranker bi-encoder \\
        --model all-MiniLM-L6-v2 --seeds 1 2 3 --threads 1 \\
        --output benchmarks/results/cranfield/bi-encoder-zero-shot-safe.json

    # rebuild the summary from the result files (tests/pipeline/engine/test_safe_combination.py fails when it is stale)
    python benchmarks/beyond_zero_shot.py build

``measure`` scores every query a rule needs once per seed (a zero-shot model once for all seeds), then applies,
fold by fold, the old rule (:func:`pipeline.engine.fusion.tune_weight` on the dev queries: the best weight, whatever
its gain) and the safe rule of ``--interpolate auto`` (:func:`pipeline.engine.fusion.choose_weight` on the fold's
tuning queries: the tuned weight only when its cross-validated gain over the first stage is significant,
else the first stage), and evaluates both on the test queries exactly as ``reproduce.py`` does (paired
t-test against the first stage, Holm-corrected over the rows alone / combined). Its JSON has
``reproduce.py``'s layout (``first_stage``, ``results`` with per-seed values and p-values) plus every fold's
weights, the safe rule's evidence and the test queries' per-query main metric at every grid weight
(``test_values``), from which ``benchmarks/safe_rule_replay.py`` replays any weight rule; ``build`` counts the
safe rule of such a file as that replay of :func:`pipeline.engine.fusion.decide_weight`.

``build`` reads only result files: nothing in ``beyond-zero-shot.json`` is computed from anything else, and a
number no file holds is ``null`` with the reason. A collection's ``three_way`` lists the three-way combinations
measured by ``benchmarks/three_way_combination.py`` (first stage + zero-shot bi-encoder + a trained seed model),
each against its two-way step, the zero-shot combination of the same folds (:data:`THREE_WAY`).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from beyond_zero_shot_tables import (DOCS, render_safe_table, render_three_way_table,  # noqa: E402
                                     render_versus_zero_shot_table)
import effectiveness  # noqa: E402
from anchor_rule_replay import anchor_summary  # noqa: E402
from fallback_rule_replay import fallback_summary  # noqa: E402
from paired_vs_zero_shot import paired_per_seed  # noqa: E402
from safe_combination_measure import SIGNIFICANCE, measure, write_json  # noqa: E402
from safe_rule_replay import safe_result  # noqa: E402
from zero_shot_files import ANCHOR_REPLAYS, COLLECTIONS, FALLBACK_REPLAYS, SAFE_FILES, SUMMARY, THREE_WAY, load  # noqa: E402


def table_rows() -> list[dict]:
    """Every combined row of the effectiveness table, with its safe re-measurement when one exists."""
    rows = []
    for collection in effectiveness.COLLECTIONS:
        for model in (collection.word, collection.transformer):
            if model is not None:
                rows.append({"collection": collection.name, "model": model.label, "metric": collection.metric,
                             "file": model.file, "row": model.row})
    return rows


#: why a row was not re-measured: its trained models are not cached on this machine, and retraining every
#: model of the table for 3 seeds does not fit the shared 2-core budget (the result files keep no per-query
#: scores or runs from which the rule could be re-applied)
NOT_REMEASURED = ("not re-measured: the result file keeps per-seed means and p-values only (no runs, no "
                  "per-query scores), its trained models are not cached here, and retraining them for 3 seeds did "
                  "not fit the shared 2-core budget")


def count(row: dict, metric: str, first: float) -> dict:
    """Seeds significantly above / below the first stage (p < .05 as recorded) in one result row."""
    values, pvalues = row.get(metric) or [], row.get(f"p:{metric}") or []
    known = [(v, p) for v, p in zip(values, pvalues) if p is not None and p == p]
    if not known:
        return {"above": None, "below": None, "seeds": len(values), "reason": "no p-values recorded"}
    return {"above": sum(1 for v, p in known if p < SIGNIFICANCE and v > first),
            "below": sum(1 for v, p in known if p < SIGNIFICANCE and v < first), "seeds": len(values)}


def seed_marks(row: dict, metric: str, first: float) -> dict[int, str | None]:
    """``seed -> "above" / "below" / "level"`` (p < .05 as recorded), ``None`` where no p-value was kept."""
    marks = {}
    for seed, value, p in zip(row.get("seeds", []), row.get(metric, []), row.get(f"p:{metric}") or []):
        if p is None or p != p:
            marks[seed] = None
        else:
            marks[seed] = ("above" if p < SIGNIFICANCE and value > first else
                           "below" if p < SIGNIFICANCE and value < first else "level")
    return marks


def mean(values) -> float | None:
    return round(statistics.mean(values), 4) if values else None


def table_counts() -> dict:
    """``below_first_stage_count`` and its details over the effectiveness table, old rule and safe rule."""
    details = []
    totals = {"old": {"below": 0, "above": 0, "rows_with_p": 0},
              "safe": {"below": 0, "above": 0, "rows_with_p": 0}}
    for row in table_rows():
        data = load(row["file"])
        entry = {key: row[key] for key in ("collection", "model", "metric", "file")}
        combined = (data or {}).get("results", {}).get(f"{row['row']}+interp")
        first = data["first_stage"][row["metric"]] if data else None
        remeasured_only = load(SAFE_FILES[row["file"]]) if combined is None and row["file"] in SAFE_FILES else None
        if remeasured_only is not None:
            # the table's run had no combined row (run before --interpolate auto was its recipe's default): the
            # old rule applied by the re-measurement to the same scores as the safe rule stands in for it
            combined = remeasured_only["results"][f"{row['row']}+interp"]
            first = remeasured_only["first_stage"][row["metric"]]
            entry["old_source"] = (f"{SAFE_FILES[row['file']]}: the table's run has no combined row, the old rule "
                                   "as re-measured")
        if combined is None:
            entry["old"] = None
            entry["reason"] = "no combined row in the table (not run, or the recipe says --interpolate none)"
            details.append(entry)
            continue
        entry["old"] = count(combined, row["metric"], first)
        entry["old"]["mean"] = mean(combined[row["metric"]])
        safe_file = SAFE_FILES.get(row["file"])
        safe = load(safe_file) if safe_file else None
        if safe is None:
            entry["safe"] = None
            entry["reason"] = NOT_REMEASURED if safe_file is None else (
                f"{safe_file} not written: the re-measurement did not finish in the time available")
        else:
            safe_row = safe_result(safe, f"{row['row']}+safe")
            entry["safe_file"] = safe_file
            if safe_row.get("replayed"):
                entry["safe_rule_source"] = ("replayed from the file's per-weight test values with "
                                             "pipeline.engine.fusion.decide_weight (benchmarks/safe_rule_replay.py)")
            if safe.get("partial"):
                entry["safe_partial"] = (f"{safe['partial']} re-measured (the rest did not finish in the time "
                                         "available); the old rule's counts are over all 3 seeds of the table")
            entry["safe"] = count(safe_row, row["metric"], safe["first_stage"][row["metric"]])
            entry["safe"]["mean"] = mean(safe_row[row["metric"]])
            # the old rule as re-measured by the same script: checks that it reproduces the table's row
            entry["old_remeasured"] = count(safe["results"][f"{row['row']}+interp"], row["metric"],
                                            safe["first_stage"][row["metric"]])
            entry["old_remeasured"]["mean"] = mean(safe["results"][f"{row['row']}+interp"][row["metric"]])
        # per seed: the safe rule's count where that seed was re-measured, else the old rule's (said per row)
        old_marks = seed_marks(combined, row["metric"], first)
        safe_marks = dict(old_marks)
        if entry.get("safe"):  # safe_row: the re-measurement's row read above
            safe_marks.update(seed_marks(safe_row, row["metric"], safe["first_stage"][row["metric"]]))
            kept_old = sorted(set(old_marks) - set(seed_marks(safe_row, row["metric"], 0.0)))
            if kept_old:
                entry["safe_totals_use_old_seeds"] = kept_old
        for rule, marks in (("old", old_marks), ("safe", safe_marks)):
            known = [m for m in marks.values() if m is not None]
            if known:
                totals[rule]["below"] += sum(1 for m in known if m == "below")
                totals[rule]["above"] += sum(1 for m in known if m == "above")
                totals[rule]["rows_with_p"] += 1
        details.append(entry)
    remeasured = [d for d in details if d.get("safe")]
    replayed = [f"{d['collection']} {d['model']}" for d in remeasured if d.get("safe_rule_source")]
    return {"metric": "each collection's main metric; a seed counts when p < .05 (paired t-test vs the first "
                      "stage, Holm-corrected over the rows alone/combined, as recorded by the run)",
            "below_first_stage_count": {"old_rule": totals["old"]["below"], "safe_rule": totals["safe"]["below"]},
            "above_first_stage_count": {"old_rule": totals["old"]["above"], "safe_rule": totals["safe"]["above"]},
            "safe_rule_counts_note": f"{len(remeasured)} rows re-measured under the safe rule; seeds not "
                                     "re-measured (whole rows, or the seeds a row lists in "
                                     "safe_totals_use_old_seeds) enter the safe rule's totals with their old-rule "
                                     f"marks; {len(replayed)} rows ({', '.join(replayed)}) are the rule "
                                     "--interpolate auto applies now (pipeline.engine.fusion.decide_weight: kept, "
                                     "shrunk or first stage) replayed from their per-weight test values, the "
                                     "others as recorded under the rule they were measured with",
            "rows": details}


def three_way_summary(file: str) -> dict | None:
    """One three-way result file as the summary shows it (``None`` when the file is not there): the means, per
    seed the paired two-sided p of three-way against two-way, and the seeds where the seed model's step is a
    significant gain (p < .05 and three-way above two-way)."""
    data = load(file)
    if data is None:
        return None
    gains = [seed for seed, three, two, p in zip(data["seeds"], data["three_way"], data["two_way"],
                                                 data["p_three_vs_two"]) if p < 0.05 and three > two]
    rule = data.get("rule", "stack")

    def entered_fold(seed_model: dict) -> bool:
        if rule == "fallback":  # its own combination kept (see FALLBACK_REPLAYS)
            return seed_model["verdict"] == "kept"
        if rule == "anchor":  # combined at the zero-shot model's weight, the first stage's share below 1
            return seed_model["weight_of_first_stage"] < 1
        return seed_model["weight_of_two_way"] < 1

    entered = sum(entered_fold(fold["seed_model"]) for folds in data["folds"].values() for fold in folds)
    return {"seed_model": data["seed_model"] + ("" if rule == "stack" else f" ({rule} rule)"),
            "file": file, "recipe": f"python {data['command']}",
            **({"partial": data["partial"]} if "partial" in data else {}),
            "seeds": data["seeds"], "two_way": round(data["mean"]["two_way"], 4),
            "three_way": round(data["mean"]["three_way"], 4),
            "three_way_per_seed": [round(v, 4) for v in data["three_way"]],
            "two_way_per_seed": [round(v, 4) for v in data["two_way"]],
            "p_three_vs_two": [float(f"{p:.3g}") for p in data["p_three_vs_two"]],
            "significant_gain_seeds": gains,
            "folds_where_the_seed_model_entered": entered,
            "folds": sum(len(folds) for folds in data["folds"].values())}


NO_PER_QUERY = ("the result files keep per-seed means and p-values against the first stage only, not per-query "
                "scores, so a paired test against the zero-shot combination cannot be computed from them")


def collection_summary(name: str, metric: str, zero_file: str | None, trained: list) -> dict:
    """One collection's entry of ``beyond-zero-shot.json`` (see the module docstring)."""
    entry: dict = {"collection": name, "metric": metric}
    zero = load(zero_file) if zero_file else None
    first = None
    if zero is not None:
        first = zero["first_stage"][metric]
        row = zero["results"].get("bi-encoder+interp")
        entry["zero_shot_combined"] = ({"mean": mean(row[metric]), "per_seed": [round(v, 4) for v in row[metric]],
                                        "seeds": row["seeds"], "file": zero_file} if row else
                                       {"mean": None, "reason": f"{zero_file} has no combined row (the recipe "
                                                                "says --interpolate none)"})
        safe_file = next((s for f, s in SAFE_FILES.items() if f == zero_file), None)
        safe = load(safe_file) if safe_file else None
        if safe is not None:
            row = safe_result(safe, "bi-encoder+safe")
            entry["zero_shot_combined_safe"] = {"mean": mean(row[metric]), "per_seed": [round(v, 4) for v in row[metric]],
                                                "seeds": row["seeds"], "file": safe_file}
    else:
        entry["zero_shot_combined"] = {"mean": None, "reason": "the zero-shot bi-encoder was not run on this "
                                                               "collection"}
    best = None
    for label, file, row_name in trained:
        data = load(file)
        row = (data or {}).get("results", {}).get(f"{row_name}+interp")
        if row is None and file in SAFE_FILES and load(SAFE_FILES[file]) is not None:
            # no combined row in the table's run: the old rule as re-measured on the same recipe
            data = load(SAFE_FILES[file])
            row = data["results"].get(f"{row_name}+interp")
        if row and metric in row:
            first = first if first is not None else data["first_stage"][metric]
            candidate = {"name": label, "recipe": f"python {data['command']}", "file": file, "row": f"{row_name}+interp",
                         "mean": mean(row[metric]), "per_seed": [round(v, 4) for v in row[metric]],
                         "seeds": row["seeds"]}
            if best is None or candidate["mean"] > best["mean"]:
                best = candidate
    entry["first_stage"] = round(first, 4) if first is not None else None
    if best is None:
        entry["best_trained"] = None
        entry["best_trained_combined"] = None
        entry["seeds"] = []
        entry["best_trained_reason"] = "no trained re-ranker has a combined row on this collection"
    else:
        entry["best_trained"] = {"name": best["name"], "recipe": best["recipe"], "file": best["file"],
                                 "row": best["row"]}
        entry["best_trained_combined"] = best["mean"]
        entry["best_trained_per_seed"] = best["per_seed"]
        entry["seeds"] = best["seeds"]
        safe = load(SAFE_FILES[best["file"]]) if best["file"] in SAFE_FILES else None
        # a re-measurement may hold another model of the same file only (dl/*-knrm-drmm.json: DRMM, the table's row)
        row = safe_result(safe, best["row"].replace("+interp", "+safe")) if safe else None
        if row is not None:
            entry["best_trained_combined_safe"] = {"mean": mean(row[metric]), "per_seed": [round(v, 4) for v in row[metric]],
                                                   "seeds": row["seeds"], "file": SAFE_FILES[best["file"]]}
    zero_mean = entry["zero_shot_combined"].get("mean")
    entry["p_vs_zero_shot"] = None
    entry["p_vs_zero_shot_reason"] = NO_PER_QUERY if best is not None and zero_mean is not None else (
        "no zero-shot combination to compare with" if zero_mean is None else "no trained combination")
    paired = paired_vs_zero_shot(zero_file, best["file"] if best else None, best["row"] if best else None)
    if paired is not None:
        entry.update(paired)
    if best is not None and zero_mean is not None:
        entry["best_trained_minus_zero_shot"] = round(best["mean"] - zero_mean, 4)
    three = [summary for summary in map(three_way_summary, THREE_WAY.get(name, [])) if summary is not None]
    three += [summary for summary in (fallback_summary(*entry) for entry in FALLBACK_REPLAYS.get(name, []))
              if summary is not None]
    three += [summary for summary in (anchor_summary(*entry) for entry in ANCHOR_REPLAYS.get(name, []))
              if summary is not None]
    if three:
        entry["three_way"] = three
        # the three-way step is tested against the zero-shot combination of the same folds (its two-way step),
        # so the best three-way pipeline answers item 3 as directly as the best two-way one
        best3 = max(three, key=lambda t: (len(t["significant_gain_seeds"]), t["three_way"]))
        entry["best_three_way"] = {"seed_model": best3["seed_model"], "file": best3["file"],
                                   "mean": best3["three_way"], "zero_shot_combined": best3["two_way"],
                                   "minus_zero_shot_per_seed": [round(a - b, 4) for a, b in
                                                                zip(best3["three_way_per_seed"],
                                                                    best3["two_way_per_seed"])],
                                   "p_vs_zero_shot": best3["p_three_vs_two"], "seeds": best3["seeds"],
                                   "significant_gain_seeds": best3["significant_gain_seeds"]}
    return entry


def paired_vs_zero_shot(zero_file: str | None, trained_file: str | None, trained_row: str | None) -> dict | None:
    """Per seed, the paired t-test (two-sided) of the trained combination against the zero-shot one, both
    under the safe rule, where re-measurements with per-query values exist for both; else ``None``. Where both
    files also keep per-query values of the model alone and of the old rule, the same test for those
    (``vs_zero_shot_alone``, ``vs_zero_shot_old_rule``): what fine-tuning changes before any combination."""
    zero = load(SAFE_FILES[zero_file]) if zero_file in SAFE_FILES else None
    trained = load(SAFE_FILES[trained_file]) if trained_file in SAFE_FILES else None
    if zero is None or trained is None or "per_query" not in zero or "per_query" not in trained:
        return None
    zero_runs = (safe_result(zero, "bi-encoder+safe") or {}).get("per_query", {})
    trained_runs = (safe_result(trained, trained_row.replace("+interp", "+safe")) or {}).get("per_query", {})
    pvalues, deltas, seeds = paired_per_seed(trained_runs, zero_runs)
    if not seeds:
        return None
    paired = {"p_vs_zero_shot": pvalues, "p_vs_zero_shot_seeds": seeds,
              "best_trained_minus_zero_shot_per_seed": deltas,
              "p_vs_zero_shot_reason": "paired t-test (two-sided) per seed, trained+safe vs zero-shot+safe, from "
                                       f"{SAFE_FILES[trained_file]} and {SAFE_FILES[zero_file]}"}
    recorded = {name: data.get("per_query", {}).get("runs", {}) for name, data in (("zero", zero), ("trained", trained))}
    for key, suffix in (("vs_zero_shot_alone", ""), ("vs_zero_shot_old_rule", "+interp")):
        trained_rows = recorded["trained"].get(trained_row.replace("+interp", suffix), {})
        pvalues, deltas, seeds = paired_per_seed(trained_rows, recorded["zero"].get(f"bi-encoder{suffix}", {}))
        if seeds:
            paired[key] = {"p": pvalues, "difference": deltas, "seeds": seeds}
    return paired


def build() -> dict:
    """The content of ``beyond-zero-shot.json``, from the result files only."""
    return {"generated_by": "python benchmarks/beyond_zero_shot.py build",
            "collections": [collection_summary(*c) for c in COLLECTIONS],
            **table_counts()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="old vs safe combination of one re-ranker on one collection")
    run.add_argument("--dataset", required=True)
    run.add_argument("--split")
    run.add_argument("--reranker", required=True)
    run.add_argument("--model", help="a given checkpoint (e.g. all-MiniLM-L6-v2): zero-shot, nothing trained")
    run.add_argument("--train-dataset", help="train each seed's model on every judged query of this collection "
                     "(pipeline.train --folds 1) and measure it as a given model, e.g. nfcorpus-dev for nfcorpus")
    run.add_argument("--label", help="row label (default: the re-ranker's name)")
    run.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    run.add_argument("--metrics")
    run.add_argument("--k", type=int, default=0)
    run.add_argument("--set", action="append", default=[])
    run.add_argument("--threads", type=int, default=1)
    run.add_argument("--score-cache", help="JSON file keeping a given model's scores between invocations")
    run.add_argument("--output", required=True)
    summary = commands.add_parser("build", help="rebuild benchmarks/results/combination/beyond-zero-shot.json")
    summary.add_argument("--output", default=str(SUMMARY))
    args = parser.parse_args(argv)
    if args.command == "measure":
        from pipeline.core.logs import configure_logging

        configure_logging()  # hours of training and scoring: the project's progress and training lines on stderr
        write_json(Path(args.output), measure(args))
    else:
        summary = build()
        write_json(Path(args.output), summary)
        from pipeline.core.atomic import atomic_write

        for doc in DOCS:
            blocks = {"safe-combination": render_safe_table}
            if doc.name == "BENCHMARKS.md":
                blocks.update({"three-way": render_three_way_table, "versus-zero-shot": render_versus_zero_shot_table})
            text = doc.read_text(encoding="utf-8")
            for name, render in blocks.items():
                text = effectiveness.replace_block(text, name, render(summary), str(doc))
            with atomic_write(doc) as handle:
                handle.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
