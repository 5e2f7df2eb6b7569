"""``--zero-shot-rule anchor`` (:data:`pipeline.engine.stacking.ANCHOR`) replayed from recorded
``beyond_zero_shot.py measure`` files, without re-scoring anything: the rows "(anchor rule)" of the three-way
table. Per seed and fold, the fine-tuned bi-encoder's combination with the first stage at the weight the zero-shot
model's safe rule chose on the same fold's training and dev queries (step 1 of :mod:`pipeline.engine.stacking`);
the fine-tuned file records every grid weight's test values (``test_values``), so the value at that weight is
read, not recomputed. Where a real ``three_way_combination.py --rule anchor`` run is recorded
(:data:`zero_shot_files.ANCHOR_REPLAYS`), the replay is checked against it query by query.

::

    python benchmarks/anchor_rule_replay.py            # prints the replayed rows (beyond_zero_shot.py build uses them)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired_vs_zero_shot import checked_against_run, paired_per_seed, replayed_against_two_way  # noqa: E402
from safe_rule_replay import safe_result  # noqa: E402
from zero_shot_files import ANCHOR_REPLAYS, load  # noqa: E402


class AnchorReplayError(ValueError):
    """Two files that are not the same folds, or a fine-tuned file without the test values to replay from."""


def anchor_replay(trained: dict, zero: dict) -> dict:
    """``--zero-shot-rule anchor`` replayed from two ``measure`` files of the same folds: per seed and fold, the
    fine-tuned model's recorded test values at the zero-shot model's safe weight, that weight given by
    :func:`pipeline.engine.fusion.decide_weight` from the zero-shot file's recorded tuning evidence (every
    non-test query).
    Returns ``{seed: {"anchor": {query: value}, "two_way": {query: value}, "weights": [weight per fold]}}``.

    Raises:
        AnchorReplayError: a seed or fold missing from the zero-shot file, fold sizes that differ, a fine-tuned
            fold without ``test_values``, or test queries the zero-shot file lacks.
    """
    from pipeline.engine import fusion

    zero_runs = safe_result(zero, "bi-encoder+safe")["per_query"]
    out = {}
    for seed, folds in trained["folds"].items():
        if seed not in zero["folds"] or seed not in zero_runs:
            raise AnchorReplayError(f"seed {seed}: not in the zero-shot file")
        zero_folds = {fold["fold"]: fold for fold in zero["folds"][seed]}
        two_way = zero_runs[seed]
        replayed: dict[str, float] = {}
        weights = []
        for fold in folds:
            base = zero_folds.get(fold["fold"])
            if base is None or base["test_queries"] != fold["test_queries"]:
                raise AnchorReplayError(f"seed {seed} {fold['fold']}: not the same fold in the zero-shot file")
            if "test_values" not in fold:
                raise AnchorReplayError(f"seed {seed} {fold['fold']}: no per-weight test values to replay")
            evidence = base["safe"]
            weight = fusion.decide_weight(evidence["tuned"], evidence["tuning_queries"], evidence["held_out_gain"],
                                          evidence["p_one_sided"]).weight
            values = fold["test_values"][str(float(weight))]
            missing = sorted(set(values) - set(two_way))
            if missing or len(values) != fold["test_queries"]:
                raise AnchorReplayError(f"seed {seed} {fold['fold']}: test queries {missing[:3]} not in the "
                                        "zero-shot file")
            replayed.update(values)
            weights.append(weight)
        out[seed] = {"anchor": replayed, "two_way": {q: two_way[q] for q in replayed}, "weights": weights}
    return out


def anchor_summary(file: str, label: str, zero_file: str, run_file: str | None) -> dict | None:
    """One :data:`zero_shot_files.ANCHOR_REPLAYS` entry replayed, in the shape of
    :func:`beyond_zero_shot.three_way_summary` (``three_way``: the anchored combination; ``two_way``: the
    zero-shot safe combination), with the paired test against the first stage too (``p_vs_first_stage``: the
    rule must not end below it) and the check against a real run where one exists (``checked_against_run``: per
    seed, the largest per-query difference; 0: the same values). ``None`` when a file is missing."""
    trained, zero = load(file), load(zero_file)
    if trained is None or zero is None:
        return None
    replay = anchor_replay(trained, zero)
    seeds = sorted(replay, key=int)
    first_runs = {seed: {q: v for fold in folds for q, v in fold["test_values"]["1.0"].items()}
                  for seed, folds in trained["folds"].items()}
    p_first, minus_first, _ = paired_per_seed({s: replay[s]["anchor"] for s in seeds}, first_runs)
    summary = {"seed_model": f"{label} (anchor rule)", "file": file, "rule": "anchor",
               "recipe": f"python {trained['command']}",
               "source": (f"replayed from {file} (the fine-tuned model's per-weight test values) and {zero_file} (the "
                          "zero-shot model's weight per fold, tuned on every non-test query, and its safe "
                          "combination): pipeline.engine.stacking ANCHOR, what --zero-shot-base all-MiniLM-L6-v2 "
                          "--zero-shot-rule anchor runs"),
               **replayed_against_two_way({s: replay[s]["anchor"] for s in seeds},
                                          {s: replay[s]["two_way"] for s in seeds}),
               "p_vs_first_stage": p_first, "minus_first_stage_per_seed": minus_first,
               "below_first_stage_seeds": [int(s) for s, d, p in zip(seeds, minus_first, p_first) if p < 0.05 and d < 0],
               "weights_of_first_stage": {s: replay[s]["weights"] for s in seeds},
               "folds_where_the_seed_model_entered": sum(w < 1.0 for s in seeds for w in replay[s]["weights"]),
               "folds": sum(len(trained["folds"][s]) for s in seeds)}
    run = load(run_file) if run_file else None
    if run is not None:
        summary["checked_against_run"] = checked_against_run(run_file, run, {s: replay[s]["anchor"] for s in seeds})
    return summary


def main() -> int:
    """Print every :data:`zero_shot_files.ANCHOR_REPLAYS` row: means, p against the zero-shot combination and
    the first stage, per seed."""
    for collection, entries in ANCHOR_REPLAYS.items():
        for entry in entries:
            summary = anchor_summary(*entry)
            if summary is None:
                print(f"{collection}: {entry[0]} missing")
                continue
            print(f"{collection} {summary['seed_model']}: {summary['three_way_per_seed']} vs zero-shot "
                  f"{summary['two_way_per_seed']} p {summary['p_three_vs_two']}; vs first stage p "
                  f"{summary['p_vs_first_stage']}" + (f"; real run {summary['checked_against_run']}"
                                                       if "checked_against_run" in summary else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
