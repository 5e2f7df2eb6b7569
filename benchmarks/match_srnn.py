"""Match-SRNN benchmarks specific to the model: the LCS simulation of Sec. 5.2, and how speed grows with
text length.

    python benchmarks/match_srnn.py [--sections lcs speed] [--seed 1] [--threads 1] [--output FILE.md]

Prints Markdown tables (the rows for BENCHMARKS.md). Effectiveness on answer selection (the paper's QA
task) comes from the project's common harness, like the other re-rankers::

    python benchmarks/reproduce.py --dataset wikiqa --split test-filtered --reranker match-srnn \\
        --reranker bi-match-srnn --variant : --variant frozen:freeze_embeddings=true --seeds 1 2 3 \\
        --metrics "AP RR nDCG@3 nDCG@5 P@1" --threads 1 --output benchmarks/results/wikiqa/match-srnn.md

* ``lcs``: Sec. 5.2. Random pairs of strings over the letters A-J (10,000 train, 1,000 test, lengths 3-10).
  Match-SRNN (c = 10 tensor channels; states of size 1, as in Figure 4, and 10) is trained with the
  squared loss (eq. 6) for 12 epochs (Adam, lr 1e-2) to predict the normalised LCS length
  ``c[m, n] / min(m, n)``. The paper does not say how it normalised. Words are frozen one-hot vectors,
  so the tensor network can learn the exact-match indicator of Sec. 5.1. The table gives the test RMSE
  against that of predicting the training mean, and how often ``round(prediction * min(m, n))`` is the
  exact LCS length. For states of size 1 it also gives how closely the states ``h_ij`` of all prefixes
  follow ``c[i, j]`` (Pearson r, as in Figure 4b).
* ``speed``: one training step (forward and backward) and scoring, with batches of 128 pairs of random
  ids (16 query tokens, 16-128 document tokens). The spatial GRU loops over the ``M + N - 1``
  anti-diagonals, so time grows with ``M + N`` steps of ``M`` cells each. ``benchmarks/reranker_speed.py``
  compares all re-rankers on real Microblog candidates.

Torch runs on ``--threads`` intra-op threads (default 1). The spatial GRU runs many small ops per
anti-diagonal, and on a shared 2-core machine a second thread made them about 10x slower.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TQDM_DISABLE", "1")  # before anything imports tqdm, which reads it at import time

import torch  # noqa: E402

from common import publish  # noqa: E402
from rerankers.match_srnn import MatchSRNNConfig, MatchSRNNModel  # noqa: E402


# ---------------------------------------------------------------------------------------------- LCS


def lcs_lengths(x: list[int], y: list[int]) -> list[list[int]]:
    """``c[i][j]`` of eq. 7 (0-based borders included)."""
    c = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            c[i][j] = max(c[i][j - 1], c[i - 1][j], c[i - 1][j - 1] + (x[i - 1] == y[j - 1]))
    return c


def lcs_data(count: int, generator: torch.Generator, alphabet: int = 10, lengths: tuple[int, int] = (3, 10)):
    pairs, targets, tables = [], [], []
    for _ in range(count):
        m, n = torch.randint(lengths[0], lengths[1] + 1, (2,), generator=generator).tolist()
        x = torch.randint(0, alphabet, (m,), generator=generator).tolist()
        y = torch.randint(0, alphabet, (n,), generator=generator).tolist()
        table = lcs_lengths(x, y)
        pairs.append((x, y))
        tables.append(table)
        targets.append(table[m][n] / min(m, n))
    return pairs, torch.tensor(targets), tables


def lcs_batch(pairs):
    """Characters ``k`` become ids ``k + 2`` (0 is padding, 1 OOV), right-padded with masks."""
    m, n = max(len(x) for x, _ in pairs), max(len(y) for _, y in pairs)
    q = torch.zeros(len(pairs), m, dtype=torch.long)
    d = torch.zeros(len(pairs), n, dtype=torch.long)
    for row, (x, y) in enumerate(pairs):
        q[row, : len(x)] = torch.tensor(x) + 2
        d[row, : len(y)] = torch.tensor(y) + 2
    return q, q != 0, d, d != 0


def lcs_rows(hidden_dims: list[int], seed: int, epochs: int = 12, alphabet: int = 10, channels: int = 10) -> list[str]:
    generator = torch.Generator().manual_seed(seed)
    train_pairs, train_targets, _ = lcs_data(10_000, generator, alphabet)
    test_pairs, test_targets, test_tables = lcs_data(1_000, generator, alphabet)
    baseline = float(((test_targets - train_targets.mean()) ** 2).mean().sqrt())
    rows = ["| model | c / h dim | test RMSE (normalised LCS) | RMSE of the training mean | exact LCS length | "
            "Pearson r(h_ij, c[i,j]) over all prefixes | train time (s) |", "|---|---|---|---|---|---|---|"]
    one_hot = torch.cat([torch.zeros(2, alphabet), torch.eye(alphabet)])  # rows 0/1: padding, OOV
    for hidden_dim in hidden_dims:
        torch.manual_seed(seed)
        model = MatchSRNNModel(MatchSRNNConfig(tensor_channels=channels, hidden_dim=hidden_dim), one_hot,
                               freeze_embeddings=True)
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        started = time.perf_counter()
        order_generator = torch.Generator().manual_seed(seed + 1)
        for _ in range(epochs):
            model.train()
            order = torch.randperm(len(train_pairs), generator=order_generator).tolist()
            for start in range(0, len(order), 128):
                chunk = order[start : start + 128]
                predicted = model(*lcs_batch([train_pairs[k] for k in chunk]))
                loss = ((predicted - train_targets[chunk]) ** 2).mean()  # eq. 6
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        seconds = time.perf_counter() - started
        model.eval()
        with torch.inference_mode():
            batch = lcs_batch(test_pairs)
            predicted = model(*batch)
            rmse = float(((predicted - test_targets) ** 2).mean().sqrt())
            shorter = torch.tensor([min(len(x), len(y)) for x, y in test_pairs])
            exact = torch.tensor([t[len(x)][len(y)] for t, (x, y) in zip(test_tables, test_pairs)])
            accuracy = float(((predicted * shorter).round() == exact).float().mean())
            correlation = "-"
            if hidden_dim == 1:
                cells = model.tensor_network(model.embedding(batch[0]), model.embedding(batch[2]))
                # the sign of the scorer's weight is arbitrary: orient h so that larger means longer
                states = model.forward_rnn(cells)[..., 0] * model.scorer.weight[0, 0].sign()
                h, c = [], []
                for row, ((x, y), table) in enumerate(zip(test_pairs, test_tables)):
                    h.append(states[row, : len(x), : len(y)].flatten())
                    c.append(torch.tensor([r[1:] for r in table[1:]], dtype=torch.float32).flatten())
                correlation = f"{float(torch.corrcoef(torch.stack([torch.cat(h), torch.cat(c)]))[0, 1]):.4f}"
        rows.append(f"| match-srnn | {channels} / {hidden_dim} | {rmse:.4f} | {baseline:.4f} | {accuracy:.1%} | "
                    f"{correlation} | {seconds:.0f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


# -------------------------------------------------------------------------------------------- speed


def speed_rows(doc_lengths: list[int], query_length: int = 16, batch: int = 128, repeats: int = 5) -> list[str]:
    rows = ["| model | query x doc tokens | train step, 128 pairs (ms, median of 5) | scoring (pairs/s) |",
            "|---|---|---|---|"]
    for bidirectional in (False, True):
        name = "bi-match-srnn" if bidirectional else "match-srnn"
        torch.manual_seed(0)
        model = MatchSRNNModel(MatchSRNNConfig(), torch.randn(5000, 50), bidirectional=bidirectional)
        for doc_length in doc_lengths:
            q = torch.randint(2, 5000, (batch, query_length))
            d = torch.randint(2, 5000, (batch, doc_length))
            inputs = (q, q != 0, d, d != 0)
            model.train()
            steps = []
            for _ in range(repeats + 1):
                started = time.perf_counter()
                model(*inputs).sum().backward()
                steps.append(time.perf_counter() - started)
            model.zero_grad(set_to_none=True)
            model.eval()
            scoring = []
            with torch.inference_mode():
                for _ in range(repeats + 1):
                    started = time.perf_counter()
                    model(*inputs)
                    scoring.append(time.perf_counter() - started)
            rows.append(f"| {name} | {query_length} x {doc_length} | {statistics.median(steps[1:]) * 1000:.0f} | "
                        f"{batch / statistics.median(scoring[1:]):.0f} |")
    return rows


# --------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=["lcs", "speed"], choices=["lcs", "speed"])
    parser.add_argument("--seed", type=int, default=1, help="seed of the LCS data and model")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (see the module docstring)")
    parser.add_argument("--output", help="also write the tables to this Markdown file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared; load average at start {load}), "
               f"torch {torch.__version__} on {args.threads} thread(s)")
    sections = [f"# Match-SRNN ({time.strftime('%Y-%m-%d')}, {machine})",
                "Command: `python benchmarks/match_srnn.py " + " ".join(sys.argv[1:]) + "`"]
    if "lcs" in args.sections:
        sections += ["## LCS simulation (Sec. 5.2): 10,000 / 1,000 random pairs over A-J, lengths 3-10, squared loss",
                     *lcs_rows([1, 10], args.seed)]
    if "speed" in args.sections:
        sections += ["## Speed (random ids, batch 128, d = c = 10, E = 50)", *speed_rows([16, 32, 64, 128])]
    text = "\n".join(sections)
    publish(text, args.output)


if __name__ == "__main__":
    main()
