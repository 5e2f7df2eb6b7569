"""Learned per-token codes as a first stage: FAISS over query-independent token encodings.

ADDAX's document side depends on the query, so it cannot be indexed. This module trains a
query-independent encoding instead: a transformer encoder (MiniLM by default), a projection MLP to
``dim`` dimensions per token, and MaxSim (ColBERT) between query and document tokens. Two kinds:

* ``codes`` (binary): ADDAX's hashing denoiser as the projection (a three-layer MLP, tanh / ReLU / linear)
  followed by ``tanh(alpha x)`` (alpha 5) while training and ``sign`` at index time; the +-1 codes are
  packed 8 per byte into a faiss binary index (``IndexBinaryFlat``, or ``IndexBinaryHNSW``). A query's
  real-valued, L2-normalised token vectors are binarised for the kNN step (Hamming distance) and scored
  exactly against the codes: ``sum_i max_j q_i . b_j / sqrt(dim)``;
* ``colbert`` (float): ColBERT's linear projection and L2-normalised token vectors in a faiss float index
  (``IndexFlatIP``, or ``IndexHNSWFlat``); score ``sum_i max_j q_i . d_j``.

The binary codes have a second recipe, ``hash_head="lsh"``: train the float (colbert) encoder, then hash its
token vectors with ``dim`` random hyperplanes (sign random projections, :func:`hashed_from_float`), and
optionally fine-tune the hashed encoder for ``hash_steps`` steps with the binary loss. ADDAX's MLP starts
from a random hashing of MiniLM's states; ``lsh`` starts from codes that already rank like the float index,
and with more bits than floats (512 bits = 64 bytes per token against 128 float32 = 512 bytes) it stays
within a few hundredths of its nDCG (BENCHMARKS.md). ``hash_center`` centres the hashing: the float token
vectors of a trained encoder share one dominant direction (MiniLM + projection: the mean of the unit token
vectors has norm .93 on NFCorpus), so hyperplanes through the origin mostly put every token on the same
side and waste their bits; ``sign(R (v - mu))``, ``mu`` the mean token vector of the indexed collection
(:data:`CENTER_DOCS` documents sampled from it; the encoder's training documents choose the draw), splits the
tokens evenly, and the score decodes ``v`` back from its code using ``|v| = 1`` (:func:`centred_similarity`).

Padding and the special tokens ([CLS], [SEP], [PAD], [MASK]) never get a vector, on either side.

Training (:func:`train_encoder`) is contrastive: for a batch of training queries, a softmax cross-entropy
over one judged-relevant document, the other queries' documents (in-batch negatives) and
``hard_negatives`` BM25 negatives per query (non-relevant documents of the Lucene first stage's top
``negative_depth``); other documents judged relevant for a query are left out of its softmax. The binary
kind adds ADDAX's quantisation loss ``(tanh(alpha x) - sign(x))^2``; with ``straight_through`` it also scores
the documents with their ``sign`` codes in the forward pass (the gradient is ``tanh(alpha x)``'s), so the
encoder is trained on the very vectors the index stores instead of their soft version. Training queries are a dataset's
``train`` split; a dataset without one trains on another dataset (``train_dataset``; NFCorpus's test set
uses its dev queries, ``nfcorpus-dev``, see :data:`TRAINING_COMPANIONS`). A dataset cannot train on its
own queries: they are the ones it is evaluated on.

Search (:class:`CodeRetriever`): encode the query tokens, take each token's ``k_prime`` nearest vectors in
the faiss index, and rank the union of their documents by exact MaxSim over all their token vectors.

Caching: the trained encoder is cached under ``<root>/code-encoders/`` (keyed by the training options and
the training data, so one training serves every collection indexed with it) and copied (hard-linked when
possible) into each index. An index lives in ``<root>/<dataset>-<kind>-<key>``, where ``<root>`` is
``PIPELINE_INDEX_DIR`` (as for the Lucene indexes) or ``indexes/cache/codes``, and the key hashes the
dataset's fingerprint, the options and the training data. Documents are encoded into shards in
``<root>/.<index name>.shards`` (each written atomically), so an interrupted build resumes after its last
finished shard; the index itself is assembled in a temporary directory that is renamed into place, so an
unfinished build never looks like an index. With GPUs visible to faiss (``faiss.get_num_gpus() > 0``),
flat indexes are searched on the GPU.

The package, one job per module (each imports only the ones listed before it):

* :mod:`.options`: :class:`CodeOptions`, file names, the cache root;
* :mod:`.model`: :class:`TokenCodeEncoder`, bit packing, tokenization;
* :mod:`.training`: training queries and negatives, the contrastive loss and loop;
* :mod:`.hashing`: the ``lsh`` recipe (hyperplanes, centring, draws);
* :mod:`.encoders`: encoder checkpoints and their cache;
* :mod:`.ivf`: the inverted-file index for large collections (built from shards, memory-mapped);
* :mod:`.directory`: a built index's cache directory, metadata, document ids and offsets, verification;
* :mod:`.build`: encoding documents into shards and assembling the faiss index;
* :mod:`.search`: :class:`CodeRetriever` and the ``codes`` / ``colbert`` first-stage factories.
"""
from __future__ import annotations

import importlib

#: each module of this package -> the public names it defines (imported on first use: ``CodeOptions`` is
#: needed to check a command line, which must not import torch and faiss)
PUBLIC = {
    "options": ("KINDS", "INDEX_TYPES", "HASH_HEADS", "META_FILE", "FAISS_FILE", "TOKEN_DOCS_FILE",
        "DOC_IDS_FILE", "DOC_OFFSETS_FILE", "DOC_ID_BYTES_FILE", "DOC_ID_OFFSETS_FILE", "INDEX_FORMAT",
        "RESCORE_DEPTH", "ENCODER_FILE", "ENCODER_META", "SHARD_MANIFEST", "CHECKPOINT_FORMAT", "GPU_MAX_K",
        "TRAINING_COMPANIONS", "code_index_root", "CodeOptions", "LATER_FIELDS", "PERSISTED_NAMES"),
    "model": ("pack_codes", "unpack_codes", "maxsim", "TokenCodeEncoder", "centred_similarity", "skip_token_ids",
        "new_encoder", "tokenize"),
    "training": ("TrainingSource", "resolve_training", "bm25_negatives", "TrainingBatch", "BatchSampler",
        "contrastive_loss", "TrainingReport", "train_encoder"),
    "hashing": ("random_hyperplanes", "hashed_from_float", "recentre", "centring_summary", "CENTER_DOCS",
        "center_sample", "draw_seeds", "AGREEMENT_QUERIES", "AGREEMENT_DOCS", "kendall_tau", "agreement_sample",
        "hyperplane_agreement"),
    "encoders": ("save_encoder", "load_encoder_checkpoint", "encoder_path", "obtain_encoder"),
    "directory": ("DocIds", "doc_offsets", "check_format", "storage_bytes", "index_path", "is_complete",
        "index_metadata", "index_size_bytes", "find_code_index", "verify_code_index", "VERIFIED_FILES",
        "VERIFIED_STAMP"),
    "build": ("encode_documents", "build_code_index"),
    "search": ("CodeRetriever", "codes_first_stage", "colbert_first_stage"),
}
EXPORTS = {name: module for module, names in PUBLIC.items() for name in names}
SUBMODULES = ("options", "model", "training", "hashing", "encoders", "ivf", "directory", "build", "search")
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name in EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS, *SUBMODULES})
