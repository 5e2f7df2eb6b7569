"""``python benchmarks/beyond_zero_shot.py measure``: one re-ranker on one collection under the old and the safe
``--interpolate auto``, each (collection, re-ranker, seed) scored once and both rules applied to the same scores
(see :mod:`beyond_zero_shot` for the command and the result file's layout).

``--train-dataset D`` measures a model trained on another collection: per seed, one model trained on every judged
query of ``D`` (``python -m pipeline.train --dataset D --folds 1``, the same model cache, so a model that command
trained is loaded, not trained again), then treated as a given checkpoint on the measured collection (tuned on
every non-test query, since it saw none of them): e.g. NFCorpus's dev queries for its test queries."""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: p-value under which a difference counts as significant (the effectiveness table's level)
SIGNIFICANCE = 0.05


def measure(args: argparse.Namespace) -> dict:
    """Old and safe combination of one re-ranker on one collection over ``args.seeds``: the result dict."""
    import torch

    from pipeline.engine import fusion
    from pipeline.engine.config import RunConfig
    from pipeline.core import evaluation
    from pipeline.core.datasets import load_dataset
    from pipeline.core.runtime import seed_everything
    from pipeline.engine.model_cache import trained_reranker, transferred_model
    from pipeline.engine.plan import plan_run
    from pipeline.engine.stages import rerank, retrieve

    if args.threads:
        os.environ["PIPELINE_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    started = time.time()
    dataset = load_dataset(args.dataset)
    train_on = getattr(args, "train_dataset", None)
    if train_on and (args.model or getattr(args, "score_cache", None)):
        raise SystemExit("--train-dataset trains each seed's model: not with --model or --score-cache")
    given = bool(args.model) or bool(train_on)
    label = args.label or args.reranker
    rows = {"alone": label, "old": f"{label}+interp", "safe": f"{label}+safe"}
    if given:
        rows["safe-dev"] = f"{label}+safe-dev-only"
    results: dict[str, dict] = {name: {"seeds": []} for name in rows.values()}
    folds_out: dict[str, list] = {}
    per_query: dict[str, dict] = {}
    baseline: dict[str, float] = {}
    zero_shot_scores: dict = {}   # a given model scores a query the same in every seed and fold
    cache = Path(args.score_cache) if getattr(args, "score_cache", None) else None
    if given and cache is not None and cache.is_file():
        from pipeline.core.records import ScoredDoc

        zero_shot_scores = {q: [ScoredDoc(q, d, s) for d, s in hits] for q, hits in
                            json.loads(cache.read_text()).items()}
    model = None
    done = resumed(args)
    if done:
        results, folds_out, per_query = done["results"], done["folds"], done["per_query"]["runs"]
        baseline = done["first_stage"]
        started -= done["seconds"]
        print(f"resuming {args.output}: seeds {', '.join(folds_out)} already measured", flush=True)
    for seed in args.seeds:
        if str(seed) in folds_out:
            continue
        seed_everything(seed)
        config = RunConfig(dataset=args.dataset, split=args.split, reranker=args.reranker, seed=seed,
                           model=args.model, interpolate="auto", metrics=args.metrics, threads=args.threads,
                           overrides=tuple(args.set), k=args.k or None)
        plan = plan_run(config, dataset)
        if train_on:  # this seed's own model, as pipeline.run --train-dataset gets it (no other seed's scores)
            trained = transferred_model(dataclasses.replace(config, train_dataset=train_on))
            print(f"seed {seed}: the model trained on {train_on}: {trained.cached or trained.path}", flush=True)
            model, zero_shot_scores = trained.reranker, {}
        k = plan.depth or plan.k
        needed = {q for fold in plan.folds for q in (*fold.test, *fold.dev, *(fold.train if given else ()))}
        first = retrieve(dataset, plan.first_stage, k, [dataset.queries[q] for q in sorted(needed)], plan.settings)
        if given:
            model = model or plan.reranker_class.load(args.model)
            missing = {q: first[q] for q in first if q not in zero_shot_scores}
            if missing:
                zero_shot_scores.update(rerank(model, dataset, missing))
                if cache is not None:
                    write_json(cache, {q: [[h.doc_id, h.score] for h in hits] for q, hits in zero_shot_scores.items()})

            def scored(fold, queries):
                return {q: zero_shot_scores[q] for q in queries}
        else:
            reranker = trained_reranker(plan.training, dataset)

            def scored(fold, queries):
                fold_model = reranker.models[fold.test[0]] if hasattr(reranker, "models") else reranker
                return rerank(fold_model, dataset, {q: first[q] for q in queries})
        weights = {name: {} for name in rows if name != "alone"}
        alone: dict = {}
        seed_folds = []
        for fold in plan.folds:
            test = scored(fold, fold.test)
            alone.update(test)
            # every grid weight's per-query main metric on the test queries: any rule that picks a grid weight
            # per fold can be replayed from the file (benchmarks/safe_rule_replay.py) without re-scoring
            grid_values = fusion.per_query_values({q: first[q] for q in fold.test}, test, dataset.qrels,
                                                  plan.main_metric)
            dev = scored(fold, fold.dev)
            old, _ = fusion.tune_weight({q: first[q] for q in fold.dev}, dev, dataset.qrels, plan.main_metric)
            tuning = fusion.tuning_queries(fold, given)
            tuned_scores = dev if not given else scored(fold, tuning)
            safe = fusion.choose_weight({q: first[q] for q in tuning}, tuned_scores, dataset.qrels, plan.main_metric)
            entry = {"fold": fold.name, "test_queries": len(fold.test), "dev_queries": len(fold.dev),
                     "old_weight": old, "safe": {"weight": safe.weight, "tuned": safe.tuned,
                                                 "tuning_queries": safe.queries,
                                                 "held_out_gain": round(safe.held_out_gain, 6),
                                                 "p_one_sided": safe.p_value},
                     "test_values": {str(w): {q: round(v, 6) for q, v in per_q.items()}
                                     for w, per_q in grid_values.items()}}
            choice = {"old": old, "safe": safe.weight}
            if given:
                on_dev = fusion.choose_weight({q: first[q] for q in fold.dev}, dev, dataset.qrels, plan.main_metric)
                entry["safe_dev_only"] = {"weight": on_dev.weight, "tuned": on_dev.tuned,
                                          "tuning_queries": on_dev.queries,
                                          "held_out_gain": round(on_dev.held_out_gain, 6),
                                          "p_one_sided": on_dev.p_value}
                choice["safe-dev"] = on_dev.weight
            for name, w in choice.items():
                weights[name].update({q: w for q in fold.test})
            seed_folds.append(entry)
            print(f"seed {seed} {fold.name}: old {old:.2f}, safe {safe.describe()}", flush=True)
        folds_out[str(seed)] = seed_folds
        tested = [q for fold in plan.folds for q in fold.test]
        first_test = {q: first[q] for q in tested}
        evaluated = dataset.subset(tested)
        for name in weights:
            combined = fusion.interpolate(first_test, alone, weights[name])
            comparison = evaluation.compare({"first": first_test, "alone": alone, "combined": combined},
                                            evaluated.qrels, plan.metrics, "first")
            by_name = {e.name: e for e in comparison.evaluations}
            baseline = by_name["first"].aggregate
            kinds = [("combined", rows[name])] + ([("alone", rows["alone"])] if name == "old" else [])
            for kind, row in kinds:
                results[row]["seeds"].append(seed)
                # per query on the main metric: paired tests against other pipelines need them
                per_query.setdefault(row, {})[str(seed)] = {
                    q: round(v, 6) for q, v in by_name[kind].per_query[plan.main_metric].items()}
                for measure_name, value in by_name[kind].aggregate.items():
                    results[row].setdefault(measure_name, []).append(value)
                    results[row].setdefault(f"p:{measure_name}", []).append(
                        comparison.pvalues[kind][measure_name])
        if args.output:  # after every seed, so a stopped measurement keeps what it measured
            partial = "" if seed == args.seeds[-1] else f"partial: {len(folds_out)} of {len(args.seeds)} seeds"
            write_json(Path(args.output), summary_of(args, plan, started, baseline, results, folds_out, partial, per_query))
        print(f"seed {seed}: " + ", ".join(f"{row} {results[row][plan.main_metric][-1]:.4f}" for row in
                                           rows.values()) + f" (first stage {baseline[plan.main_metric]:.4f})",
              flush=True)
    return summary_of(args, plan, started, baseline, results, folds_out, per_query=per_query)


def resumed(args: argparse.Namespace) -> dict | None:
    """The partial result file a stopped run of this very command left at ``args.output`` (its seeds are
    kept, the missing ones measured), else ``None``: re-running a stopped command resumes it."""
    path = Path(args.output) if args.output else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not data.get("partial") or data.get("command") != command_line():
        return None
    return data


def command_line() -> str:
    """This invocation as recorded in a result file."""
    return shlex.join(["benchmarks/beyond_zero_shot.py", *sys.argv[1:]])


def summary_of(args, plan, started: float, baseline: dict, results: dict, folds_out: dict, partial: str = "",
               per_query: dict | None = None) -> dict:
    """The result file's content (``partial`` says how far a measurement still running has got)."""
    from pipeline.engine import fusion

    train_on = getattr(args, "train_dataset", None)
    given = bool(args.model) or bool(train_on)
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[:3]
    return {**({"partial": partial} if partial else {}),
            "command": command_line(),
            "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - started),
            "loadavg_at_end": " ".join(load), "dataset": args.dataset, "split": args.split,
            "reranker": args.reranker, "model": args.model,
            **({"train_dataset": train_on} if train_on else {}), "metric": plan.main_metric,
            "rules": {"old": "pipeline.engine.fusion.tune_weight on each fold's dev queries (best mean, any gain)",
                      "safe": f"pipeline.engine.fusion.choose_weight on each fold's tuning queries "
                              f"({'train + dev: a given checkpoint saw none' if given else 'dev'}), level "
                              f"{fusion.SAFE_LEVEL}; a positive unproven held-out gain moves {fusion.SHRINK:g} of the "
                              f"way from w=1 towards the tuned weight; no positive gain: w=1",
                      **({"safe-dev": "choose_weight on the dev queries only (to separate the two changes)"}
                         if given else {})},
            "first_stage": baseline, "results": results, "folds": folds_out,
            "per_query": {"metric": plan.main_metric, "runs": per_query or {}}}


def write_json(path: Path, data: dict) -> None:
    """``data`` as indented JSON at ``path``, atomically."""
    from pipeline.core.atomic import atomic_write

    with atomic_write(path) as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
