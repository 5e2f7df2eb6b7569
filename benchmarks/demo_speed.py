"""What issue 37's item 3 changed in ``make demo`` (HCAN on Microblog 2014), measured old against new in one
process, alternating, on one thread, with the load average at each round:

* ``scoring``: HCAN's forward in eval mode (what re-ranking the test and dev queries and the per-epoch dev
  evaluation run) with ``SemanticMatching.factored_scoring`` off (the BiLSTM over H = [U_c; U~_q; U_c*U~_q;
  U~_c*U~_q], the code before) and on (the attention-weighted blocks projected per query token); default
  HCAN (F = 256, d = 150, 4 layers), random weights, batches of 256 pairs shaped like Microblog's (queries
  of 3-10 tokens, tweets of 6-40 tokens after the 64-token cut);
* ``idf``: the IDF statistics of every query phrase over Microblog's 170k tweets, by the former
  ``IDFStatistics.build`` loop (every n-gram of every document) and the current one (positions where a
  wanted phrase starts), on the same tokenized collection (the counts are checked equal).

    python benchmarks/demo_speed.py [--rounds 3] [--batches 2] [--skip-idf]
        [--output benchmarks/results/speed/demo-speed]

Writes ``<output>.json`` and ``<output>.md`` (command, date, load averages, per-round times, medians).
Training is not compared: its dropout on H keeps the full projection (see docs/speed.md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TQDM_DISABLE", "1")

from pipeline.core.atomic import write_text  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "speed" / "demo-speed"


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def scoring_batches(count: int, seed: int = 0):
    """``count`` batches of 256 (query, tweet) pairs as HCANModel inputs (random ids, Microblog-like lengths)."""
    import torch

    from rerankers.hcan import HCANConfig

    generator = torch.Generator().manual_seed(seed)
    levels = HCANConfig().num_layers + 1
    batches = []
    for _ in range(count):
        batch, q_len, d_len = 256, 10, 40
        q_lengths = torch.randint(3, 11, (batch,), generator=generator)
        d_lengths = torch.randint(6, 41, (batch,), generator=generator).sort().values  # length-sorted batches
        q_ids = torch.randint(2, 20000, (batch, q_len), generator=generator)
        d_ids = torch.randint(2, 20000, (batch, d_len), generator=generator)
        q_mask = torch.arange(q_len)[None, :] < q_lengths[:, None]
        d_mask = torch.arange(d_len)[None, :] < d_lengths[:, None]
        # one query per 64 pairs, as a candidate list scored in one go
        q_ids, q_mask = q_ids[::64].repeat_interleave(64, 0), q_mask[::64].repeat_interleave(64, 0)
        idf = torch.rand(batch, levels, q_len, generator=generator) * 5
        batches.append((q_ids, q_mask, d_ids, d_mask, idf))
    return batches


def measure_scoring(rounds: int, count: int) -> dict:
    """Seconds per batch of 256 pairs, old and new, alternating; the largest score difference."""
    import torch

    from rerankers.hcan import HCANConfig, HCANModel, SemanticMatching

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = HCANModel(HCANConfig(), torch.randn(20000, 50) * 0.3).eval()
    batches = scoring_batches(count)

    def run(factored: bool):
        SemanticMatching.factored_scoring = factored
        start = time.perf_counter()
        with torch.no_grad():
            scores = [model(*batch) for batch in batches]
        return (time.perf_counter() - start) / len(batches), torch.cat(scores)

    run(True)  # warm-up
    rows, difference = [], 0.0
    for number in range(rounds):
        old_s, old_scores = run(False)
        new_s, new_scores = run(True)
        difference = max(difference, float((old_scores - new_scores).abs().max()))
        rows.append({"round": number + 1, "old_s_per_batch": round(old_s, 4), "new_s_per_batch": round(new_s, 4),
                     "load": load()})
        print(rows[-1], flush=True)
    SemanticMatching.factored_scoring = True
    old = statistics.median(r["old_s_per_batch"] for r in rows)
    new = statistics.median(r["new_s_per_batch"] for r in rows)
    return {"rows": rows, "old_median_s": old, "new_median_s": new, "speedup": round(old / new, 3),
            "max_score_difference": difference}


def former_idf_build(docs, phrases, max_n):
    """``IDFStatistics.build`` as it was before issue 37 (every n-gram of every document), for comparison."""
    from pipeline.core.vocabulary import IDFStatistics, ngrams

    wanted = {tuple(p) for p in phrases if 2 <= len(p) <= max_n}
    lengths = sorted({len(p) for p in wanted})
    word_df: Counter = Counter()
    phrase_df: Counter = Counter()
    num_docs = 0
    for num_docs, tokens in enumerate(docs, 1):
        word_df.update(set(tokens))
        # every n-gram of every document is built and looked up: the cost the new build avoids
        phrase_df.update({g for n in lengths for g in ngrams(tokens, n) if g in wanted})
    return IDFStatistics(num_docs, dict(word_df), dict(phrase_df))


def measure_idf(rounds: int) -> dict:
    """Seconds of the former and the current IDF build over Microblog, alternating."""
    from pipeline.core.datasets import load_dataset
    from pipeline.core.vocabulary import IDFStatistics, ngrams, tokenize

    dataset = load_dataset("microblog")
    docs = [tokenize(d.text) for d in dataset.docs_iter()]
    phrases = [g for q in dataset.queries.values() for n in (2, 3, 4, 5) for g in ngrams(tokenize(q.text), n)]
    rows = []
    for number in range(rounds):
        start = time.perf_counter()
        old = former_idf_build(docs, phrases, 5)
        old_s = time.perf_counter() - start
        start = time.perf_counter()
        new = IDFStatistics.build(docs, phrases, max_n=5)
        new_s = time.perf_counter() - start
        if old != new:
            raise SystemExit("error: the two IDF builds differ")
        rows.append({"round": number + 1, "old_s": round(old_s, 2), "new_s": round(new_s, 2), "load": load()})
        print(rows[-1], flush=True)
    old = statistics.median(r["old_s"] for r in rows)
    new = statistics.median(r["new_s"] for r in rows)
    return {"rows": rows, "documents": len(docs), "old_median_s": old, "new_median_s": new,
            "speedup": round(old / new, 3)}


def main(argv=None) -> int:
    """Measure and write the result files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2, help="scoring batches of 256 pairs per round")
    parser.add_argument("--skip-idf", action="store_true", help="leave out the IDF comparison (reads Microblog)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    import torch

    result = {"command": "python benchmarks/demo_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": load(),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "torch": torch.__version__, "threads": 1}
    result["scoring"] = measure_scoring(args.rounds, args.batches)
    if not args.skip_idf:
        result["idf"] = measure_idf(args.rounds)
    result["load_end"] = load()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.output.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    scoring = result["scoring"]
    lines = [f"# HCAN demo pieces, before and after issue 37 ({result['date']}, {result['machine']}, torch "
             f"{result['torch']}, 1 thread)", "", f"Command: `{result['command']}`; load average at start "
             f"{result['load_start']}, at end {result['load_end']} (a shared, loaded machine: compare the ratios, "
             "not the seconds).", "",
             "| piece | before (median s) | after (median s) | speed-up | rounds (load 1/5/15 min) |", "|---|---|---|---|---|",
             f"| HCAN scoring, per batch of 256 pairs | {scoring['old_median_s']:.3f} | {scoring['new_median_s']:.3f} | "
             f"{scoring['speedup']:.2f}x | " + "; ".join(f"{r['old_s_per_batch']:.2f}/{r['new_s_per_batch']:.2f} "
                                                          f"({r['load'][0]})" for r in scoring["rows"]) + " |"]
    if "idf" in result:
        idf = result["idf"]
        lines.append(f"| IDF of the query phrases over {idf['documents']:,} tweets | {idf['old_median_s']:.1f} | "
                     f"{idf['new_median_s']:.1f} | {idf['speedup']:.2f}x | " + "; ".join(
                         f"{r['old_s']:.1f}/{r['new_s']:.1f} ({r['load'][0]})" for r in idf["rows"]) + " |")
    lines += ["", f"Largest score difference between the two scoring paths: {scoring['max_score_difference']:.1e}."]
    write_text(args.output.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
