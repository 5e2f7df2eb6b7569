"""Replay rules for the weight of ``--interpolate auto`` on recorded measurements, without re-scoring anything.

``python benchmarks/beyond_zero_shot.py measure`` records, for every seed and fold, the tuned weight, the
held-out (leave-one-out) gain of tuning with its one-sided p-value, and the test queries' per-query main metric
at every weight of :data:`pipeline.engine.fusion.DEFAULT_GRID` (``test_values``). Any rule that picks a grid
weight per fold from that evidence can therefore be applied afresh: this script does it for the old rule
(plain tuning), the safe rule the files were measured with, shrink variants and the rule
:func:`pipeline.engine.fusion.decide_weight` applies now, and counts per seed the runs significantly above /
below the first stage with the test the recorded rows use (paired t-test against the first stage,
Holm-corrected over the rows the run compares: the re-ranker alone and the combination).

Before counting, it checks that the replay reproduces every recorded old and safe row of each file (the
weights, the per-query values exactly, the means and p-values up to the 6-digit rounding of the recorded
per-query values); a file that does not reproduce stops the script (exit 2).

    python benchmarks/safe_rule_replay.py            # every re-measured file; writes the JSON below
    python benchmarks/safe_rule_replay.py --output -  # print only

Output: ``benchmarks/results/combination/safe-rule-replay.json``.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline.core.formats import natural_key  # noqa: E402
from pipeline.engine import fusion  # noqa: E402
from zero_shot_files import SAFE_FILES  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OUTPUT = RESULTS / "combination" / "safe-rule-replay.json"
#: the effectiveness table's level (a seed counts above / below the first stage when p < it)
SIGNIFICANCE = 0.05
#: replayed means must equal the recorded ones this closely (the per-query values are kept to 6 digits)
MEAN_TOLERANCE = 1e-6
#: and the p-values this closely (absolute; the marks must be identical besides)
P_TOLERANCE = 1e-4


class ReplayError(Exception):
    """A file that cannot be replayed or does not reproduce its recorded rows (one line)."""


#: ``shrunk(tuned, factor)``: ``factor`` of the way from the first stage towards ``tuned``, on the grid
shrunk = fusion.shrink_towards_first_stage


def t_from_one_sided_p(p_value: float, queries: int) -> float:
    """The t statistic (``queries - 1`` degrees of freedom) whose one-sided p-value is ``p_value``."""
    from scipy import stats

    if queries < 2:
        return 0.0
    return float(stats.t.isf(p_value, queries - 1))


def evidence(fold: Mapping) -> tuple[float, int, float, float]:
    """``(tuned, tuning queries, held-out gain, one-sided p)`` of one recorded fold."""
    safe = fold["safe"]
    return safe["tuned"], safe["tuning_queries"], safe["held_out_gain"], safe["p_one_sided"]


def proven(queries: int, gain: float, p: float, level: float = fusion.SAFE_LEVEL) -> bool:
    """Whether the recorded evidence clears the safe rule's bar at ``level``."""
    return queries >= fusion.MIN_TUNING_QUERIES and gain > 0 and p < level


def rule_old(fold: Mapping) -> float:
    return fold["old_weight"]


def rule_level(level: float) -> Callable[[Mapping], float]:
    """Keep the tuned weight when its evidence clears ``level``, else the first stage."""
    def rule(fold: Mapping) -> float:
        tuned, queries, gain, p = evidence(fold)
        return tuned if proven(queries, gain, p, level) else 1.0
    return rule


rule_safe = rule_level(fusion.SAFE_LEVEL)


def rule_positive(fold: Mapping) -> float:
    tuned, queries, gain, _ = evidence(fold)
    return tuned if queries >= fusion.MIN_TUNING_QUERIES and gain > 0 else 1.0


def rule_shrink_half(fold: Mapping) -> float:
    tuned, queries, gain, p = evidence(fold)
    if proven(queries, gain, p):
        return tuned
    return shrunk(tuned, 0.5) if queries >= fusion.MIN_TUNING_QUERIES and gain > 0 else 1.0


def rule_shrink_t(fold: Mapping) -> float:
    tuned, queries, gain, p = evidence(fold)
    if proven(queries, gain, p):
        return tuned
    if queries < fusion.MIN_TUNING_QUERIES or gain <= 0:
        return 1.0
    t = t_from_one_sided_p(p, queries)
    return shrunk(tuned, 1.0 - 1.0 / (t * t) if t > 0 else 0.0)


def rule_current(fold: Mapping) -> float:
    tuned, queries, gain, p = evidence(fold)
    return fusion.decide_weight(tuned, queries, gain, p).weight


