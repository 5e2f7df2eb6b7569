"""Figures for BENCHMARKS.md, written as PNGs under ``benchmarks/results/`` (matplotlib, Agg backend).

    python benchmarks/figures.py [--figures path models] [--seed 1] [--threads 1] [--outdir benchmarks/results/wikiqa]

* ``path`` -> ``match-srnn-path.png``: a Match-SRNN matching path on a real WikiQA pair, like the paper's
  Figure 5 (Sec. 6.2). Match-SRNN is trained quickly on WikiQA's train split (2 epochs of at most 2,000
  examples, ``--seed``). The pair is the first ``test-filtered`` question, in the dataset's order, whose
  correct answer the model ranks first among the shipped candidates, with at least 6 question tokens and
  8-30 answer tokens;
  without one, it is the first question with a correct answer. As in Sec. 6.2, the figure follows the state
  dimension ``k`` with the largest scorer weight ``|W^(s)_k|``. The left panel shows the word-level
  interaction ``||s_ij||`` (the NTN output, Sec. 4.1). The right panel shows that dimension's state
  ``h_ij[k]``, multiplied by the sign of ``W^(s)_k`` so that brighter means a larger contribution to the
  score. Both panels overlay the path that :func:`rerankers.match_srnn.matching_path` backtracks from
  ``(m, n)`` along dimension ``k``'s largest gates. The paper ties the gates over dimensions instead; the
  model here was not trained that way, so one dimension is followed.
* ``models`` -> ``models.png``: MAP (mean ± sd over seeds, as error bars) of every re-ranker in
  ``benchmarks/results/wikiqa/models.md`` and ``benchmarks/results/wikiqa/match-srnn.md``, parsed from their
  Markdown tables. A horizontal line marks the shipped candidate order (the first stage).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TQDM_DISABLE", "1")  # before anything imports tqdm, which reads it at import time

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BASELINE_NAMES = ("shipped candidate order", "first stage")


def save(fig, path: Path) -> None:
    from pipeline.core.atomic import atomic_write

    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}", flush=True)


# ------------------------------------------------------------------------------------ matching path


def pick_pair(reranker, dataset, split: str):
    """``(query, doc, rank of doc)`` for the first fitting question of ``split`` (see the module docstring)."""
    from rerankers.neural import tokenize

    store = dataset.doc_store()
    relevant: dict[str, set[str]] = {}
    for qrel in dataset.qrels:
        if qrel.relevance > 0:
            relevant.setdefault(qrel.query_id, set()).add(qrel.doc_id)
    fallback = None
    for qid in dataset.splits[split]:
        hits = dataset.first_stage.get(qid, [])
        docs = [store[h.doc_id] for h in hits]
        good = [d for d in docs if d.doc_id in relevant.get(qid, ())]
        if not good:
            continue
        query = dataset.queries[qid]
        if fallback is None:
            fallback = (query, good[0], None)
        if len(tokenize(query.text)) < 6 or not 8 <= len(tokenize(good[0].text)) <= 30:
            continue
        scores = reranker.score(query, docs)
        best = max(range(len(docs)), key=scores.__getitem__)
        if docs[best].doc_id in relevant[qid]:
            return query, docs[best], 1
    return fallback


def figure_path(outdir: Path, seed: int) -> None:
    import torch

    from pipeline.core.datasets import load_dataset
    from rerankers.training.data import RankingData
    from rerankers.match_srnn import MatchSRNNReranker, matching_path
    from rerankers.neural import tokenize

    ds = load_dataset("wikiqa")
    reranker = MatchSRNNReranker.from_options({"epochs": 2, "max_examples_per_epoch": 2000}, seed=seed)
    train = RankingData.from_dataset(ds, ds.splits["train"], ds.first_stage)
    reranker.prepare(train, ds)
    reranker.fit(train)
    split = "test-filtered" if "test-filtered" in ds.splits else "test"
    query, doc, rank = pick_pair(reranker, ds, split)

    config = reranker.text_config
    query_words = tokenize(query.text)[: config.max_query_length]
    doc_words = tokenize(doc.text)[: config.max_doc_length]
    batch = reranker.encode([(query, doc)])
    model = reranker.module.eval()
    with torch.inference_mode():
        cells = model.tensor_network(model.embedding(batch["query_ids"]), model.embedding(batch["doc_ids"]))
        states, gates = model.forward_rnn(cells, return_gates=True)
        score = float(model(**batch)[0])
    weight = model.scorer.weight.detach()[0, : model.config.hidden_dim]
    k = int(weight.abs().argmax())
    m, n = len(query_words), len(doc_words)
    path = matching_path(gates[0], m, n, dimension=k)
    interaction = cells[0, :m, :n].norm(dim=-1).numpy()
    state = (states[0, :m, :n, k] * weight[k].sign()).numpy()

    fig, axes = plt.subplots(2, 1, figsize=(max(7.0, 0.3 * n + 2.5), 2 * (0.3 * m + 2.2) + 0.8),
                             constrained_layout=True)
    path_cols = [j - 1 for _, j in path]
    path_rows = [i - 1 for i, _ in path]
    panels = [(interaction, "word-level interaction ||s_ij|| (NTN)"),
              (state, f"state h_ij[{k}] x sign(W_s[{k}]) (dimension with the largest |scorer weight|)")]
    for ax, (values, title) in zip(axes, panels):
        image = ax.imshow(values, cmap="gray", aspect="equal", interpolation="nearest")
        ax.plot(path_cols, path_rows, color="red", linewidth=2, marker="o", markersize=3)
        ax.set_xticks(range(n), doc_words, rotation=90, fontsize=8)
        ax.set_yticks(range(m), query_words, fontsize=8)
        ax.set_xlabel("answer (S2)")
        ax.set_ylabel("question (S1)")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.9, pad=0.01)
    ranked = "ranked first among its candidates" if rank == 1 else "not checked to rank first"
    fig.suptitle(f"Match-SRNN matching path (red: backtracked gates of dimension {k}) on WikiQA {query.query_id} / "
                 f"{doc.doc_id}\ncorrect answer, {ranked}; score {score:.3f}; trained 2 epochs x 2,000 examples, "
                 f"seed {seed}", fontsize=10)
    save(fig, outdir / "match-srnn-path.png")
    print(f"pair: {query.query_id} {query.text!r} / {doc.doc_id} {doc.text!r}; dimension {k}; path {path}")


# ------------------------------------------------------------------------------------- model chart


def parse_table(path: Path, metric: str = "AP") -> list[tuple[str, float, float | None]]:
    """``(model, mean, sd or None)`` for each row of the Markdown table in ``path``."""
    rows, header = [], None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        value = cells[header.index(metric)]
        match = re.fullmatch(r"([0-9.]+)(?:\s*±\s*([0-9.]+))?", value)
        if not match:
            continue
        name = re.sub(r"\s*\(\d+ seeds?\)$", "", cells[0])
        rows.append((name, float(match.group(1)), None if match.group(2) is None else float(match.group(2))))
    return rows


def figure_models(outdir: Path, tables: list[Path]) -> None:
    import numpy as np

    models, baseline = [], None
    for table in tables:
        for name, mean, sd in parse_table(table):
            if name in BASELINE_NAMES:
                if baseline is not None and abs(baseline - mean) > 1e-4:
                    print(f"warning: {table} has another first-stage MAP ({mean} vs {baseline})", file=sys.stderr)
                baseline = mean if baseline is None else baseline
            elif name not in [m[0] for m in models]:
                models.append((name, mean, sd or 0.0, "match-srnn" in name))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.75 * len(models) + 2), 4.5), constrained_layout=True)
    x = np.arange(len(models))
    colors = ["tab:orange" if srnn else "tab:blue" for *_, srnn in models]
    ax.bar(x, [m[1] for m in models], yerr=[m[2] for m in models], capsize=4, color=colors, edgecolor="black",
           linewidth=0.5)
    for xi, (_, mean, sd, _) in zip(x, models):
        ax.text(xi, mean + sd + 0.004, f"{mean:.3f}", ha="center", va="bottom", fontsize=7)
    if baseline is not None:
        ax.axhline(baseline, color="red", linestyle="--", linewidth=1.2,
                   label=f"shipped candidate order ({baseline:.4f})")
    from matplotlib.patches import Patch

    handles = ax.get_legend_handles_labels()[0] + [
        Patch(facecolor="tab:blue", edgecolor="black", label="re-rankers (wikiqa/models.md)"),
        Patch(facecolor="tab:orange", edgecolor="black", label="Match-SRNN variants (wikiqa/match-srnn.md)")]
    ax.set_xticks(x, [m[0] for m in models], rotation=35, ha="right")
    low = min([m[1] - m[2] for m in models] + ([baseline] if baseline is not None else []))
    ax.set_ylim(max(0.0, low - 0.05), max([m[1] + m[2] for m in models] + [baseline or 0.0]) + 0.05)
    ax.set_ylabel("MAP (mean ± sd over seeds)")
    ax.set_title("WikiQA test-filtered: MAP per re-ranker (3 seeds each; error bars: sd)")
    ax.legend(handles=handles, loc="upper left", ncol=3, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, outdir / "models.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", nargs="+", default=["path", "models"], choices=["path", "models"])
    parser.add_argument("--seed", type=int, default=1, help="seed of the quickly trained Match-SRNN")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--outdir", default=str(RESULTS / "wikiqa"))
    parser.add_argument("--tables", nargs="+",
                        default=[str(RESULTS / "wikiqa" / "models.md"), str(RESULTS / "wikiqa" / "match-srnn.md")])
    args = parser.parse_args()
    os.environ.setdefault("PIPELINE_THREADS", str(args.threads))
    outdir = Path(args.outdir)
    if "models" in args.figures:
        figure_models(outdir, [Path(t) for t in args.tables])
    if "path" in args.figures:
        import torch

        torch.set_num_threads(args.threads)
        figure_path(outdir, args.seed)


if __name__ == "__main__":
    main()
