"""Learned-code first stages against BM25: effectiveness, index size and query latency.

    python benchmarks/code_first_stage.py [--datasets nfcorpus vaswani-npl] [--steps 500] [--threads 2]
                                          [--straight-through] [--bits 128] [--hash-head mlp|lsh]
                                          [--hash-steps 0] [--hash-seed N] [--hash-draws K] [--hash-center]
                                          [--output benchmarks/results/codes/first-stage.md]

For each dataset: BM25 (Lucene), ``codes`` (binary per-token codes, faiss binary index) and ``colbert``
(float per-token vectors, faiss float index), each retrieving the top ``--k`` (default 100) per query:
nDCG@10 and R@100 (pipeline.evaluate), the index size in bytes (the Lucene directory for BM25, the faiss
index file for the others), the mean latency of one query searched alone (query encoding included), and
the float / binary size ratio. Neither dataset has a ``train`` split: the encoders are trained on NFCorpus's
training queries (its dev queries, ``nfcorpus-dev``; see ``indexes.codes.TRAINING_COMPANIONS``) and the same
trained encoder serves both collections; Vaswani is thus a zero-shot transfer. Indexes and encoders are
cached (``PIPELINE_INDEX_DIR`` or ``indexes/cache``), so a second run only searches.

``--max-docs N`` / ``--max-queries N`` run on a subset (the first N queries; their judged documents plus the
first N others) for a quick smoke test; the output says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--quiet" in sys.argv:  # before anything imports tqdm, which reads TQDM_DISABLE once
    os.environ["TQDM_DISABLE"] = "1"

from common import add_search_arguments, machine_line, publish, set_all_threads  # noqa: E402
from indexes import BM25Settings, make_first_stage  # noqa: E402
from pipeline.core.datasets import Dataset, load_dataset  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402

TRAIN_DATASET = "nfcorpus"
MEASURES = "nDCG@10 R@100"


def subset(dataset: Dataset, max_queries: int | None, max_docs: int | None) -> Dataset:
    """The first ``max_queries`` queries and, with ``max_docs``, their judged documents plus the first
    ``max_docs`` documents (a new name and fingerprint, so its indexes never mix with the full ones)."""
    if not max_queries and not max_docs:
        return dataset
    part = dataset.subset(list(dataset.queries)[:max_queries] if max_queries else dataset.queries)
    if max_docs:
        judged = {q.doc_id for q in part.qrels}
        docs = [d for i, d in enumerate(dataset.docs_iter()) if i < max_docs or d.doc_id in judged]
        part = dataclasses.replace(part, docs_factory=lambda: list(docs), _store={d.doc_id: d for d in docs})
    tag = f"q{max_queries or 'all'}-d{max_docs or 'all'}"
    fingerprint = hashlib.sha1(f"{dataset.fingerprint}:{tag}".encode()).hexdigest()
    return dataclasses.replace(part, name=f"{dataset.name}-{tag}", fingerprint=fingerprint)


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def timed_run(retriever, queries, k: int):
    """Search each query alone (after one warm-up query); returns ``(run, mean seconds per query)``."""
    retriever.search(queries[:1], k)
    run, elapsed = {}, 0.0
    for query in queries:
        started = time.perf_counter()
        run.update(retriever.search([query], k))
        elapsed += time.perf_counter() - started
    return run, elapsed / max(1, len(queries))


def code_saturation(index: Path, dataset: Dataset, every: int = 16, batch: int = 32) -> str:
    """How close the binary encoder's training-time codes ``tanh(alpha x)`` are to the ``sign(x)`` stored in
    the index, over the tokens of every ``every``-th document: the share of dimensions with
    ``|tanh(alpha x)| > 0.9`` and the mean cosine between the two codes of a token."""
    import torch

    from indexes.codes import ENCODER_FILE, load_encoder_checkpoint, tokenize

    tokenizer, model, opts = load_encoder_checkpoint(Path(index) / ENCODER_FILE)
    texts = [doc.text for i, doc in enumerate(dataset.docs_iter()) if i % every == 0]
    saturated, values, cosines = 0, 0, []
    with torch.no_grad():
        for start in range(0, len(texts), batch):
            ids, attention = tokenize(tokenizer, texts[start:start + batch], opts["doc_max_length"])
            projected, mask = model.project_tokens(ids, attention)
            projected = projected[mask]
            soft, hard = model.binary_codes(projected), model.binary_codes(projected, hard=True)
            saturated += int((soft.abs() > 0.9).sum())
            values += soft.numel()
            cosines.append(torch.nn.functional.cosine_similarity(soft, hard, dim=-1))
    cosine = torch.cat(cosines).mean().item()
    return (f"{len(texts)} documents, {values // opts['dim']} tokens: {saturated / values:.1%} of code values have "
            f"|tanh(alpha x)| > 0.9; mean cosine(tanh(alpha x), sign(x)) per token {cosine:.3f}")


def code_options(kind: str, args):
    """The :class:`indexes.codes.CodeOptions` of this benchmark's ``kind`` index for parsed ``args`` (also
    used by ``code_first_stage_rerank.py``, so both scripts find the same cached encoders and indexes)."""
    from indexes.codes import CodeOptions

    binary = {"dim": args.bits, "hash_head": args.hash_head, "hash_steps": args.hash_steps,
              "hash_seed": args.hash_seed, "hash_draws": args.hash_draws,
              "hash_center": args.hash_center} if kind == "codes" else {}
    return CodeOptions(kind=kind, steps=args.steps, train_dataset=TRAIN_DATASET, threads=args.threads,
                       k_prime=args.k_prime, progress=not args.quiet, straight_through=args.straight_through,
                       **binary)


def add_code_arguments(parser: argparse.ArgumentParser) -> None:
    """The encoder options :func:`code_options` reads (shared with ``code_first_stage_rerank.py``)."""
    parser.add_argument("--steps", type=int, default=500, help="encoder training steps (default 500)")
    parser.add_argument("--straight-through", action="store_true",
                        help="train the binary codes on their sign codes (straight-through estimator)")
    parser.add_argument("--bits", type=int, default=128, help="bits per binary code (default 128; floats: 128)")
    parser.add_argument("--hash-head", default="mlp", choices=["mlp", "lsh"],
                        help="binary codes: ADDAX's hashing MLP trained from scratch (mlp) or random hyperplanes "
                             "over the trained float encoder (lsh)")
    parser.add_argument("--hash-steps", type=int, default=0, help="lsh: fine-tuning steps of the hashed encoder")
    parser.add_argument("--hash-seed", type=int, help="lsh: seed of the hyperplanes (default: the options' seed, 42)")
    parser.add_argument("--hash-draws", type=int, default=1,
                        help="lsh: hyperplane draws tried from --hash-seed on; the one whose codes agree best "
                             "with the float scores on training queries is kept (default 1)")
    parser.add_argument("--hash-center", action="store_true",
                        help="lsh: hash each float vector minus the mean token vector of the indexed collection")


def describe_codes(args) -> str:
    """One sentence on the encoders of :func:`code_options` for a benchmark's header."""
    if args.hash_head == "lsh":
        seed = code_options("codes", args).hyperplane_seed
        chosen = (f"the best of {args.hash_draws} draws from seed {seed} by agreement with the float scores"
                  if args.hash_draws > 1 else f"seed {seed}")
        centred = " minus the mean token vector of the indexed collection (centred)" if args.hash_center else ""
        binary = (f"binary codes: {args.bits} random hyperplanes (orthogonal blocks, {chosen}) over the float "
                  f"encoder's vectors{centred}, then {args.hash_steps} fine-tuning steps")
    else:
        binary = f"binary codes: ADDAX's hashing MLP to {args.bits} bits"
    return (f"encoder all-MiniLM-L6-v2; float: linear projection to 128 floats; {binary}; {args.steps} training "
            f"steps{' (binary codes: straight-through training on their sign codes)' if args.straight_through else ''}")