#: name -> (description, rule); "old" and "safe" are what the files recorded, "current" what
#: pipeline.engine.fusion.choose_weight applies now
RULES: dict[str, tuple[str, Callable[[Mapping], float]]] = {
    "old": ("plain tuning: the tuned weight on the fold's dev queries, whatever its gain", rule_old),
    "safe": (f"the tuned weight when its held-out gain is > 0 and significant (one-sided p < {fusion.SAFE_LEVEL}, "
             f">= {fusion.MIN_TUNING_QUERIES} queries), else w = 1 (the rule the files were measured with)",
             rule_safe),
    "level-.10": ("as safe, at one-sided p < .10", rule_level(0.10)),
    "level-.20": ("as safe, at one-sided p < .20", rule_level(0.20)),
    "positive-gain": ("the tuned weight whenever the held-out gain is > 0 (no significance), else w = 1",
                      rule_positive),
    "shrink-half": ("as safe; a positive gain that is not significant moves half-way from 1 towards the tuned "
                    "weight (snapped to the grid towards 1)", rule_shrink_half),
    "shrink-t": ("as safe; a positive gain that is not significant moves the fraction max(0, 1 - 1/t^2) of the "
                 "way from 1 towards the tuned weight, t the held-out gain's t statistic (snapped towards 1)",
                 rule_shrink_t),
    "current": ("pipeline.engine.fusion.decide_weight, the rule --interpolate auto applies now", rule_current),
}


def labels(data: Mapping) -> tuple[str, str, str]:
    """The file's ``(alone, old, safe)`` row names."""
    safe = next(name for name in data["results"] if name.endswith("+safe"))
    label = safe[: -len("+safe")]
    return label, f"{label}+interp", safe


def recorded(data: Mapping) -> bool:
    """Whether every fold of ``data`` holds the per-weight test values a replay needs."""
    folds = data.get("folds") or {}
    return bool(folds) and all("test_values" in fold for seed in folds.values() for fold in seed)


def replay(data: Mapping, rule: Callable[[Mapping], float]) -> dict:
    """One file's combined row under ``rule``: ``{"seeds", metric: means, "p:"+metric: Holm p-values,
    "per_query": {seed: {query: value}}, "weights": {seed: [weight per fold]}}``, as ``measure`` evaluates it."""
    from pipeline.core.significance import correct_pvalues, paired_test

    if not recorded(data):
        raise ReplayError("the file has no per-weight test values (test_values): re-measure it with "
                          "benchmarks/beyond_zero_shot.py measure")
    metric = data["metric"]
    alone_row = labels(data)[0]
    out: dict = {"seeds": [], metric: [], f"p:{metric}": [], "per_query": {}, "weights": {}}
    for seed, folds in data["folds"].items():
        combined: dict[str, float] = {}
        first: dict[str, float] = {}
        weights = []
        for fold in folds:
            weight = rule(fold)
            key = str(float(weight))
            if key not in fold["test_values"]:
                raise ReplayError(f"seed {seed} fold {fold['fold']}: weight {weight} is not on the recorded grid")
            weights.append(weight)
            combined.update(fold["test_values"][key])
            first.update(fold["test_values"]["1.0"])
        alone = data["per_query"]["runs"][alone_row][seed]
        raw = []
        for run in (alone, combined):  # compare()'s order: every run but the baseline, as given
            common = sorted(set(first) & set(run), key=natural_key)
            raw.append(paired_test([run[q] for q in common], [first[q] for q in common]))
        out["seeds"].append(int(seed))
        out[metric].append(sum(combined.values()) / len(combined))
        out[f"p:{metric}"].append(correct_pvalues(raw, "holm")[1])
        out["per_query"][seed] = combined
        out["weights"][seed] = weights
    return out


def marks(row: Mapping, metric: str, first: float) -> list[str]:
    """Per seed ``above`` / ``below`` / ``level``: p < :data:`SIGNIFICANCE` and the mean's side of ``first``."""
    return ["above" if p < SIGNIFICANCE and v > first else "below" if p < SIGNIFICANCE and v < first else "level"
            for v, p in zip(row[metric], row[f"p:{metric}"])]


def measured_rule(data: Mapping) -> str:
    """The rule of :data:`RULES` that ``data``'s ``+safe`` row was measured with: ``safe`` (fall back to w = 1
    unless the gain is significant) for files measured before the half-way step, ``current`` after it (their
    rule description says how far an unproven gain moves)."""
    return "current" if "of the way from w=1" in data.get("rules", {}).get("safe", "") else "safe"


