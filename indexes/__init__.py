"""First stages: anything with ``search(queries, k) -> Run``.

``make_first_stage(spec, dataset)`` builds one from a name:

* ``bm25`` / ``bm25+rm3``: Lucene (Anserini) over the dataset's documents; the index is built if missing;
* ``run:PATH``: re-rank a given TREC run (checked strictly against the dataset's queries and documents);
* ``shipped``: the run that comes with the data (Microblog QL top-1000, DL19/DL20 BM25 top-100);
* ``codes``: learned binary per-token codes (ADDAX-style hashing of a transformer's token vectors) in a faiss
  binary index, candidates by Hamming kNN per query token, ranked by exact MaxSim (:mod:`indexes.codes`);
* ``colbert``: the same with ColBERT-style L2-normalised float token vectors in a faiss float index;
* ``auto``: ``shipped`` when the dataset has one, else ``bm25``.

Other packages add first stages through entry points (docs/plugins.md); see :mod:`indexes.registry`. Each
first stage declares its options dataclass (``factory.Options``, :mod:`indexes.options`), set with
``--fs-set NAME=VALUE`` and given to it in :class:`FirstStageSettings`. ``codes`` / ``colbert`` take a
:class:`indexes.codes.CodeOptions`; without options they use the most recently built index of that kind for
the dataset, or build one with the default options (training the encoder first: ``python -m pipeline.index
--kind codes`` builds it ahead).
"""
from __future__ import annotations

from .base import BM25Settings, Retriever, RunRetriever
from .options import BM25Options, FirstStageSettings, NoOptions, RM3Options
from .registry import (available, check_first_stage, first_stage_options, make_first_stage, register,
                       resolve_first_stage)

__all__ = ["BM25Options", "BM25Settings", "FirstStageSettings", "NoOptions", "RM3Options", "Retriever",
           "RunRetriever", "available", "check_first_stage", "first_stage_options", "make_first_stage", "register",
           "resolve_first_stage"]
