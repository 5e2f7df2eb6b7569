"""Build (or find cached) the index of a dataset.

Command line::

    python -m pipeline.index --dataset cranfield                  # Lucene, Porter stemming, stopwords removed
    python -m pipeline.index --dataset vaswani-npl --stemmer none --keep-stopwords
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Sequence

from .datasets import load_dataset
from .errors import PipelineError


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: prints the index directory."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cranfield")
    parser.add_argument("--kind", default="lucene", choices=["lucene"], help="index kind")
    parser.add_argument("--stemmer", default="porter", choices=["porter", "krovetz", "none"])
    parser.add_argument("--keep-stopwords", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--force", action="store_true", help="rebuild even when a cached index exists")
    parser.add_argument("--mirror", help="offline mirror directory for ir_datasets archives")
    args = parser.parse_args(argv)
    try:
        from indexes.lucene import LuceneOptions, build_index, index_metadata

        dataset = load_dataset(args.dataset, args.mirror)
        started = time.perf_counter()
        path = build_index(dataset, LuceneOptions(args.stemmer, args.keep_stopwords), threads=args.threads,
                           force=args.force)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    meta = index_metadata(path)
    print(f"{path} ({meta['documents']} documents, {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
