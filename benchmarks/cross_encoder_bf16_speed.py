"""The cross-encoder's bf16 scoring against sentence-transformers' ``CrossEncoder`` and against the CPU's
measured matrix-multiply peak (issue 37, item 1).

    python benchmarks/cross_encoder_bf16_speed.py [--pairs 600] [--output FILE.md]

In one process, one thread, the first ``--pairs`` BM25 pairs of TREC DL 2019 (queries by id, each one's top
100 by score) are scored by three sides, alternating over blocks of queries so that all three see the same
load: the project's cross-encoder in bfloat16 (``score_in_bf16``: a bfloat16 copy of the module, what
``--precision auto`` scores with where the CPU has native bf16), sentence-transformers' ``CrossEncoder`` on
the same encoder (its defaults: ``predict`` in batches of 32, each pair truncated to the project's input
length) in float32, and the same ``CrossEncoder`` under CPU bfloat16 autocast. Weights are untrained (a
fresh head on the packaged MiniLM in both: speed does not depend on them).

The achieved rate counts the encoder's matrix products over each pair's real tokens (no padding):
per layer ``2 x (4 L h^2 + 2 L h f + 2 L^2 h)`` FLOPs for ``L`` tokens, hidden size ``h`` and feed-forward
size ``f``; the peak is the best of 5 timed ``[4096, h] x [h, f]`` products (MiniLM's feed-forward shape)
on one thread, in bfloat16 and in float32. bfloat16 is fast only on CPUs with AMX or AVX512-BF16; the
result says whether this one has them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, machine_line, publish  # noqa: E402


def matmul_peak(dtype, rows: int, inner: int, outer: int, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` timed ``[rows, inner] x [inner, outer]`` products in ``dtype``."""
    import torch

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, inner, generator=generator).to(dtype)
    b = torch.randn(inner, outer, generator=generator).to(dtype)
    torch.matmul(a, b)  # warm-up: the kernel chosen, the pages touched
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * rows * inner * outer / best / 1e9


def encoder_flops(lengths, layers: int, hidden: int, intermediate: int) -> float:
    """FLOPs of the encoder's matrix products over inputs of ``lengths`` tokens (projections, feed-forward,
    attention scores and their weighted sum; embeddings, norms and softmax left out)."""
    per_layer = sum(4 * n * hidden * hidden + 2 * n * hidden * intermediate + 2 * n * n * hidden for n in lengths)
    return 2.0 * layers * per_layer


