"""Load a dataset by name into plain records: queries, documents, qrels, splits and a shipped first-stage run.

Names resolve in this order (:func:`load_dataset`, in :mod:`.registry`):

1. a path to a local directory: its ``dataset.json`` manifest, or a detected layout (TREC topics/qrels/docs
   files, or the line-aligned "pair" format ``a.toks b.toks id.txt sim.txt``, one folder or one per split);
2. a built-in name for a folder of the project's data root (``PIPELINE_DATA``, default ``../shared/data``):
   ``microblog`` (2011-2014, one split per year) and ``microblog-2011`` .. ``microblog-2014``, ``wikiqa``,
   ``trecqa``, ``dl`` (TREC DL 2019-2021, one split per year), ``dl19``, ``dl20``, ``dl21``, ``nfcorpus``
   (test pool, BEIR queries), ``nfcorpus-dev``, ``vaswani-npl``, and ``nfcorpus-titles`` (IASM's PubMed task
   rebuilt from NFCorpus: see :func:`nfcorpus_titles`);
3. a name added by :func:`register_dataset` or by an installed package's entry point of group
   ``neural_rerank.datasets`` (``name = "module:function"``, the function returning a :class:`Dataset`);
4. an ir_datasets id (``cranfield``, ``vaswani``, ``nfcorpus/test``, ``msmarco-passage/trec-dl-2019/judged``,
   ``tweets2013-ia/trec-mb-2013`` ...). The archives ir_datasets would download are first looked for in an
   offline mirror (``PIPELINE_MIRROR`` or ``--mirror``: a directory searched recursively by file name; by
   default the data root) and copied into ir_datasets' cache after an md5 check. When the download is
   unavailable and the data root holds the same collection (see :data:`IR_DATASETS_EQUIVALENTS`), that
   copy is used instead and a warning says so.

Modules, one job each: :mod:`.dataset` (the records and query selection), :mod:`.locations` (data root and
mirror), :mod:`.fingerprint` (cache identity of the files), :mod:`.pair_format` and :mod:`.trec_format`
(the two file formats), :mod:`.local` (a user's own directory), :mod:`.microblog`, :mod:`.answer_selection`
(WikiQA, TrecQA), :mod:`.trec_dl`, :mod:`.nfcorpus`, :mod:`.classic` (Vaswani NPL) and :mod:`.irds`
(ir_datasets) load one source family each, :mod:`.recipes` (built-in run settings) and :mod:`.registry`
(names to loaders). This package re-exports their public names.
"""
from __future__ import annotations

from .answer_selection import answer_selection_loader
from .classic import vaswani_npl
from .dataset import Dataset, Recipe, select_queries
from .fingerprint import LOADER_VERSION, files_fingerprint
from .irds import load_ir_dataset, seed_ir_datasets_cache
from .local import confined_path, load_local
from .locations import REPO_ROOT, data_root, mirror_dir
from .microblog import MICROBLOG_YEARS, microblog_loader
from .nfcorpus import TITLES_SPLIT_SEED, nfcorpus_loader, nfcorpus_titles, split_title
from .pair_format import PAIR_FILES, PairSplit, pair_dataset, read_pair_folder
from .recipes import DL_RECIPE, MICROBLOG_RECIPE, NFCORPUS_RECIPE, TRECQA_RECIPE
from .registry import (
    BUILTIN_DATASETS,
    DATASET_PLUGINS,
    ENTRY_POINT_GROUP,
    IR_DATASETS_EQUIVALENTS,
    known_datasets,
    load_dataset,
    register_dataset,
)
from .trec_dl import DL_YEARS, dl_year_loader, dl_years
from .trec_format import trec_dataset

__all__ = [
    "BUILTIN_DATASETS", "DATASET_PLUGINS", "DL_RECIPE", "DL_YEARS", "Dataset", "ENTRY_POINT_GROUP", "IR_DATASETS_EQUIVALENTS",
    "LOADER_VERSION", "MICROBLOG_RECIPE", "MICROBLOG_YEARS", "NFCORPUS_RECIPE", "PAIR_FILES", "PairSplit",
    "REPO_ROOT", "Recipe", "TITLES_SPLIT_SEED", "TRECQA_RECIPE", "answer_selection_loader",
    "confined_path", "data_root", "dl_year_loader", "dl_years", "files_fingerprint", "known_datasets",
    "load_dataset", "load_ir_dataset", "load_local", "microblog_loader", "mirror_dir", "nfcorpus_loader",
    "nfcorpus_titles", "pair_dataset", "read_pair_folder", "register_dataset",
    "seed_ir_datasets_cache", "select_queries", "split_title", "trec_dataset", "vaswani_npl",
]
