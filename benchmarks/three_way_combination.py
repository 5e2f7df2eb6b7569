"""Three-way combination: first stage + zero-shot bi-encoder + a trained seed model (KNRM, HCAN, DRMM), each step
under the safe rule of ``--interpolate auto``, against the two-way first stage + bi-encoder.

::

    python benchmarks/three_way_combination.py --dataset vaswani --reranker knrm --seeds 1 2 3 --threads 1 \\
        --output benchmarks/results/vaswani/three-way-bi-encoder-knrm.json

Per seed and fold (the dataset's protocol, as ``reproduce.py`` uses it):

1. two-way: the zero-shot bi-encoder (``all-MiniLM-L6-v2``, it saw none of the collection) combined with the
   first stage, its weight chosen by :func:`pipeline.engine.fusion.choose_weight` on the fold's train + dev
   queries, exactly the ``bi-encoder+safe`` row of ``beyond_zero_shot.py measure``;
2. three-way: that two-way ranking combined with the fold's trained seed model, the weight chosen by
   ``choose_weight`` again with the two-way ranking in the first stage's place, on the fold's dev queries only
   (the model was trained on the others): the seed model enters only when its cross-validated gain over the
   two-way ranking is significant, else the two-way ranking stays.

With ``--rule fallback`` (``--zero-shot-rule fallback`` of the command) step 2 is instead the seed model combined
with the first stage, its weight chosen on the dev queries, taken only where its gain is proven (verdict
``kept``); elsewhere the fold keeps the two-way ranking. Meant for a seed model fine-tuned from the zero-shot one
(``--reranker bi-encoder``); the result file's ``rule`` says which step 2 ran (a file without it: ``stack``).
With ``--rule anchor`` step 2 is the seed model combined with the first stage at step 1's weight, nothing tuned on
the dev queries (:data:`pipeline.engine.stacking.ANCHOR`, for the same fine-tuned bi-encoder).

Reported: the main metric of both on the test queries, per seed, and the paired two-sided t-test of three-way
against two-way; per-query values are kept. The zero-shot scores can be cached between invocations
(``--score-cache``). Seeds run in separate processes are put into one file with
``python benchmarks/three_way_combination.py --merge PART.json ... --output MERGED.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.engine.stacking_rules import RULES, STACK  # noqa: E402  (a constants module: no heavy import)

ZERO_SHOT = "all-MiniLM-L6-v2"


def measure(args: argparse.Namespace) -> dict:
    """The three-way and two-way combinations of ``args`` over ``args.seeds``: the result dict."""
    import torch
    from scipy import stats

    from pipeline.core import evaluation
    from pipeline.core.datasets import load_dataset
    from pipeline.core.records import ScoredDoc
    from pipeline.core.runtime import seed_everything
    from pipeline.engine.config import RunConfig
    from pipeline.engine.model_cache import trained_reranker
    from pipeline.engine.plan import plan_run
    from pipeline.engine.context import FirstStageContext
    from pipeline.engine.stacking import stack_on_zero_shot
    from pipeline.engine.stages import rerank
    from rerankers.bi_encoder import BiEncoderReranker

    os.environ["PIPELINE_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    started = time.time()
    dataset = load_dataset(args.dataset)
    cache = Path(args.score_cache) if args.score_cache else None
    zero: dict = {}
    if cache is not None and cache.is_file():
        zero = {q: [ScoredDoc(q, d, s) for d, s in hits] for q, hits in json.loads(cache.read_text()).items()}
    bi_model = None
    out: dict = {"seeds": [], "two_way": [], "three_way": [], "p_three_vs_two": [], "first_stage": [],
                 "folds": {}, "per_query": {"two_way": {}, "three_way": {}, "first_stage": {}}}
    metric = None
    for seed in args.seeds:
        seed_everything(seed)
        config = RunConfig(dataset=args.dataset, split=args.split, reranker=args.reranker, seed=seed,
                           interpolate="auto", threads=args.threads, overrides=tuple(args.set))
        plan = plan_run(config, dataset)
        metric = plan.main_metric
        if args.train_only:  # fill the model cache (e.g. beside another process scoring the zero-shot model)
            trained_reranker(plan.training, dataset)
            print(f"seed {seed}: {args.reranker} trained and cached", flush=True)
            continue
        k = plan.depth or plan.k
        needed = sorted({q for fold in plan.folds for q in (*fold.test, *fold.dev, *fold.train)})
        context = FirstStageContext(dataset, plan.first_stage, plan.settings)
        first = context.search([dataset.queries[q] for q in needed], k)
        missing = {q: first[q] for q in first if q not in zero}
        if missing:
            bi_model = bi_model or BiEncoderReranker.load(ZERO_SHOT)
            zero.update(rerank(bi_model, dataset, missing))
            if cache is not None:
                from safe_combination_measure import write_json

                write_json(cache, {q: [[h.doc_id, h.score] for h in hits] for q, hits in zero.items()})
        seed_model = trained_reranker(plan.training, dataset)
        tested = [q for fold in plan.folds for q in fold.test]
        top = {q: first[q] for q in tested}
        # the steps of --zero-shot-base, with the zero-shot scores of the cache
        stacked = stack_on_zero_shot(plan.folds, None, seed_model, dataset, context, k, top,
                                     rerank(seed_model, dataset, top), metric, zero_scores=zero, rule=args.rule)
        two_way, three_way, folds = stacked.zero_shot_combined, stacked.final, []
        for name, (bi_choice, seed_choice) in stacked.choices.items():
            # stack: the seed model's weight against the two-way ranking; fallback: against the first stage
            weight_key = "weight_of_two_way" if args.rule == STACK else "weight_of_first_stage"
            folds.append({"fold": name, "bi_encoder_weight_of_first_stage": bi_choice.weight,
                          "seed_model": {weight_key: seed_choice.weight, "tuned": seed_choice.tuned,
                                         "verdict": seed_choice.verdict, "dev_queries": seed_choice.queries,
                                         "held_out_gain": round(seed_choice.held_out_gain, 6),
                                         "p_one_sided": seed_choice.p_value}})
            print(f"seed {seed} {name}: bi-encoder w={bi_choice.weight:.2f}; {args.reranker}: "
                  f"{seed_choice.describe()}", flush=True)
        comparison = evaluation.compare({"first": {q: first[q] for q in tested}, "two": two_way, "three": three_way},
                                        dataset.subset(tested).qrels, metric, "first")
        by_name = {e.name: e for e in comparison.evaluations}
        values = {name: by_name[name].per_query[metric] for name in ("first", "two", "three")}
        common = sorted(set(values["two"]) & set(values["three"]))
        a, b = [values["three"][q] for q in common], [values["two"][q] for q in common]
        p = 1.0 if a == b else float(stats.ttest_rel(a, b).pvalue)
        out["seeds"].append(seed)
        out["first_stage"].append(by_name["first"].aggregate[metric])
        out["two_way"].append(by_name["two"].aggregate[metric])
        out["three_way"].append(by_name["three"].aggregate[metric])
        out["p_three_vs_two"].append(p)
        out["folds"][str(seed)] = folds
        for name, key in (("two", "two_way"), ("three", "three_way"), ("first", "first_stage")):
            out["per_query"][key][str(seed)] = {q: round(v, 6) for q, v in values[name].items()}
        print(f"seed {seed}: first stage {out['first_stage'][-1]:.4f}, two-way {out['two_way'][-1]:.4f}, "
              f"three-way {out['three_way'][-1]:.4f} (p = {p:.3g})", flush=True)
        if args.output:
            write(args, out, metric, started, partial=seed != args.seeds[-1])
    return write(args, out, metric, started) if args.output and not args.train_only else out


def write(args, out: dict, metric: str, started: float, partial: bool = False) -> dict:
    """Write the result file atomically (after every seed, so a stopped run keeps what it measured)."""
    from safe_combination_measure import write_json

    with open("/proc/loadavg") as handle:
        load = " ".join(handle.read().split()[:3])
    data = {**({"partial": f"{len(out['seeds'])} of {len(args.seeds)} seeds"} if partial else {}),
            "command": shlex.join(["benchmarks/three_way_combination.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - started), "loadavg_at_end": load,
            "dataset": args.dataset, "split": args.split, "seed_model": args.label or args.reranker,
            "zero_shot": ZERO_SHOT, "rule": args.rule,
            "metric": metric, "mean": {"two_way": statistics.mean(out["two_way"]),
                                       "three_way": statistics.mean(out["three_way"])}, **out}
    write_json(Path(args.output), data)
    return data


def merge(paths: list[Path], output: Path) -> dict:
    """One result file from files of the same measurement (dataset, split, seed model, metric) over disjoint
    seeds, e.g. seeds run in separate processes or a run stopped after some seeds and the rest: per-seed lists and per-query values side by side, in seed
    order; the commands joined by `` ; ``; ``seconds`` summed."""
    from safe_combination_measure import write_json

    parts = [json.loads(Path(path).read_text(encoding="utf-8")) for path in paths]
    for part in parts:
        part.setdefault("rule", STACK)  # files from before --rule
    same = ("dataset", "split", "seed_model", "zero_shot", "rule", "metric")
    for path, part in zip(paths[1:], parts[1:]):
        if any(part[key] != parts[0][key] for key in same):
            raise SystemExit(f"{path}: not the same measurement as {paths[0]} ({', '.join(same)} differ)")
    seeds = [seed for part in parts for seed in part["seeds"]]  # a file holds only seeds it finished
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"{', '.join(map(str, paths))}: a seed is in more than one file")
    order = sorted(range(len(seeds)), key=seeds.__getitem__)
    per_seed = {key: [value for part in parts for value in part[key]]
                for key in ("two_way", "three_way", "p_three_vs_two", "first_stage")}
    merged = {**{key: parts[0][key] for key in same}, "command": " ; ".join(part["command"] for part in parts),
              "date": max(part["date"] for part in parts), "seconds": sum(part["seconds"] for part in parts),
              "loadavg_at_end": " / ".join(part["loadavg_at_end"] for part in parts),
              "seeds": [seeds[i] for i in order], **{key: [values[i] for i in order] for key, values in per_seed.items()},
              "folds": {key: value for part in parts for key, value in part["folds"].items()},
              "per_query": {name: {seed: values for part in parts for seed, values in part["per_query"][name].items()}
                            for name in ("two_way", "three_way", "first_stage")}}
    merged["mean"] = {"two_way": statistics.mean(merged["two_way"]), "three_way": statistics.mean(merged["three_way"])}
    write_json(Path(output), merged)
    return merged


def main(argv=None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["--merge"]:  # --merge PART.json ... --output MERGED.json
        *parts, flag, output = arguments[1:]
        if flag != "--output" or not parts:
            raise SystemExit("usage: three_way_combination.py --merge PART.json ... --output MERGED.json")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        merge([Path(part) for part in parts], Path(output))
        print(f"wrote {output}")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split")
    parser.add_argument("--reranker", required=True, help="the trained seed model (knrm, hcan, drmm)")
    parser.add_argument("--label", help="the seed model's name in the result (default: --reranker), e.g. to tell "
                                        "a recipe given by --set apart")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--rule", choices=RULES, default=STACK,
                        help="step 2: the seed model on top of the two-way ranking (stack), or with the first stage "
                             "where proven, else the two-way ranking (fallback), or with the first stage at the "
                             "two-way ranking's weight (anchor); --zero-shot-rule of the command")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--score-cache", help="JSON file keeping the zero-shot bi-encoder's scores between runs")
    parser.add_argument("--output", help="the result file (required unless --train-only)")
    parser.add_argument("--train-only", action="store_true",
                        help="only train the seeds' models into PIPELINE_HOME's model cache, so that a later "
                             "measurement (e.g. one that shares a --score-cache) only scores")
    args = parser.parse_args(argv)
    if not args.train_only and not args.output:
        parser.error("--output is required (unless --train-only)")
    from pipeline.core.logs import configure_logging

    # hours of training and scoring: the project's progress (a bar on a terminal, a periodic line in a log
    # file) and its training lines on stderr; the results on stdout
    configure_logging()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    measure(args)
    if args.output and not args.train_only:
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