def benchmark(name: str, args) -> tuple[list[str], list[str]]:
    from indexes.codes import CodeRetriever, build_code_index, index_metadata

    dataset = subset(load_dataset(name), args.max_queries, args.max_docs)
    queries = list(dataset.queries.values())
    judged = {q.query_id for q in queries}
    qrels = [q for q in dataset.qrels if q.query_id in judged]
    rows, notes = [], []
    settings = BM25Settings(threads=args.threads)
    bm25 = make_first_stage("bm25", dataset, settings)
    results = {"bm25": (bm25, directory_bytes(bm25.path / "lucene"), "-")}
    for kind in ("codes", "colbert"):
        options = code_options(kind, args)
        started = time.perf_counter()
        path = build_code_index(dataset, options)
        meta = index_metadata(path)
        report = meta["train"]["report"] or {}
        notes.append(f"- {dataset.name} {kind}: {meta['documents']} documents, {meta['vectors']} token vectors; "
                     f"encoder trained on {meta['train']['description']} ({meta['train']['queries']} queries, "
                     f"{report.get('steps')} steps, loss {report.get('first_loss')} -> {report.get('last_loss')}); "
                     f"built in {meta['seconds']} s (this call {time.perf_counter() - started:.1f} s)")
        if kind == "codes":
            notes.append(f"- {dataset.name} codes, saturation of the trained codes: {code_saturation(path, dataset)}")
        retriever = CodeRetriever(path, k_prime=args.k_prime, threads=args.threads)
        results[kind] = (retriever, retriever.index_bytes, meta["train"]["description"])
    for spec, (retriever, size, trained_on) in results.items():
        run, latency = timed_run(retriever, queries, args.k)
        scores = evaluate(run, qrels, MEASURES).aggregate
        rows.append(f"| {dataset.name} | {spec} | {scores['nDCG@10']:.4f} | {scores['R@100']:.4f} | {size:,} "
                    f"| {latency * 1000:.1f} | {trained_on} |")
    ratio = results["colbert"][1] / results["codes"][1]
    notes.append(f"- {dataset.name}: float / binary index size = {results['colbert'][1]:,} / {results['codes'][1]:,} "
                 f"= {ratio:.1f}x")
    return rows, notes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nfcorpus", "vaswani-npl"])
    add_code_arguments(parser)
    add_search_arguments(parser, threads=2)
    parser.add_argument("--k", type=int, default=100, help="documents retrieved per query (default 100)")
    parser.add_argument("--max-docs", type=int, help="smoke test: the judged documents plus the first N others")
    parser.add_argument("--output", help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    set_all_threads(args.threads)
    machine = machine_line(args.threads)
    rows = ["| dataset | first stage | nDCG@10 | R@100 | index bytes | mean latency (ms/query) | encoder trained on |",
            "|---|---|---|---|---|---|---|"]
    notes = []
    for name in args.datasets:
        more_rows, more_notes = benchmark(name, args)
        rows += more_rows
        notes += more_notes
    smoke = args.max_queries or args.max_docs
    sections = [
        f"# Learned-code first stages vs BM25 ({time.strftime('%Y-%m-%d')}, {machine})",
        *(["**Smoke run on a subset** (--max-queries {0} --max-docs {1}); the numbers mean nothing."
           .format(args.max_queries, args.max_docs)] if smoke else []),
        f"Top {args.k} per query; codes / colbert: {args.k_prime} neighbours per query token, exact MaxSim "
        f"re-scoring; {describe_codes(args)}. "
        "Index bytes: Lucene directory (BM25), faiss index file (codes, colbert). Latency: one query searched "
        "alone, query encoding included. vaswani-npl has no training queries: its encoders are trained on "
        "nfcorpus (NFCorpus's dev queries, nfcorpus-dev), a zero-shot transfer.",
        "", *rows, "", *notes,
    ]
    publish("\n".join(sections), args.output)


if __name__ == "__main__":
    main()