def measure(pairs: int = 600) -> dict:
    """Seconds of the three sides on the same pairs, their ratios, the achieved and peak GFLOP/s."""
    import warnings

    import torch
    from sentence_transformers import CrossEncoder

    from infra.encoders import resolve_encoder
    from pipeline.core.runtime import native_bf16
    from rerankers import reranker_class
    from scoring_speed import alternate, blocks, dl19_pairs, set_threads

    set_threads(1)
    work, total = dl19_pairs(pairs)
    project = reranker_class("cross-encoder").from_options({}, seed=1)
    project.prepare()
    project.score_in_bf16()
    with warnings.catch_warnings():  # "newly initialized" head: expected, speed does not depend on it
        warnings.simplefilter("ignore")
        anchor = CrossEncoder(resolve_encoder(), num_labels=1, max_length=project.max_input_length(), device="cpu")
    texts = {id(query): [(query.text, doc.text) for doc in docs] for query, docs in work}

    def anchor_fp32(part):
        return [anchor.predict(texts[id(query)], show_progress_bar=False).tolist() for query, _ in part]

    def anchor_bf16(part):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return [anchor.predict(texts[id(query)], show_progress_bar=False).tolist() for query, _ in part]

    sides = {"project_bf16": project.score_many, "anchor_fp32": anchor_fp32, "anchor_bf16": anchor_bf16}
    for side in sides.values():
        side(work[:1])  # warm-up
    load_before = load_average()
    parts = blocks(work, max(1, len(work) // 4))
    seconds, _ = alternate(sides, parts)
    load_after = load_average()
    special = project.special.extra(pair=True)  # [CLS] query [SEP] doc [SEP]
    lengths = [project.pair_length(query, doc) + special for query, docs in work for doc in docs]
    config = project.module.encoder.config
    flops = encoder_flops(lengths, config.num_hidden_layers, config.hidden_size, config.intermediate_size)
    peak_bf16 = matmul_peak(torch.bfloat16, 4096, config.hidden_size, config.intermediate_size)
    peak_fp32 = matmul_peak(torch.float32, 4096, config.hidden_size, config.intermediate_size)
    return {
        "pairs": total, "queries": len(work), "blocks": len(parts), "mean_tokens": sum(lengths) / len(lengths),
        "gflop_per_pair": flops / len(lengths) / 1e9, "seconds": seconds,
        "ce_bf16_vs_st_bf16": seconds["anchor_bf16"] / seconds["project_bf16"],
        "ce_bf16_vs_st_fp32": seconds["anchor_fp32"] / seconds["project_bf16"],
        "ce_bf16_gflops": flops / seconds["project_bf16"] / 1e9,
        "st_fp32_gflops": flops / seconds["anchor_fp32"] / 1e9,
        "bf16_peak_gflops": peak_bf16, "fp32_peak_gflops": peak_fp32,
        "native_bf16": native_bf16(), "torch": torch.__version__,
        "load_before": load_before, "load_after": load_after}


def report(result: dict, command: str) -> str:
    """The Markdown report of :func:`measure`'s result."""
    s = result["seconds"]
    return "\n".join([
        f"# Cross-encoder bf16 scoring against sentence-transformers and the matmul peak "
        f"({time.strftime('%Y-%m-%d %H:%M')}, {machine_line(1)}, torch {result['torch']}, native bf16: "
        f"{result['native_bf16']})", "",
        f"Command: `{command}`. {result['pairs']} DL19 BM25 pairs ({result['queries']} queries), "
        f"{result['mean_tokens']:.0f} tokens per pair on average, {result['gflop_per_pair']:.2f} GFLOP of encoder "
        f"products per pair; one thread, the sides alternating over {result['blocks']} blocks of queries; "
        f"load average "
        f"{' '.join(result['load_before'])} -> {' '.join(result['load_after'])}.", "",
        "| side | seconds | pairs / s | GFLOP/s |", "|---|---|---|---|",
        *(f"| {name} | {s[key]:.1f} | {result['pairs'] / s[key]:.1f} | "
          f"{result['gflop_per_pair'] * result['pairs'] / s[key]:.0f} |"
          for name, key in (("project cross-encoder, bf16 copy", "project_bf16"),
                            ("sentence-transformers CrossEncoder, float32", "anchor_fp32"),
                            ("sentence-transformers CrossEncoder, bf16 autocast", "anchor_bf16"))),
        "", f"Ratios (issue 37 item 1's goals: >= 2x and >= 5x): project bf16 / CrossEncoder bf16 autocast "
            f"**{result['ce_bf16_vs_st_bf16']:.2f}x**, / CrossEncoder float32 **{result['ce_bf16_vs_st_fp32']:.2f}x**. "
            f"Measured peak of one thread on MiniLM's feed-forward product: bf16 {result['bf16_peak_gflops']:.0f} "
            f"GFLOP/s, float32 {result['fp32_peak_gflops']:.0f}; the project's bf16 path reaches "
            f"{result['ce_bf16_gflops']:.0f} ({result['ce_bf16_gflops'] / result['bf16_peak_gflops']:.0%} of the bf16 "
            f"peak). GFLOP/s count the full encoder's products, what CrossEncoder computes; the project scores "
            f"through the [CLS]-only forward (rerankers/blocks/first_token.py), which skips about 14 % of "
            f"them, so its figure is an effective rate.", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=600, help="DL19 BM25 pairs (default 600)")
    parser.add_argument("--output", help="also write the Markdown report here")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")  # here, not at import: a test importing this file keeps its bars
    command = "python benchmarks/cross_encoder_bf16_speed.py " + " ".join(sys.argv[1:])
    result = measure(args.pairs)
    publish(report(result, command.strip()), args.output, result)


if __name__ == "__main__":
    main()
