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
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
SUMMARY = RESULTS / "combination" / "beyond-zero-shot.json"


from safe_combination_measure import SIGNIFICANCE, measure, write_json  # noqa: E402,F401

# ------------------------------------------------------------------------------------------------- build

#: the effectiveness table's combined rows (benchmarks/effectiveness.py) and the file re-measuring each under
#: the safe rule (None: not re-measured, with the reason)
def table_rows() -> list[dict]:
    """Every combined row of the effectiveness table, with its safe re-measurement when one exists."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("effectiveness_for_summary",
                                                  Path(__file__).resolve().parent / "effectiveness.py")
    effectiveness = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = effectiveness
    spec.loader.exec_module(effectiveness)
    rows = []
    for collection in effectiveness.COLLECTIONS:
        for model in (collection.word, collection.transformer):
            if model is not None:
                rows.append({"collection": collection.name, "model": model.label, "metric": collection.metric,
                             "file": model.file, "row": model.row})
    return rows


#: table file -> the safe re-measurement of the same runs (same protocol, seeds and recipe)
SAFE_FILES = {
    "cranfield/bi-encoder-zero-shot.json": "cranfield/bi-encoder-zero-shot-safe.json",
    "vaswani/bi-encoder-zero-shot.json": "vaswani/bi-encoder-zero-shot-safe.json",
    "nfcorpus/bi-encoder-zero-shot.json": "nfcorpus/bi-encoder-zero-shot-safe.json",
    "wikiqa/bi-encoder-zero-shot.json": "wikiqa/bi-encoder-zero-shot-safe.json",
    "cranfield/knrm.json": "cranfield/knrm-safe.json",
    "vaswani/knrm.json": "vaswani/knrm-safe.json",
    "dl/2019-bi-encoder-zero-shot.json": "dl/2019-bi-encoder-zero-shot-safe.json",
    "dl/2020-bi-encoder-zero-shot.json": "dl/2020-bi-encoder-zero-shot-safe.json",
    "dl/2021-bi-encoder-zero-shot.json": "dl/2021-bi-encoder-zero-shot-safe.json",
    "microblog/2014-hcan-headline.json": "microblog/2014-hcan-headline-safe.json",
    # measured under both rules at once (QL top 1000, as the cross-encoder rows)
    "microblog/2013-bi-encoder-zero-shot-safe.json": "microblog/2013-bi-encoder-zero-shot-safe.json",
    "microblog/2014-bi-encoder-zero-shot-safe.json": "microblog/2014-bi-encoder-zero-shot-safe.json",
    "microblog/2013-transformers-depth1000-3seeds.json": "microblog/2013-cross-encoder-safe.json",
    "microblog/2014-transformers-depth1000-3seeds.json": "microblog/2014-cross-encoder-safe.json",
    "dl/2021-knrm-drmm.json": "dl/2021-knrm-drmm-safe.json",
    "dl/2019-knrm-drmm.json": "dl/2019-knrm-drmm-safe.json",
    # the fine-tuning run holds its own +safe rows (benchmarks/results/dl/2019-bi-encoder-in-batch.md)
    "dl/2019-bi-encoder-in-batch.json": "dl/2019-bi-encoder-in-batch.json",
    "dl/2020-bi-encoder-in-batch.json": "dl/2020-bi-encoder-in-batch.json",
    "dl/2021-bi-encoder-in-batch.json": "dl/2021-bi-encoder-in-batch.json",
    "vaswani/bi-encoder-in-batch-bf16.json": "vaswani/bi-encoder-in-batch-bf16.json",
    "cranfield/bi-encoder-in-batch.json": "cranfield/bi-encoder-in-batch.json",
    "dl/2019-cross-encoder-distilled-safe.json": "dl/2019-cross-encoder-distilled-safe.json",
    "dl/2020-knrm-drmm.json": "dl/2020-knrm-drmm-safe.json",
    "nfcorpus/knrm.json": "nfcorpus/knrm-safe.json",
    "wikiqa/match-srnn.json": "wikiqa/match-srnn-safe.json",
}

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


def safe_result(data: dict, row: str) -> dict | None:
    """The safe rule's row ``row`` (``NAME+safe``) of a re-measurement, with its per-query values per seed
    (``per_query``). Where the file records every grid weight's test values (``test_values``), it is the replay
    of the rule ``--interpolate auto`` applies now (:func:`pipeline.engine.fusion.decide_weight`, through
    ``benchmarks/safe_rule_replay.py``), after checking that the replay reproduces the file's recorded old and
    safe rows; otherwise the row as recorded."""
    import safe_rule_replay

    saved = data.get("results", {}).get(row)
    if saved is None or not safe_rule_replay.recorded(data) or safe_rule_replay.labels(data)[2] != row:
        if saved is not None:
            saved = {**saved, "per_query": data.get("per_query", {}).get("runs", {}).get(row, {})}
        return saved
    try:
        safe_rule_replay.check(data, data.get("command", row))
    except safe_rule_replay.ReplayError as error:
        raise SystemExit(f"beyond_zero_shot build: {error}") from None
    return {**safe_rule_replay.replay(data, safe_rule_replay.RULES["current"][1]), "replayed": True}


def load(file: str) -> dict | None:
    path = RESULTS / file
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


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


#: per shipped collection: the first-stage / zero-shot file and the trained rows to compare with it
COLLECTIONS = [
    ("Cranfield", "AP", "cranfield/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "cranfield/knrm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch, 5-fold CV)", "cranfield/bi-encoder-in-batch.json",
       "bi-encoder-in-batch")]),
    ("Vaswani", "AP", "vaswani/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "vaswani/knrm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch, 5-fold CV; amp requested, float32 on an "
       "AVX2 host)", "vaswani/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16")]),
    ("NFCorpus", "nDCG@10", "nfcorpus/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "nfcorpus/knrm.json", "knrm")]),
    ("Microblog 2013", "AP", "microblog/2013-bi-encoder-zero-shot-safe.json",
     [("HCAN (hinge, up to 20 epochs)", "microblog/2013-hcan-hinge-all.json", "hcan-HCAN"),
      ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)", "microblog/2013-transformers-depth1000-3seeds.json",
       "cross-encoder")]),
    ("Microblog 2014", "AP", "microblog/2014-bi-encoder-zero-shot-safe.json",
     [("HCAN (the headline's recipe)", "microblog/2014-hcan-headline.json", "hcan"),
      ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)", "microblog/2014-transformers-depth1000-3seeds.json",
       "cross-encoder")]),
    ("WikiQA (237 q)", "AP", "wikiqa/bi-encoder-zero-shot.json",
     [("Bi-Match-SRNN", "wikiqa/match-srnn.json", "bi-match-srnn")]),
    ("TrecQA raw-test", "AP", "trecqa/bi-encoder-zero-shot.json", [("HCAN", "trecqa/hcan.json", "hcan-HCAN")]),
    ("DL19", "nDCG@10", "dl/2019-bi-encoder-zero-shot.json",
     [("DRMM", "dl/2019-knrm-drmm.json", "drmm"), ("KNRM", "dl/2019-knrm-drmm.json", "knrm"),
      ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)", "dl/2019-cross-encoder.json", "cross-encoder"),
      ("ADDAX (MiniLM, 2 epochs x 3,200 pairs)", "dl/2019-addax.json", "addax"),
      ("HCAN (2 epochs x 3,200 pairs)", "dl/2019-hcan.json", "hcan"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch)", "dl/2019-bi-encoder-in-batch.json",
       "bi-encoder-in-batch"),
      ("cross-encoder distilled from the zero-shot bi-encoder (distill_weight 0.5, 2 epochs x 640 groups of 5)",
       "dl/2019-cross-encoder-distilled-safe.json", "cross-encoder-distilled")]),
    ("DL20", "nDCG@10", "dl/2020-bi-encoder-zero-shot.json",
     [("DRMM", "dl/2020-knrm-drmm.json", "drmm"), ("KNRM", "dl/2020-knrm-drmm.json", "knrm"),
      ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)", "dl/2020-cross-encoder.json", "cross-encoder"),
      ("ADDAX (MiniLM, 2 epochs x 3,200 pairs)", "dl/2020-addax.json", "addax"),
      ("HCAN (2 epochs x 3,200 pairs)", "dl/2020-hcan.json", "hcan"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch)", "dl/2020-bi-encoder-in-batch.json",
       "bi-encoder-in-batch")]),
    ("DL21", "nDCG@10", "dl/2021-bi-encoder-zero-shot.json",
     [("DRMM", "dl/2021-knrm-drmm.json", "drmm"), ("KNRM", "dl/2021-knrm-drmm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch)", "dl/2021-bi-encoder-in-batch.json",
       "bi-encoder-in-batch")]),
]

#: per collection: the three-way combinations measured (first stage + zero-shot bi-encoder + a trained seed model,
#: benchmarks/three_way_combination.py), each against its own two-way step (first stage + zero-shot bi-encoder)
THREE_WAY = {
    "Cranfield": ["cranfield/three-way-bi-encoder-knrm.json", "cranfield/three-way-bi-encoder-drmm.json",
                  "cranfield/three-way-bi-encoder-hcan.json", "cranfield/three-way-bi-encoder-cross-encoder-bf16.json",
                  "cranfield/three-way-bi-encoder-bi-encoder-in-batch.json"],
    "Vaswani": ["vaswani/three-way-bi-encoder-knrm.json", "vaswani/three-way-bi-encoder-drmm.json",
                "vaswani/three-way-bi-encoder-hcan.json"],
    "NFCorpus": ["nfcorpus/three-way-bi-encoder-knrm.json", "nfcorpus/three-way-bi-encoder-drmm.json",
                 "nfcorpus/three-way-bi-encoder-cross-encoder-bf16.json"],
    "Microblog 2013": ["microblog/2013-three-way-bi-encoder-cross-encoder.json", "microblog/2013-three-way-bi-encoder-hcan.json"],
    "Microblog 2014": ["microblog/2014-three-way-bi-encoder-cross-encoder.json", "microblog/2014-three-way-bi-encoder-hcan.json"],
    "DL19": ["dl/2019-three-way-bi-encoder-drmm.json", "dl/2019-three-way-bi-encoder-knrm.json",
             "dl/2019-three-way-bi-encoder-hcan.json", "dl/2019-three-way-bi-encoder-cross-encoder-distilled.json",
             "dl/2019-three-way-bi-encoder-bi-encoder-in-batch.json"],
    "DL20": ["dl/2020-three-way-bi-encoder-drmm.json", "dl/2020-three-way-bi-encoder-knrm.json",
             "dl/2020-three-way-bi-encoder-hcan.json", "dl/2020-three-way-bi-encoder-cross-encoder-distilled.json",
             "dl/2020-three-way-bi-encoder-bi-encoder-in-batch.json"],
    "DL21": ["dl/2021-three-way-bi-encoder-drmm.json", "dl/2021-three-way-bi-encoder-knrm.json",
             "dl/2021-three-way-bi-encoder-hcan.json"],
}


#: per collection: trained models replayed under ``--zero-shot-rule fallback`` (a ``measure`` file with the model's
#: per-fold dev evidence and per-query values, its row label, the zero-shot safe re-measurement of the same folds,
#: and the file of a real ``three_way_combination.py --rule fallback`` run of some of its seeds, or ``None``,
#: against which the replay is checked). The rule is meant for the bi-encoder fine-tuned from the zero-shot model;
#: KNRM and Microblog's HCAN show what it does to models that are not (docs/recommendations.md)
FALLBACK_REPLAYS = {
    "Cranfield": [("cranfield/bi-encoder-in-batch.json", "bi-encoder-in-batch", "cranfield/bi-encoder-zero-shot-safe.json",
                   "cranfield/fallback-bi-encoder-bi-encoder-in-batch.json"),
                  ("cranfield/knrm-safe.json", "knrm", "cranfield/bi-encoder-zero-shot-safe.json", None)],
    "Vaswani": [("vaswani/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16",
                 "vaswani/bi-encoder-zero-shot-safe.json", None),
                ("vaswani/knrm-safe.json", "knrm", "vaswani/bi-encoder-zero-shot-safe.json", None)],
    "NFCorpus": [("nfcorpus/knrm-safe.json", "knrm", "nfcorpus/bi-encoder-zero-shot-safe.json", None)],
    "Microblog 2014": [("microblog/2014-hcan-headline-safe.json", "hcan", "microblog/2014-bi-encoder-zero-shot-safe.json",
                        None)],
    "DL19": [("dl/2019-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2019-bi-encoder-zero-shot-safe.json",
              None)],
    "DL20": [("dl/2020-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2020-bi-encoder-zero-shot-safe.json",
              "dl/2020-fallback-bi-encoder-bi-encoder-in-batch.json")],
    "DL21": [("dl/2021-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2021-bi-encoder-zero-shot-safe.json",
              None)],
}


def fallback_entry(file: str) -> tuple[str, str, str, str | None]:
    """The :data:`FALLBACK_REPLAYS` entry of a trained model's ``measure`` file."""
    return next(entry for entries in FALLBACK_REPLAYS.values() for entry in entries if entry[0] == file)


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
    """One :data:`FALLBACK_REPLAYS` entry replayed, in :func:`three_way_summary`'s shape (``three_way``: the fallback;
    ``two_way``: the zero-shot safe combination), with the check against a real run where one exists
    (``checked_against_run``: per seed, the largest per-query difference; 0: the same values).
    ``None`` when a file is missing."""
    trained, zero = load(file), load(zero_file)
    if trained is None or zero is None:
        return None
    replay = fallback_replay(trained, zero, label)
    seeds = sorted(replay, key=int)
    three = [statistics.mean(replay[s]["fallback"].values()) for s in seeds]
    two = [statistics.mean(replay[s]["two_way"].values()) for s in seeds]
    pvalues, _, _ = paired_per_seed({s: replay[s]["fallback"] for s in seeds}, {s: replay[s]["two_way"] for s in seeds})
    summary = {"seed_model": f"{label} (fallback rule)", "file": file, "rule": "fallback",
               "recipe": f"python {trained['command']}",
               "source": (f"replayed from {file} (the trained model's dev evidence and per-weight test values) and "
                          f"{zero_file} (the zero-shot safe combination of the same folds): pipeline.engine.stacking "
                          "FALLBACK, what --zero-shot-base all-MiniLM-L6-v2 --zero-shot-rule fallback runs"),
               "seeds": [int(s) for s in seeds], "two_way": round(statistics.mean(two), 4),
               "three_way": round(statistics.mean(three), 4),
               "three_way_per_seed": [round(v, 4) for v in three], "two_way_per_seed": [round(v, 4) for v in two],
               "p_three_vs_two": pvalues,
               "significant_gain_seeds": [int(s) for s, a, b, p in zip(seeds, three, two, pvalues) if p < 0.05 and a > b],
               "significant_loss_seeds": [int(s) for s, a, b, p in zip(seeds, three, two, pvalues) if p < 0.05 and a < b],
               "folds_where_the_seed_model_entered": sum(replay[s]["kept"] for s in seeds),
               "folds": sum(len(trained["folds"][s]) for s in seeds)}
    run = load(run_file) if run_file else None
    if run is not None:
        summary["checked_against_run"] = {
            "file": run_file, "max_abs_difference_per_seed": {
                str(seed): round(max(abs(values[q] - replay[str(seed)]["fallback"][q]) for q in values), 6)
                for seed, values in ((int(s), v) for s, v in run["per_query"]["three_way"].items())}}
    return summary