def check(data: Mapping, name: str = "file") -> dict:
    """Raise :class:`ReplayError` unless the old and safe rules replayed reproduce ``data``'s recorded rows;
    return the largest deviations found."""
    metric = data["metric"]
    _, old_row, safe_row = labels(data)
    first = data["first_stage"][metric]
    worst = {"mean": 0.0, "p": 0.0}
    for rule, row in (("old", old_row), (measured_rule(data), safe_row)):
        replayed = replay(data, RULES[rule][1])
        saved = data["results"][row]
        for seed, folds in data["folds"].items():
            expected = [fold["old_weight"] if rule == "old" else fold["safe"]["weight"] for fold in folds]
            if replayed["weights"][seed] != expected:
                raise ReplayError(f"{name}: rule {rule}, seed {seed}: replayed weights {replayed['weights'][seed]} "
                                  f"differ from the recorded {expected}")
            if replayed["per_query"][seed] != data["per_query"]["runs"][row][seed]:
                raise ReplayError(f"{name}: rule {rule}, seed {seed}: replayed per-query values differ from the "
                                  f"recorded {row!r}")
        if replayed["seeds"] != saved["seeds"]:
            raise ReplayError(f"{name}: rule {rule}: seeds {replayed['seeds']} differ from the recorded {saved['seeds']}")
        for got, want in zip(replayed[metric], saved[metric]):
            worst["mean"] = max(worst["mean"], abs(got - want))
        for got, want in zip(replayed[f"p:{metric}"], saved[f"p:{metric}"]):
            worst["p"] = max(worst["p"], abs(got - want))
        if worst["mean"] > MEAN_TOLERANCE or worst["p"] > P_TOLERANCE:
            raise ReplayError(f"{name}: rule {rule}: replayed means/p-values differ from the recorded {row!r} by "
                              f"{worst['mean']:.2g} / {worst['p']:.2g} (tolerance {MEAN_TOLERANCE} / {P_TOLERANCE})")
        if marks(replayed, metric, first) != marks(saved, metric, first):
            raise ReplayError(f"{name}: rule {rule}: replayed marks {marks(replayed, metric, first)} differ from "
                              f"the recorded {marks(saved, metric, first)}")
    for seed, folds in data["folds"].items():
        got = sum(v for fold in folds for v in fold["test_values"]["1.0"].values()) / sum(
            len(fold["test_values"]["1.0"]) for fold in folds)
        if abs(got - first) > MEAN_TOLERANCE:
            raise ReplayError(f"{name}: seed {seed}: the replayed first stage {got:.6f} differs from the recorded "
                              f"{first:.6f}")
    return worst


def all_proven(data: Mapping) -> bool:
    """Whether every recorded fold kept its tuned weight with significant evidence (so any rule that only
    alters the non-significant case applies the same weights)."""
    folds = [fold for seed in (data.get("folds") or {}).values() for fold in seed]
    return bool(folds) and all(proven(*evidence(fold)[1:]) for fold in folds)


def safe_result(data: dict, row: str) -> dict | None:
    """The safe rule's row ``row`` (``NAME+safe``) of a re-measurement, with its per-query values per seed
    (``per_query``). Where the file records every grid weight's test values (``test_values``), it is the replay
    of the rule ``--interpolate auto`` applies now (:func:`pipeline.engine.fusion.decide_weight`, through
    :func:`replay`), after checking that the replay reproduces the file's recorded old and safe rows; otherwise
    the row as recorded."""
    saved = data.get("results", {}).get(row)
    if saved is None or not recorded(data) or labels(data)[2] != row:
        if saved is not None:
            saved = {**saved, "per_query": data.get("per_query", {}).get("runs", {}).get(row, {})}
        return saved
    try:
        check(data, data.get("command", row))
    except ReplayError as error:
        raise SystemExit(f"safe_rule_replay: {error}") from None
    return {**replay(data, RULES["current"][1]), "replayed": True}


#: the rows the rule of ``--interpolate auto`` was chosen on (2026-11-26); rows measured afterwards test it afresh
CHOSEN_ON = ("vaswani/knrm-safe.json", "dl/2021-knrm-drmm-safe.json", "dl/2019-knrm-drmm-safe.json",
             "dl/2020-knrm-drmm-safe.json", "nfcorpus/knrm-safe.json", "wikiqa/match-srnn-safe.json")


def safe_files() -> list[str]:
    """The re-measurement files of ``beyond_zero_shot.py`` (relative to benchmarks/results), in its order."""
    return list(dict.fromkeys(SAFE_FILES.values()))


