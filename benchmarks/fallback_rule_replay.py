"""``--zero-shot-rule fallback`` (:data:`pipeline.engine.stacking.FALLBACK`) replayed from recorded
``beyond_zero_shot.py measure`` files, without re-scoring anything: the rows "(fallback rule)" of the three-way
table and the fine-tuned bi-encoder's fallback cells of the matrix. Where a real
``three_way_combination.py --rule fallback`` run is recorded (:data:`zero_shot_files.FALLBACK_REPLAYS`), the
replay is checked against it query by query.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired_vs_zero_shot import checked_against_run, replayed_against_two_way  # noqa: E402
from safe_rule_replay import safe_result  # noqa: E402
from zero_shot_files import load  # noqa: E402


def fallback_replay(trained: dict, zero: dict, label: str) -> dict:
    """``--zero-shot-rule fallback`` (:data:`pipeline.engine.stacking.FALLBACK`) replayed from two ``measure`` files of
    the same folds: per seed and fold, the fine-tuned model's combination with the first stage at the weight
    :func:`pipeline.engine.fusion.decide_weight` gives its recorded dev evidence where the verdict is ``kept``,
    else the zero-shot safe combination's per-query values (step 1, tuned on every non-test query).
    ``label``: the trained model's row (``NAME`` of ``NAME+safe``).
    Returns ``{seed: {"fallback": {query: value}, "two_way": {query: value}, "kept": folds kept}}``."""
    from pipeline.engine import fusion

    zero_runs = safe_result(zero, "bi-encoder+safe")["per_query"]
    out = {}
    for seed, folds in trained["folds"].items():
        two_way = zero_runs[seed]
        safe_run = trained["per_query"]["runs"][f"{label}+safe"][seed]
        replayed: dict[str, float] = {}
        kept = 0
        for fold in folds:
            evidence = fold["safe"]
            choice = fusion.decide_weight(evidence["tuned"], evidence["tuning_queries"], evidence["held_out_gain"],
                                          evidence["p_one_sided"])
            if "test_values" in fold:
                tested = fold["test_values"]["1.0"]
                kept_values = fold["test_values"].get(str(float(choice.weight)))
            elif len(folds) == 1 and evidence["weight"] == choice.weight:
                # recorded before test_values: one fold (a split protocol), the rule's weight as applied then
                tested, kept_values = safe_run, safe_run
            else:
                raise ValueError(f"seed {seed} {fold['fold']}: no per-weight test values to replay")
            missing = sorted(set(tested) - set(two_way))
            if missing:
                raise ValueError(f"seed {seed} {fold['fold']}: test queries {missing[:3]} not in the zero-shot file")
            if choice.verdict == fusion.KEPT:
                replayed.update(kept_values)
                kept += 1
            else:
                replayed.update({q: two_way[q] for q in tested})
        out[seed] = {"fallback": replayed, "two_way": {q: two_way[q] for q in replayed}, "kept": kept}
    return out


def fallback_summary(file: str, label: str, zero_file: str, run_file: str | None) -> dict | None:
    """One :data:`zero_shot_files.FALLBACK_REPLAYS` entry replayed, in the shape of
    :func:`beyond_zero_shot.three_way_summary` (``three_way``: the fallback; ``two_way``: the zero-shot safe
    combination), with the check against a real run where one exists (``checked_against_run``: per seed, the
    largest per-query difference; 0: the same values). ``None`` when a file is missing."""
    trained, zero = load(file), load(zero_file)
    if trained is None or zero is None:
        return None
    replay = fallback_replay(trained, zero, label)
    seeds = sorted(replay, key=int)
    summary = {"seed_model": f"{label} (fallback rule)", "file": file, "rule": "fallback",
               "recipe": f"python {trained['command']}",
               "source": (f"replayed from {file} (the trained model's dev evidence and per-weight test values) and "
                          f"{zero_file} (the zero-shot safe combination of the same folds): pipeline.engine.stacking "
                          "FALLBACK, what --zero-shot-base all-MiniLM-L6-v2 --zero-shot-rule fallback runs"),
               **replayed_against_two_way({s: replay[s]["fallback"] for s in seeds},
                                          {s: replay[s]["two_way"] for s in seeds}),
               "folds_where_the_seed_model_entered": sum(replay[s]["kept"] for s in seeds),
               "folds": sum(len(trained["folds"][s]) for s in seeds)}
    run = load(run_file) if run_file else None
    if run is not None:
        summary["checked_against_run"] = checked_against_run(run_file, run, {s: replay[s]["fallback"] for s in seeds})
    return summary
