"""Query encoding, the floor of the code first stage's latency: the packaged MiniLM's transformer in PyTorch
eager against the same weights in ONNX Runtime, one query at a time, one thread.

    python benchmarks/query_encoder_runtime.py [--datasets nfcorpus vaswani-npl] [--queries 100] \\
        [--output benchmarks/results/codes/query-encoder-runtime.md]

Why: ``benchmarks/code_latency.py`` found that after pruning, encoding the query (17-19 ms on one AVX2 thread)
is most of a code search. Each dataset's first ``--queries`` queries are tokenized as the code index does
(at most 32 word pieces) and encoded by both runtimes alternately, query by query, in this one process; the
table gives the mean and median ms of the transformer's forward pass and the largest absolute difference of
their outputs (float32 in both: the same arithmetic up to the order of sums). The ONNX graph is exported once
per run into a temporary folder by the search's own runner (:class:`infra.onnx_runtime.OnnxEncoder`: opset 17,
dynamic batch and length, checked against PyTorch on a probe batch).
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, machine_line, publish, set_all_threads  # noqa: E402

MAX_QUERY_LENGTH = 32  # indexes.codes.options: the word pieces a code index keeps of a query


def measure(names: list[str], queries: int, threads: int) -> list[dict]:
    """Per dataset: ms per query of both runtimes and the largest output difference."""
    import torch

    from infra.encoders import load_encoder
    from infra.onnx_runtime import OnnxEncoder, last_hidden_state, sample_batches
    from pipeline.core.datasets import load_dataset

    tokenizer, model = load_encoder()
    model.eval()
    rows = []
    with tempfile.TemporaryDirectory() as folder, torch.inference_mode():
        # the search's own runner (infra.onnx_runtime), exported afresh into a temporary cache
        sample, probe = sample_batches(tokenizer, MAX_QUERY_LENGTH)
        runner = OnnxEncoder(last_hidden_state(model), sample, probe, threads=threads, cache_root=Path(folder))
        for name in names:
            texts = [q.text for q in list(load_dataset(name).queries.values())[:queries]]
            eager, onnx_ms, differences, lengths = [], [], [], []
            for text in texts:
                batch = tokenizer([text], truncation=True, max_length=MAX_QUERY_LENGTH, return_tensors="pt")
                feed = (batch["input_ids"].numpy(), batch["attention_mask"].numpy())
                for _ in range(2):  # warm both on this shape
                    model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
                    runner(*feed)
                started = time.perf_counter()
                reference = model(input_ids=batch["input_ids"],
                                  attention_mask=batch["attention_mask"]).last_hidden_state.numpy()
                eager.append(time.perf_counter() - started)
                started = time.perf_counter()
                hidden = runner(*feed)
                onnx_ms.append(time.perf_counter() - started)
                differences.append(float(np.abs(hidden - reference).max()))
                lengths.append(int(batch["input_ids"].shape[1]))
            rows.append({"dataset": name, "queries": len(texts), "mean_tokens": statistics.mean(lengths),
                         "torch_ms": 1000 * statistics.mean(eager), "torch_median_ms": 1000 * statistics.median(eager),
                         "onnx_ms": 1000 * statistics.mean(onnx_ms),
                         "onnx_median_ms": 1000 * statistics.median(onnx_ms),
                         "speedup": statistics.mean(eager) / statistics.mean(onnx_ms),
                         "max_abs_difference": max(differences)})
    return rows


def render(rows: list[dict], args, command: str) -> str:
    """The Markdown table of :func:`measure`'s rows."""
    lines = [f"# Query encoding: PyTorch eager vs ONNX Runtime ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{machine_line(args.threads)})", "",
             f"Command: `{command}`. Load average (1, 5, 15 min) before / after: {' '.join(args.load_before)} / "
             f"{' '.join(args.load_after)}.", "",
             "all-MiniLM-L6-v2's transformer (the code encoders' backbone), one query at a time, at most "
             f"{MAX_QUERY_LENGTH} word pieces, the two runtimes alternating query by query; ms of the forward pass.",
             "", "| dataset | queries | mean word pieces | PyTorch ms (mean / median) | ONNX Runtime ms (mean / median) "
                 "| speed-up | largest output difference |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['dataset']} | {row['queries']} | {row['mean_tokens']:.1f} | {row['torch_ms']:.2f} / "
                     f"{row['torch_median_ms']:.2f} | {row['onnx_ms']:.2f} / {row['onnx_median_ms']:.2f} | "
                     f"{row['speedup']:.2f}x | {row['max_abs_difference']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    parser.add_argument("--queries", type=int, default=100, help="queries per dataset (default 100)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", help="write the table here (and the numbers to .json beside it)")
    args = parser.parse_args(argv)
    set_all_threads(args.threads)
    command = "python " + shlex.join(["benchmarks/query_encoder_runtime.py", *(argv if argv is not None else sys.argv[1:])])
    args.load_before = load_average()
    rows = measure(args.datasets, args.queries, args.threads)
    args.load_after = load_average()
    publish(render(rows, args, command), args.output,
            {"command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "threads": args.threads,
             "load_before": args.load_before, "load_after": args.load_after, "rows": rows})


if __name__ == "__main__":
    main()