def summarise(files: list[str], results: Path = RESULTS) -> dict:
    """The replay of every rule on every file (relative to ``results``) that has the recording, and why the
    others need none / lack it."""
    rows, others = [], []
    by_group = {group: {rule: {"above": 0, "below": 0, "seeds": 0, "rows": 0} for rule in RULES}
                for group in ("chosen_on", "measured_after")}
    for file in files:
        path = results / file
        if not path.is_file():
            others.append({"file": file, "status": "missing"})
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        metric = data["metric"]
        first = data["first_stage"][metric]
        if not recorded(data):
            if all_proven(data):
                status = ("unchanged: every recorded fold kept its tuned weight with significant held-out gain "
                          f"(one-sided p < {fusion.SAFE_LEVEL}), so every rule here except 'old' applies the "
                          "same weights; its safe counts stand as recorded")
            else:
                status = ("not replayable: recorded before test_values, and some fold's evidence was not "
                          "significant (re-measure it to replay)")
            others.append({"file": file, "status": status,
                           **({"partial": data["partial"]} if data.get("partial") else {})})
            continue
        worst = check(data, file)
        entry = {"file": file, "metric": metric, "first_stage": round(first, 4),
                 "reproduces_recorded_old_and_safe": {"max_abs_mean_difference": float(f"{worst['mean']:.2g}"),
                                                      "max_abs_p_difference": float(f"{worst['p']:.2g}")},
                 "rules": {}}
        for rule, (_, function) in RULES.items():
            row = replay(data, function)
            seed_marks = marks(row, metric, first)
            entry["rules"][rule] = {"mean": round(sum(row[metric]) / len(row[metric]), 4),
                                    "per_seed": [round(v, 4) for v in row[metric]],
                                    "p": [float(f"{p:.3g}") for p in row[f"p:{metric}"]],
                                    "weights": row["weights"],
                                    "above": seed_marks.count("above"), "below": seed_marks.count("below")}
            group = by_group["chosen_on" if file in CHOSEN_ON else "measured_after"][rule]
            group["above"] += seed_marks.count("above")
            group["below"] += seed_marks.count("below")
            group["seeds"] += len(seed_marks)
            group["rows"] += 1
        rows.append(entry)
    totals = {rule: {key: sum(group[rule][key] for group in by_group.values()) for key in ("above", "below", "seeds")}
              for rule in RULES}
    return {"rules": {rule: description for rule, (description, _) in RULES.items()},
            "significance": f"paired t-test vs the first stage, Holm over the rows alone / combined, p < {SIGNIFICANCE}",
            "totals_over_replayed_rows": totals,
            "totals_on_the_rows_the_rule_was_chosen_on": by_group["chosen_on"],
            "totals_on_rows_measured_after_the_choice": by_group["measured_after"],
            "caveat": ("the rule --interpolate auto applies now was chosen among these variants on the rows of "
                       "CHOSEN_ON, so its counts there are not an independent test of it; the rows measured after "
                       "the choice are"),
            "rows": rows, "not_replayed": others}


def render(summary: dict) -> str:
    """A plain-text table of the summary."""
    names = list(summary["rules"])
    lines = ["rows: seeds significantly above / below the first stage (mean of the seeds)",
             f"{'file':38s} " + " ".join(f"{n:>19s}" for n in names)]
    for row in summary["rows"]:
        cells = [f"{r['above']}↑{r['below']}↓ {r['mean']:.4f}" for r in (row["rules"][n] for n in names)]
        lines.append(f"{row['file']:38s} " + " ".join(f"{c:>19s}" for c in cells))
    totals = summary["totals_over_replayed_rows"]
    lines.append(f"{'total':38s} " + " ".join(f"{str(totals[n]['above']) + '↑' + str(totals[n]['below']) + '↓':>19s}"
                                               for n in names))
    for other in summary["not_replayed"]:
        lines.append(f"{other['file']}: {other['status']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="result files relative to benchmarks/results (default: every "
                                                 "re-measurement of beyond_zero_shot.py)")
    parser.add_argument("--results", default=str(RESULTS), help="the folder the files are relative to")
    parser.add_argument("--output", default=str(OUTPUT), help="JSON output ('-': print only)")
    args = parser.parse_args(argv)
    try:
        summary = summarise(args.files or safe_files(), Path(args.results))
    except ReplayError as error:
        print(f"safe_rule_replay: {error}", file=sys.stderr)
        return 2
    print(render(summary))
    if args.output != "-":
        from pipeline.core.atomic import atomic_write

        with open("/proc/loadavg") as handle:
            load = " ".join(handle.read().split()[:3])
        document = {"command": shlex.join(["benchmarks/safe_rule_replay.py", *(argv if argv is not None else
                                                                                 sys.argv[1:])]),
                    "date": time.strftime("%Y-%m-%d"), "loadavg_at_end": load, **summary}
        with atomic_write(Path(args.output)) as handle:
            json.dump(document, handle, indent=1, ensure_ascii=False)
            handle.write("\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
