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
import dataclasses
import sys
import time
from typing import Sequence

from indexes.codes import CodeOptions
from infra import distributed

from .engine.cli_options import OptionParser, add_config_arguments
from .core.datasets import load_dataset
from .shell import run_command

INDEX_KINDS = ("lucene", "codes", "colbert")
KEPT_ON_INTERRUPT = ("no half-built index was left; finished code-index shards are kept, run the same command "
                     "to resume")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (in the command shell, :func:`pipeline.shell.run_command`): prints the index
    directory; a bad option or input prints one ``error: ...`` line and gives 2, a full disk 1."""
    parser = OptionParser(prog="python -m pipeline.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cranfield")
    parser.add_argument("--kind", default="lucene", choices=INDEX_KINDS,
                        help="lucene (BM25), codes (binary token codes) or colbert (float token vectors)")
    parser.add_argument("--stemmer", default="porter", choices=["porter", "krovetz", "none"], help="lucene only")
    parser.add_argument("--keep-stopwords", action="store_true", help="lucene only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when a cached index exists (codes/colbert: retrain the encoder too)")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives")
    # every field of CodeOptions is a flag (--dim, --steps, --hash-head ...), with its default and help
    add_config_arguments(parser, CodeOptions)
    # under torchrun: each rank encodes its share of the code index's shards, rank 0 assembles and prints
    return run_command(lambda: build(parser.parse_args(argv)), KEPT_ON_INTERRUPT, distributed=True)


def build(args: argparse.Namespace) -> int:
    """Build the index ``args`` describe and print where it is; returns 0 (a bad option or input is a
    :class:`~pipeline.core.errors.PipelineError`, a full disk an ``OSError``: whole index or none)."""
    started = time.perf_counter()
    if args.kind != "lucene":  # options are checked before the dataset is read
        fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(CodeOptions) if hasattr(args, f.name)}
        options = CodeOptions(**{**fields, "kind": args.kind, "threads": args.threads})
    dataset = load_dataset(args.dataset, args.mirror)
    if args.kind == "lucene":
        from indexes.lucene import LuceneOptions, build_index, index_metadata

        path = build_index(dataset, LuceneOptions(args.stemmer, args.keep_stopwords), threads=args.threads,
                           force=args.force)
        meta = index_metadata(path)
        print(f"{path} ({meta['documents']} documents, {time.perf_counter() - started:.1f} s)")
        return 0
    from indexes.codes import build_code_index, index_metadata as code_metadata

    path = build_code_index(dataset, options, force=args.force, mirror=args.mirror)
    if not distributed.is_main():
        return 0
    meta = code_metadata(path)
    print(f"{path} ({meta['documents']} documents, {meta['vectors']} token vectors, faiss index "
          f"{meta['index_bytes']} bytes, encoder trained on {meta['train']['description']}, "
          f"{time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
