"""Speed of the wavefront spatial GRU against the plain cell-by-cell loop of eq. 3, in one process.

    python benchmarks/match_srnn_wavefront.py [--shapes 10x40 20x100] [--batch 32] [--repeats 5] [--threads 1]
        [--pair-repeats 3] [--output benchmarks/results/match-srnn/wavefront-speed.md]

:class:`rerankers.match_srnn.SpatialGRU` computes all cells of one anti-diagonal ``i + j = k`` in one batched
step (``M + N - 1`` sequential steps). :func:`rerankers.match_srnn.reference_spatial_gru` is eq. 3 written
literally, one cell after another (``M * N`` sequential steps), and is the same function the tests compare
the model against. Both run here on the same weights (one ``SpatialGRU``, ``c = d = 10`` as in Sec. 6.1) and
the same random interaction tensor ``s [B, M, N, c]``, for the whole batch at once (the loop goes over the
cells, not over the pairs). One measurement is a forward pass plus the backward pass of a fixed random
projection of all states, down to ``s`` and the GRU's weights. After one warm-up of each, the two are
timed alternately ``--repeats`` times (so that a change of load on the shared machine hits both), and the
table gives the medians and their ratio. For reference it also times the loop as the tests use it,
one pair after another (``--pair-repeats`` runs; 0 skips it). Before timing, the script asserts that both give the same states
(to 1e-5) and the same gradients (to 1e-4; for the weights, whose gradients sum over all
``B * M * N`` cells in float32, relative to the largest entry).

Torch runs on ``--threads`` intra-op threads (default 1; see ``benchmarks/match_srnn.py``).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from rerankers.match_srnn import SpatialGRU, reference_spatial_gru  # noqa: E402


def forward_backward(function, gru: SpatialGRU, s: torch.Tensor, probe: torch.Tensor):
    """One timed unit: states, then the gradients of ``(states * probe).sum()`` w.r.t. ``s`` and the weights."""
    gru.zero_grad(set_to_none=True)
    s = s.detach().requires_grad_(True)
    states = function(gru, s)
    (states * probe).sum().backward()
    return states.detach(), s.grad, [p.grad for p in gru.parameters()]


def wavefront(gru: SpatialGRU, s: torch.Tensor) -> torch.Tensor:
    return gru(s)


def one_pair_at_a_time(gru: SpatialGRU, s: torch.Tensor) -> torch.Tensor:
    """The reference as the tests call it, on one pair ``[M, N, C]`` after another (``B * M * N`` steps)."""
    return torch.stack([reference_spatial_gru(gru, pair) for pair in s])


def compare(rows: int, cols: int, batch: int, repeats: int, pair_repeats: int, channels: int = 10,
            hidden_dim: int = 10, seed: int = 0) -> tuple[float, float, float | None]:
    """Median seconds of (wavefront, cell by cell, cell by cell one pair at a time) forward+backward."""
    torch.manual_seed(seed)
    gru = SpatialGRU(channels, hidden_dim)
    s = torch.relu(torch.randn(batch, rows, cols, channels))  # NTN outputs are rectified (Sec. 4.1)
    probe = torch.randn(batch, rows, cols, hidden_dim)

    fast = forward_backward(wavefront, gru, s, probe)  # also the warm-up
    slow = forward_backward(reference_spatial_gru, gru, s, probe)
    torch.testing.assert_close(fast[0], slow[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast[1], slow[1], atol=1e-4, rtol=1e-4)
    for a, b in zip(fast[2], slow[2]):  # sums over B * M * N cells in float32: relative to the largest entry
        torch.testing.assert_close(a, b, atol=1e-4 * float(b.abs().max()), rtol=1e-4)

    times = {wavefront: [], reference_spatial_gru: []}
    for _ in range(repeats):
        for function in times:
            started = time.perf_counter()
            forward_backward(function, gru, s, probe)
            times[function].append(time.perf_counter() - started)
    per_pair = None
    if pair_repeats > 0:
        torch.testing.assert_close(forward_backward(one_pair_at_a_time, gru, s, probe)[0], slow[0])  # + warm-up
        per_pair = statistics.median(timed(one_pair_at_a_time, gru, s, probe) for _ in range(pair_repeats))
    return statistics.median(times[wavefront]), statistics.median(times[reference_spatial_gru]), per_pair


def timed(function, gru, s, probe) -> float:
    started = time.perf_counter()
    forward_backward(function, gru, s, probe)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["10x40", "20x100"], help="query x doc tokens, e.g. 10x40")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each, after one warm-up")
    parser.add_argument("--pair-repeats", type=int, default=3,
                        help="timed runs of the one-pair-at-a-time loop (0 skips that column)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--output", help="also write the table to this Markdown file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared; load average at start {load}), "
               f"torch {torch.__version__} on {args.threads} thread(s)")
    lines = [f"# Match-SRNN spatial GRU: wavefront vs cell by cell ({time.strftime('%Y-%m-%d')}, {machine})",
             "Command: `python benchmarks/match_srnn_wavefront.py " + " ".join(sys.argv[1:]) + "`",
             "",
             f"Forward + backward of the spatial GRU alone (c = d = 10, batch {args.batch}, random rectified "
             f"s_ij, same weights and inputs), median of {args.repeats} alternating runs after a warm-up. "
             "Outputs agree to 1e-5 and gradients to 1e-4 (of the largest entry, for the weights; asserted).",
             "",
             "The main comparison is the cell-by-cell loop over the same batch (M * N sequential steps vs the "
             "wavefront's M + N - 1, which bounds the ratio by M * N / (M + N - 1) if a wavefront step cost no more "
             "than a cell step). The last two columns time the reference as the tests call it, one pair after "
             f"another (B * M * N steps; median of {args.pair_repeats} runs after a warm-up).",
             "",
             "| query x doc tokens | wavefront (ms) | cell by cell, batched (ms) | ratio | step-count bound "
             "M*N/(M+N-1) | cell by cell, one pair at a time (ms) | ratio (one pair at a time) |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for shape in args.shapes:
        rows, cols = (int(v) for v in shape.lower().split("x"))
        fast, slow, per_pair = compare(rows, cols, args.batch, args.repeats, args.pair_repeats)
        pair_cells = "- | -" if per_pair is None else f"{per_pair * 1000:.0f} | {per_pair / fast:.0f}x"
        lines.append(f"| {rows} x {cols} | {fast * 1000:.1f} | {slow * 1000:.0f} | {slow / fast:.1f}x | "
                     f"{rows * cols / (rows + cols - 1):.1f}x | {pair_cells} |")
        print(lines[-1], flush=True)
    if args.output:
        from pipeline.core.atomic import write_text

        write_text(args.output, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