def three_way_summary(file: str) -> dict | None:
    """One three-way result file as the summary shows it (``None`` when the file is not there): the means, per
    seed the paired two-sided p of three-way against two-way, and the seeds where the seed model's step is a
    significant gain (p < .05 and three-way above two-way)."""
    data = load(file)
    if data is None:
        return None
    gains = [seed for seed, three, two, p in zip(data["seeds"], data["three_way"], data["two_way"],
                                                 data["p_three_vs_two"]) if p < 0.05 and three > two]
    def entered_fold(seed_model: dict) -> bool:  # fallback: its own combination kept (see FALLBACK_REPLAYS)
        if data.get("rule", "stack") == "fallback":
            return seed_model["verdict"] == "kept"
        return seed_model["weight_of_two_way"] < 1

    entered = sum(entered_fold(fold["seed_model"]) for folds in data["folds"].values() for fold in folds)
    return {"seed_model": data["seed_model"] + (" (fallback rule)" if data.get("rule") == "fallback" else ""),
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
             "+ the seed model (stacked; fallback rule: its own combination where proven, else the two-way) | per "
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


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with the lines between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` replaced by ``block``."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"the document lacks the markers {begin} / {end}")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + block + end + rest.split(end, 1)[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="old vs safe combination of one re-ranker on one collection")
    run.add_argument("--dataset", required=True)
    run.add_argument("--split")
    run.add_argument("--reranker", required=True)
    run.add_argument("--model", help="a given checkpoint (e.g. all-MiniLM-L6-v2): zero-shot, nothing trained")
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
    os.environ.setdefault("TQDM_DISABLE", "1")
    if args.command == "measure":
        write_json(Path(args.output), measure(args))
    else:
        summary = build()
        write_json(Path(args.output), summary)
        from pipeline.core.atomic import atomic_write

        for doc in DOCS:
            text = replace_block(doc.read_text(encoding="utf-8"), "safe-combination", render_safe_table(summary))
            if doc.name == "BENCHMARKS.md":
                text = replace_block(text, "three-way", render_three_way_table(summary))
                text = replace_block(text, "versus-zero-shot", render_versus_zero_shot_table(summary))
            with atomic_write(doc) as handle:
                handle.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
