"""Build (or find cached) the index of a dataset.

Command line::

    python -m pipeline.index --dataset cranfield                  # Lucene, Porter stemming, stopwords removed
    python -m pipeline.index --dataset vaswani-npl --stemmer none --keep-stopwords
    python -m pipeline.index --dataset nfcorpus --kind codes      # learned binary token codes (faiss)
    python -m pipeline.index --dataset vaswani-npl --kind colbert --train-dataset nfcorpus

``--kind codes`` / ``--kind colbert`` first train the token encoder (contrastively, on the dataset's training
queries or on ``--train-dataset``'s), then encode every document and write a faiss index (see
:mod:`indexes.codes`); both the encoder and the index are cached, and an interrupted build resumes.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Sequence

from .core.datasets import load_dataset
from .core.errors import PipelineError
from .core.interrupts import exit_cleanly

KINDS = ("lucene", "codes", "colbert")
KEPT_ON_INTERRUPT = ("no half-built index was left; finished code-index shards are kept, run the same command "
                     "to resume")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: prints the index directory."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cranfield")
    parser.add_argument("--kind", default="lucene", choices=KINDS,
                        help="lucene (BM25), codes (binary token codes) or colbert (float token vectors)")
    parser.add_argument("--stemmer", default="porter", choices=["porter", "krovetz", "none"], help="lucene only")
    parser.add_argument("--keep-stopwords", action="store_true", help="lucene only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when a cached index exists (codes/colbert: retrain the encoder too)")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives")
    codes = parser.add_argument_group("codes / colbert")
    codes.add_argument("--encoder", default="all-MiniLM-L6-v2", help="transformer name or local directory")
    codes.add_argument("--dim", type=int, default=128, help="bits per code / floats per token vector")
    codes.add_argument("--train-dataset", help="train the encoder on this dataset's training queries "
                                               "(default: the dataset's own; required when it has none)")
    codes.add_argument("--steps", type=int, default=500, help="training steps")
    codes.add_argument("--batch-size", type=int, default=16, help="training queries per step")
    codes.add_argument("--seed", type=int, default=42)
    codes.add_argument("--straight-through", action="store_true",
                       help="codes: train on the sign codes the index stores (straight-through estimator)")
    codes.add_argument("--hash-head", default="mlp", choices=["mlp", "lsh"],
                       help="codes: ADDAX's hashing MLP trained with the encoder (mlp), or random hyperplanes over "
                            "the float (colbert) encoder trained with the same options (lsh)")
    codes.add_argument("--float-dim", type=int, default=128, help="codes, lsh: floats per vector of the float encoder")
    codes.add_argument("--hash-steps", type=int, default=0, help="codes, lsh: fine-tuning steps after the hashing")
    codes.add_argument("--hash-seed", type=int, help="codes, lsh: seed of the hyperplanes (default: --seed)")
    codes.add_argument("--hash-draws", type=int, default=1,
                       help="codes, lsh: hyperplane draws tried (from --hash-seed on); the one whose codes rank "
                            "the training queries' candidates most like the float encoder is kept")
    codes.add_argument("--hash-center", action="store_true",
                       help="codes, lsh: hash each float vector minus the mean token vector of training documents "
                            "(balanced bits; scores decode the unit vector back; no fine-tuning)")
    codes.add_argument("--index-type", default="flat", choices=["flat", "hnsw"], help="faiss index structure")
    args = parser.parse_args(argv)
    with exit_cleanly(KEPT_ON_INTERRUPT):
        return build(args)


def build(args: argparse.Namespace) -> int:
    """Build the index ``args`` describe and print where it is; 2 on an expected fault (one error line)."""
    started = time.perf_counter()
    try:
        dataset = load_dataset(args.dataset, args.mirror)
        if args.kind == "lucene":
            from indexes.lucene import LuceneOptions, build_index, index_metadata

            path = build_index(dataset, LuceneOptions(args.stemmer, args.keep_stopwords), threads=args.threads,
                               force=args.force)
            meta = index_metadata(path)
            print(f"{path} ({meta['documents']} documents, {time.perf_counter() - started:.1f} s)")
            return 0
        from indexes.codes import CodeOptions, build_code_index, index_metadata as code_metadata

        options = CodeOptions(kind=args.kind, encoder=args.encoder, dim=args.dim, train_dataset=args.train_dataset,
                              steps=args.steps, batch_size=args.batch_size, seed=args.seed,
                              index_type=args.index_type, threads=args.threads,
                              straight_through=args.straight_through, hash_head=args.hash_head,
                              float_dim=args.float_dim, hash_steps=args.hash_steps, hash_seed=args.hash_seed,
                              hash_draws=args.hash_draws, hash_center=args.hash_center)
        path = build_code_index(dataset, options, force=args.force, mirror=args.mirror)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    meta = code_metadata(path)
    print(f"{path} ({meta['documents']} documents, {meta['vectors']} token vectors, faiss index "
          f"{meta['index_bytes']} bytes, encoder trained on {meta['train']['description']}, "
          f"{time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
