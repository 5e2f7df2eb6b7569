"""Scoring speed: one batch per query against batches filled across queries (``score_many``), in float32
and in bfloat16 (``--bf16``), HCAN on Cranfield before and after its scoring fixes, and fp32 against int8
and bfloat16 for the cross-encoder.

    python benchmarks/scoring_speed.py [--wikiqa-threads 1 2] [--hcan-threads 2 1] [--hcan-queries 20] \
        [--int8-pairs 1000] [--output benchmarks/results/speed/scoring.md]

Everything runs in one process and every comparison alternates its two sides over blocks of queries, so
that both sides see the same load: on a shared machine only the ratios are meaningful; the seconds say how
loaded it was (the report prints the load average). Weights are untrained everywhere (speed does not
depend on them): the models are prepared (encoder loaded, or vocabulary, IDF and GloVe embeddings built),
not fitted.

1. WikiQA ``test`` (243 questions, all their shipped candidates): the cross-encoder and ADDAX on the
   packaged MiniLM, :func:`pipeline.run.rerank` query by query (``batch_queries=False``: one ``score`` call
   and at most one batch per question, what ``rerank`` did before) against across queries (``score_many``
   over chunks of queries, batches of ``score_batch_size`` = 64 pairs), the latter also in bfloat16
   (:meth:`~rerankers.neural.TorchReranker.score_in_bf16`). ADDAX's document cache is emptied before each
   measured block, so every side encodes every candidate once. For each ``--wikiqa-threads``.
2. HCAN (deep encoder, full matching, F = 256, documents cut to 64 tokens) prepared on Cranfield, re-ranking
   the BM25 top 100 of the first ``--hcan-queries`` queries, for each ``--hcan-threads``: the code before this
   change (packed LSTMs in every semantic-matching layer, the concatenated LSTM input copied before packing,
   every pair's query and document encoded anew; reproduced here by swapping those three methods back),
   query by query, against the code now, query by query and across queries at the default scoring batch
   (256 pairs) and at 1,024 pairs (``--batch-size 1024``), and query by query and across queries in
   bfloat16.
3. int8 and bfloat16: the cross-encoder on the first ``--int8-pairs`` BM25 pairs of TREC DL 2019 (queries by
   id, each one's top 100), one thread, ``score_many`` with float32 weights against the same model after
   :meth:`~rerankers.transformer_base.TransformerReranker.quantize_int8`, and against it in bfloat16.

bfloat16 is fast only on CPUs with AMX or AVX512-BF16; the report says whether this one has them. With
``--keep-freed-memory`` the process first makes the allocator setting the command lines make
(:func:`pipeline.core.runtime.keep_freed_memory`); without it, it measures what a library user gets.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from common import publish  # noqa: E402
from pipeline.core.datasets import load_dataset  # noqa: E402
from pipeline.core.runtime import keep_freed_memory, native_bf16  # noqa: E402
from pipeline.engine.stages import rerank, retrieve  # noqa: E402
from rerankers.training.data import RankingData  # noqa: E402
from rerankers import reranker_class  # noqa: E402

WIKIQA_GOAL = 3.0          # transformer scoring on WikiQA test, across queries / query by query
HCAN_GOAL_SECONDS = 0.2    # HCAN seconds per Cranfield query (top 100), 2 threads


def set_threads(threads: int) -> None:
    """torch's intra-op threads, for this process and for the re-rankers' own ``set_threads``."""
    os.environ["PIPELINE_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def blocks(items: list, size: int) -> list[list]:
    """``items`` in consecutive blocks of ``size``."""
    return [items[start : start + size] for start in range(0, len(items), size)]


def alternate(sides: dict, parts: list, before_each=None) -> tuple[dict, dict]:
    """Run every side on every part, sides alternating within each part; ``(seconds, results)`` per side
    (seconds summed over the parts, results concatenated)."""
    seconds = dict.fromkeys(sides, 0.0)
    results: dict = {name: [] for name in sides}
    for part in parts:
        for name, function in sides.items():
            if before_each is not None:
                before_each()
            started = time.perf_counter()
            results[name].append(function(part))
            seconds[name] += time.perf_counter() - started
    return seconds, results


def in_bf16(reranker, score):
    """``score`` (a function of one block of work) run with ``reranker`` scoring in bfloat16."""
    def side(part):
        reranker.score_in_bf16()
        try:
            return score(part)
        finally:
            reranker.score_in_bf16(False)
    return side


def largest_difference(first, second) -> float:
    """The largest absolute difference between two lists of score lists."""
    return max((abs(a - b) for xs, ys in zip(first, second) for a, b in zip(xs, ys)), default=0.0)


# ------------------------------------------------------------------------------------------ WikiQA


def wikiqa_rows(threads: int) -> list[dict]:
    """Per-query against across-query re-ranking of WikiQA test with the cross-encoder and ADDAX."""
    set_threads(threads)
    dataset = load_dataset("wikiqa")
    query_ids = sorted(q for q in dataset.splits["test"] if dataset.first_stage.get(q))
    first = {q: dataset.first_stage[q] for q in query_ids}
    pairs = sum(len(hits) for hits in first.values())
    # 9 blocks of 27 questions (~260 pairs: four full batches of 64 across queries), sides alternating
    parts = [{q: first[q] for q in block} for block in blocks(query_ids, 27)]
    rows = []
    for name in ("cross-encoder", "addax"):
        load = os.getloadavg()[0]
        reranker = reranker_class(name).from_options({}, seed=1)
        reranker.prepare()
        rerank(reranker, dataset, dict(list(first.items())[:2]))                  # warm-up
        def across(part, r=reranker):
            return rerank(r, dataset, part)

        sides = {"query by query": lambda part, r=reranker: rerank(r, dataset, part, batch_queries=False),
                 "across queries": across, "across queries, bf16": in_bf16(reranker, across)}
        seconds, results = alternate(sides, parts, before_each=reranker.clear_cache)
        scores = {side: [[h.score for h in hits] for run in runs for hits in run.values()]
                  for side, runs in results.items()}
        rows.append({"model": name, "threads": threads, "queries": len(query_ids), "pairs": pairs,
                     "per_query_s": seconds["query by query"], "across_s": seconds["across queries"],
                     "bf16_s": seconds["across queries, bf16"],
                     "batch": reranker.train_config.score_batch_size, "load": (load, os.getloadavg()[0]),
                     "drift": largest_difference(scores["query by query"], scores["across queries"]),
                     "bf16_drift": largest_difference(scores["query by query"], scores["across queries, bf16"])})
        del reranker
    return rows


# -------------------------------------------------------------------------------------------- HCAN


@contextlib.contextmanager
def hcan_code_before_this_change():
    """HCAN's scoring as it was before cross-query batching: the three methods this change touched, put
    back as they were (``MaskedBiLSTM.forward`` always packed, ``SemanticMatching.forward`` concatenating
    and masking the LSTM input, ``HCANModel._levels`` encoding every pair's texts)."""
    from rerankers import blocks as b
    from rerankers import hcan as h

    def lstm_forward(self, x, mask):
        return self._packed(x, mask, b.lengths_from_mask(mask))

    def semantic_forward(self, u_q, u_c, q_mask, d_mask):
        scores = self.attention(u_q, u_c)
        q_aware_c, c_summary = b.bidaf_coattention(scores, u_q, u_c, q_mask, d_mask)
        c_summary = c_summary.unsqueeze(1)
        enhanced = torch.cat([u_c, q_aware_c, u_c * q_aware_c, c_summary * q_aware_c], dim=-1)
        enhanced = b.masked_fill_padding(self.dropout(enhanced), d_mask)
        outputs, last = self.lstm(enhanced, d_mask)
        if self.pooling == "last":
            return last
        return torch.cat([b.masked_max(outputs, d_mask, dim=1), b.masked_mean(outputs, d_mask, dim=1)], dim=-1)

    def levels(self, ids, mask):
        first = [self._embed(ids, mask)]
        return first + self.encoder(first[0], mask)

    saved = (b.MaskedBiLSTM.forward, h.SemanticMatching.forward, h.HCANModel._levels)
    b.MaskedBiLSTM.forward, h.SemanticMatching.forward, h.HCANModel._levels = lstm_forward, semantic_forward, levels
    try:
        yield
    finally:
        b.MaskedBiLSTM.forward, h.SemanticMatching.forward, h.HCANModel._levels = saved


def hcan_rows(threads: int, queries: int) -> tuple[list[dict], dict]:
    """HCAN on Cranfield's BM25 top 100: the code before against the code now (seconds per query)."""
    set_threads(threads)
    dataset = load_dataset("cranfield")
    first = retrieve(dataset, "bm25", k=100)
    query_ids = list(first)[:queries]
    store = dataset.doc_store()
    work = [(dataset.queries[q], [store[h.doc_id] for h in first[q]]) for q in query_ids]
    reranker = reranker_class("hcan").from_options({}, seed=1)
    reranker.prepare(RankingData.from_dataset(dataset, list(dataset.queries)[:20], first), dataset)
    reranker.score(*work[-1])                                                      # warm-up

    def before(part):
        with hcan_code_before_this_change():
            return [reranker.score(query, docs) for query, docs in part]

    def query_by_query(part):
        return [reranker.score(query, docs) for query, docs in part]

    sides = {
        "before, query by query": before,
        "now, query by query": query_by_query,
        "now, across queries (batch 256)": lambda part: reranker.score_many(part),
        "now, across queries (batch 1,024)": lambda part: reranker.score_many(part, batch_size=1024),
        "now, query by query, bf16": in_bf16(reranker, query_by_query),
        "now, across queries (batch 256), bf16": in_bf16(reranker, reranker.score_many),
    }
    load = os.getloadavg()[0]
    seconds, results = alternate(sides, blocks(work, 2))
    flat = {side: [scores for part in parts for scores in part] for side, parts in results.items()}
    reference = flat["before, query by query"]
    rows = [{"run": side, "s_per_query": seconds[side] / len(work),
             "speedup": seconds["before, query by query"] / seconds[side],
             "drift": largest_difference(reference, flat[side])} for side in sides]
    lengths = [reranker.pair_length(q, d) for q, docs in work for d in docs]
    info = {"queries": len(work), "pairs": len(lengths), "threads": threads,
            "full_length": sum(n == reranker.text_config.max_doc_length for n in lengths) / len(lengths),
            "distinct_docs": len({d.doc_id for _, docs in work for d in docs}), "load": (load, os.getloadavg()[0])}
    return rows, info


# -------------------------------------------------------------------------------------------- int8


def dl19_pairs(pairs: int) -> tuple[list, int]:
    """The first ``pairs`` BM25 pairs of TREC DL 2019 (queries by id, each one's hits by score) as
    ``([(query, [doc, ...]), ...], number of pairs)``."""
    dataset = load_dataset("dl19")
    store = dataset.doc_store()
    work, total = [], 0
    for query_id in sorted(dataset.first_stage):
        hits = sorted(dataset.first_stage[query_id], key=lambda h: (-h.score, h.doc_id))[: pairs - total]
        work.append((dataset.queries[query_id], [store[h.doc_id] for h in hits]))
        total += len(hits)
        if total >= pairs:
            break
    return work, total


def int8_row(pairs: int) -> dict:
    """fp32 against int8 cross-encoder scoring of ``pairs`` DL19 BM25 pairs, one thread."""
    set_threads(1)
    work, total = dl19_pairs(pairs)
    reranker = reranker_class("cross-encoder").from_options({}, seed=1)
    reranker.prepare()
    quantized = reranker_class("cross-encoder").from_options({}, seed=1)
    quantized.prepare()                   # the same seed: the same weights before quantization
    quantized.quantize_int8()
    halved = reranker_class("cross-encoder").from_options({}, seed=1)
    halved.prepare()
    halved.score_in_bf16()
    for model in (reranker, quantized, halved):
        model.score_many(work[:1])                                                 # warm-up
    sides = {"fp32": reranker.score_many, "int8": quantized.score_many, "bf16": halved.score_many}
    seconds, results = alternate(sides, blocks(work, max(1, len(work) // 2)))
    scores = {side: [s for part in parts for s in part] for side, parts in results.items()}
    flat = {side: torch.tensor([x for values in lists for x in values]) for side, lists in scores.items()}

    def ranks(values):
        return values.argsort().argsort().double()

    def spearman(side):
        correlations = []
        for a, b in zip(scores["fp32"], scores[side]):
            ra, rb = ranks(torch.tensor(a)), ranks(torch.tensor(b))
            correlations.append(float(((ra - ra.mean()) * (rb - rb.mean())).sum()
                                      / (ra.std() * rb.std() * (len(ra) - 1))))
        return sum(correlations) / len(correlations)

    return {"pairs": total, "queries": len(work), "fp32_s": seconds["fp32"], "int8_s": seconds["int8"],
            "bf16_s": seconds["bf16"], "spearman": spearman("int8"), "bf16_spearman": spearman("bf16"),
            "max_diff": float((flat["fp32"] - flat["int8"]).abs().max()),
            "bf16_max_diff": float((flat["fp32"] - flat["bf16"]).abs().max()), "spread": float(flat["fp32"].std())}


# -------------------------------------------------------------------------------------------- main


def report(wikiqa: list[dict], hcan: list[tuple[list[dict], dict]], int8: dict, load: tuple, kept: bool) -> str:
    """The Markdown report of the three comparisons."""
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, bfloat16 matrix "
               f"instructions: {'yes' if native_bf16() else 'no'}, freed memory kept (as the command lines "
               f"do): {'yes' if kept else 'no'}")
    lines = [f"# Scoring speed ({time.strftime('%Y-%m-%d')}, {machine}; load average at the start "
             f"{load[0]:.1f}, at the end {load[1]:.1f})", "",
             "One process; the two sides of each comparison alternate over blocks of queries. Untrained "
             "weights (speed does not depend on them). Seconds depend on the machine's load; ratios compare "
             "runs under the same load.", "",
             "## Transformers on WikiQA test: query by query vs across queries", "",
             "| model | threads | queries / pairs | query by query (s) | across queries (s) | speed-up | "
             "largest score difference | across queries, bf16 (s) | speed-up | largest score difference | "
             "load average |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in wikiqa:
        lines.append(f"| {row['model']} | {row['threads']} | {row['queries']} / {row['pairs']} | "
                     f"{row['per_query_s']:.1f} | {row['across_s']:.1f} | "
                     f"**{row['per_query_s'] / row['across_s']:.2f}x** | {row['drift']:.1e} | "
                     f"{row['bf16_s']:.1f} | **{row['per_query_s'] / row['bf16_s']:.2f}x** | "
                     f"{row['bf16_drift']:.1e} | {row['load'][0]:.1f} -> {row['load'][1]:.1f} |")
    lines += ["", f"Goal: >= {WIKIQA_GOAL:.0f}x (batches of {wikiqa[0]['batch']} pairs across queries; speed-ups "
              "against query by query in float32).", ""]
    for rows, info in hcan:
        lines += [f"## HCAN on Cranfield BM25 top 100 ({info['queries']} queries, {info['pairs']} pairs, "
                  f"{info['distinct_docs']} distinct documents, {info['full_length']:.0%} of the pairs' documents "
                  f"at the 64-token cap; {info['threads']} thread{'s' if info['threads'] != 1 else ''}; load "
                  f"average {info['load'][0]:.1f} -> {info['load'][1]:.1f})", "",
                  "| run | seconds per query | speed-up | largest score difference |", "|---|---|---|---|"]
        for row in rows:
            lines.append(f"| {row['run']} | {row['s_per_query']:.3f} | {row['speedup']:.2f}x | {row['drift']:.1e} |")
        best = min(row["s_per_query"] for row in rows)
        goal = (f"Goal: < {HCAN_GOAL_SECONDS} s per query with 2 threads: best {best:.3f} s "
                f"({'met' if best < HCAN_GOAL_SECONDS else 'NOT met'})." if info["threads"] == 2 else
                f"(The goal is for 2 threads; best here {best:.3f} s.)")
        lines += ["", goal, ""]
    lines += [f"## int8 and bfloat16 cross-encoder on TREC DL 2019 BM25 pairs (1 thread, {int8['pairs']} pairs, "
              f"{int8['queries']} queries, across queries)", "",
              "| arithmetic | seconds | pairs/s | speed-up | largest score change | per-query Spearman vs fp32 |",
              "|---|---|---|---|---|---|",
              f"| fp32 | {int8['fp32_s']:.1f} | {int8['pairs'] / int8['fp32_s']:.1f} | | | |",
              f"| int8 (dynamic, nn.Linear) | {int8['int8_s']:.1f} | {int8['pairs'] / int8['int8_s']:.1f} | "
              f"**{int8['fp32_s'] / int8['int8_s']:.2f}x** | {int8['max_diff']:.3f} | {int8['spearman']:.3f} |",
              f"| bf16 (`--bf16`: a bfloat16 copy of the model) | {int8['bf16_s']:.1f} | {int8['pairs'] / int8['bf16_s']:.1f} | "
              f"**{int8['fp32_s'] / int8['bf16_s']:.2f}x** | {int8['bf16_max_diff']:.3f} | "
              f"{int8['bf16_spearman']:.3f} |", "",
              f"With these untrained weights the scores hardly differ between documents (standard deviation "
              f"{int8['spread']:.3f}), so the rank correlations say little about effectiveness: see BENCHMARKS.md "
              f"for MAP with trained models."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hcan-threads", type=int, nargs="+", default=[2],
                        help="thread counts for HCAN (default 2)")
    parser.add_argument("--wikiqa-threads", type=int, nargs="+", default=[2],
                        help="thread counts for the WikiQA comparison (default 2)")
    parser.add_argument("--hcan-queries", type=int, default=20, help="Cranfield queries for HCAN (default 20)")
    parser.add_argument("--int8-pairs", type=int, default=1000, help="DL19 pairs for int8 (default 1000)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="make the command lines' allocator setting first (keep_freed_memory)")
    parser.add_argument("--output", help="also write the Markdown report here")
    args = parser.parse_args()
    kept = keep_freed_memory() if args.keep_freed_memory else False
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore", category=UserWarning)
    start_load = os.getloadavg()[0]
    wikiqa = [row for threads in args.wikiqa_threads for row in wikiqa_rows(threads)]
    hcan = [hcan_rows(threads, args.hcan_queries) for threads in args.hcan_threads]
    int8 = int8_row(args.int8_pairs)
    text = report(wikiqa, hcan, int8, (start_load, os.getloadavg()[0]), kept)
    publish(text, args.output)


if __name__ == "__main__":
    main()
