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
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.progress import progress_switch
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Query, Run, ScoredDoc
from rerankers.checkpoints import load_checkpoint, save_checkpoint
from rerankers.blocks import maxsim as late_interaction

from .base import BM25Settings
from .registry import make_first_stage

log = logging.getLogger(__name__)

KINDS = ("codes", "colbert")
INDEX_TYPES = ("flat", "hnsw")
HASH_HEADS = ("mlp", "lsh")
DEFAULT_CODE_ROOT = Path(__file__).resolve().parent / "cache" / "codes"
META_FILE = "code-index.json"
FAISS_FILE = "faiss.index"
TOKEN_DOCS_FILE = "token_docs.npy"
DOC_IDS_FILE = "doc_ids.json"
ENCODER_FILE = "encoder.pt"
ENCODER_META = "encoder.json"
SHARD_MANIFEST = "manifest.json"
CHECKPOINT_FORMAT = 1
GPU_MAX_K = 2048  # faiss GPU indexes return at most this many neighbours

#: Datasets without a ``train`` split whose training queries live in another dataset (same collection,
#: disjoint queries): NFCorpus's test set trains on NFCorpus's dev queries and documents.
TRAINING_COMPANIONS = {"nfcorpus": "nfcorpus-dev", "nfcorpus/test": "nfcorpus-dev",
                       "beir/nfcorpus/test": "nfcorpus-dev"}


def code_index_root() -> Path:
    """Where code indexes live: ``PIPELINE_INDEX_DIR`` (like the Lucene indexes) or ``indexes/cache/codes``."""
    return Path(os.environ.get("PIPELINE_INDEX_DIR", DEFAULT_CODE_ROOT))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "dataset"


def _digest(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class CodeOptions:
    """Options of a code index. Fields marked ``compare=False`` change neither the encoder nor the index
    (so they are not part of the cache key)."""

    kind: str = "codes"                 # codes (binary) | colbert (float)
    encoder: str = "all-MiniLM-L6-v2"   # rerankers.encoders name or local directory
    dim: int = 128                      # bits per code / floats per vector
    train_dataset: str | None = None    # None: the dataset's own training queries (see module docstring)
    steps: int = 500
    batch_size: int = 16                # training queries per step
    learning_rate: float = 2e-5         # transformer
    head_learning_rate: float = 1e-3    # projection MLP
    query_max_length: int = 32
    doc_max_length: int = 180
    hard_negatives: int = 1             # BM25 negatives per query and step (0: in-batch negatives only)
    negative_depth: int = 100           # BM25 depth the hard negatives come from
    alpha: float = 5.0                  # tanh(alpha x) while training the binary codes
    quantization_weight: float = 0.1    # weight of (tanh(alpha x) - sign(x))^2 (binary kind)
    straight_through: bool = False      # binary: train on the sign codes the index stores (see contrastive_loss)
    hash_head: str = "mlp"              # binary: mlp (ADDAX's hashing MLP) | lsh (hyperplanes over a float encoder)
    float_dim: int = 128                # lsh: dimension of the float (colbert) encoder the hyperplanes cut
    hash_steps: int = 0                 # lsh: steps fine-tuning the hashed encoder after its initialisation
    hash_seed: int | None = None        # lsh: seed of the hyperplanes (None: ``seed``, as before this option)
    hash_draws: int = 1                 # lsh: hyperplane draws tried; the one agreeing best with the floats is kept
    hash_center: bool = False           # lsh: hash v - mu (mu: mean token vector of the indexed documents)
    temperature: float = 0.1            # softmax temperature on the MaxSim scores
    seed: int = 42
    index_type: str = "flat"            # flat | hnsw
    hnsw_m: int = 32
    # not part of the key
    k_prime: int = field(default=256, compare=False)           # neighbours per query token at search time
    shard_size: int = field(default=1024, compare=False)       # documents per resumable shard
    encode_batch_size: int = field(default=32, compare=False)
    device: str = field(default="auto", compare=False)
    threads: int | None = field(default=None, compare=False)
    progress: bool = field(default=True, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise PipelineError(f"unknown code index kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.hash_head not in HASH_HEADS:
            raise PipelineError(f"unknown hash head {self.hash_head!r}; expected one of {', '.join(HASH_HEADS)}")
        if self.hash_head != "mlp" and not self.binary:
            raise PipelineError(f"hash_head {self.hash_head!r} is for binary codes (kind 'codes'), not {self.kind!r}")
        if self.hash_seed is not None and self.hash_head != "lsh":
            raise PipelineError(f"hash_seed draws the hyperplanes of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_draws < 1:
            raise PipelineError(f"hash_draws must be at least 1, got {self.hash_draws}")
        if self.hash_draws > 1 and self.hash_head != "lsh":
            raise PipelineError(f"hash_draws chooses among hyperplane draws of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_center and self.hash_head != "lsh":
            raise PipelineError(f"hash_center centres the hyperplanes of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_center and self.hash_steps:
            raise PipelineError("hash_center codes are not fine-tuned (hash_steps must be 0): their scores decode "
                                "unit vectors, which the binary training loss does not model")
        if self.float_dim <= 0 or self.hash_steps < 0:
            raise PipelineError(f"float_dim must be positive and hash_steps >= 0, got {self.float_dim} and "
                                f"{self.hash_steps}")
        if self.index_type not in INDEX_TYPES:
            raise PipelineError(f"unknown index type {self.index_type!r}; expected one of {', '.join(INDEX_TYPES)}")
        if self.dim <= 0 or (self.binary and self.dim % 8):
            raise PipelineError(f"dim must be positive{' and a multiple of 8 for binary codes' if self.binary else ''}, "
                                f"got {self.dim}")
        for name in ("steps", "hard_negatives"):
            if getattr(self, name) < 0:
                raise PipelineError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("batch_size", "query_max_length", "doc_max_length", "k_prime", "shard_size",
                     "encode_batch_size", "negative_depth", "hnsw_m"):
            if getattr(self, name) <= 0:
                raise PipelineError(f"{name} must be positive, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise PipelineError(f"temperature must be positive, got {self.temperature}")

    @property
    def binary(self) -> bool:
        return self.kind == "codes"

    def training_fields(self) -> dict:
        """The options that determine the trained encoder (with the training data)."""
        names = ("kind", "encoder", "dim", "steps", "batch_size", "learning_rate", "head_learning_rate",
                 "query_max_length", "doc_max_length", "hard_negatives", "negative_depth", "alpha",
                 "quantization_weight", "temperature", "seed")
        return {**{name: getattr(self, name) for name in names}, **self._later_fields()}

    def key_fields(self) -> dict:
        """Everything in the cache key of an index (besides the dataset and the training data)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.compare and f.name not in ("train_dataset", *LATER_FIELDS)}
        return {**fields, **self._later_fields()}

    def float_options(self) -> "CodeOptions":
        """The float (colbert) encoder an ``lsh`` hash head starts from: these training options, ``float_dim``."""
        return dataclasses.replace(self, kind="colbert", dim=self.float_dim, hash_head="mlp", hash_steps=0,
                                   hash_seed=None, hash_draws=1, hash_center=False, straight_through=False,
                                   float_dim=CodeOptions.float_dim)

    @property
    def hyperplane_seed(self) -> int:
        """The seed of an ``lsh`` head's hyperplanes: ``hash_seed``, else the training ``seed``."""
        return self.seed if self.hash_seed is None else self.hash_seed

    def _later_fields(self) -> dict:
        # options added after the first indexes were built are in the keys only where they change training
        # (binary codes, not at their defaults), so that the keys of encoders and indexes built before them
        # stay the same
        if not self.binary:
            return {}
        fields = {"straight_through": True} if self.straight_through else {}
        if self.hash_head != "mlp":
            fields.update(hash_head=self.hash_head, float_dim=self.float_dim, hash_steps=self.hash_steps)
            if self.hash_seed is not None and self.hash_seed != self.seed:  # the same draw, the same key
                fields.update(hash_seed=self.hash_seed)
            if self.hash_draws > 1:
                fields.update(hash_draws=self.hash_draws)
            if self.hash_center:
                fields.update(hash_center=True)
        return fields


#: CodeOptions fields that enter the cache keys only when they matter (see ``CodeOptions._later_fields``).
LATER_FIELDS = ("straight_through", "hash_head", "float_dim", "hash_steps", "hash_seed", "hash_draws", "hash_center")


# ------------------------------------------------------------------------------------ bit packing


def pack_codes(values: np.ndarray) -> np.ndarray:
    """Binarise ``values`` (``>= 0`` -> bit 1, else 0) along the last axis and pack 8 bits per byte in
    faiss's order (bit ``i`` is bit ``i % 8`` of byte ``i // 8``). ``[..., dim]`` -> ``[..., dim / 8]``."""
    return np.packbits(np.asarray(values) >= 0, axis=-1, bitorder="little")


def unpack_codes(packed: np.ndarray, dim: int) -> np.ndarray:
    """The +-1 float32 codes of :func:`pack_codes`' output."""
    bits = np.unpackbits(np.asarray(packed, dtype=np.uint8), axis=-1, count=dim, bitorder="little")
    return bits.astype(np.float32) * 2.0 - 1.0


# ------------------------------------------------------------------------------------------ model


def maxsim(q, q_mask, d, d_mask):
    """MaxSim scores of every query against every document, ``[Nq, Nd]``: ``q`` is ``[Nq, Lq, dim]``, ``d``
    ``[Nd, Ld, dim]``, masks boolean ``[N, L]`` (:func:`rerankers.blocks.maxsim` with ``all_pairs``)."""
    return late_interaction(q, q_mask, d, d_mask, all_pairs=True)


class TokenCodeEncoder(nn.Module):
    """Transformer -> projection -> one ``dim``-vector per (non-special, non-padding) token.

    Binary: ADDAX's hashing MLP (tanh, ReLU, linear; ``head="mlp"``) or one linear map (``head="linear"``,
    the hyperplanes of :func:`hashed_from_float`), documents ``tanh(alpha x)`` while training and
    ``sign(x)`` (+-1, 0 -> +1) at index time. Float: ColBERT's linear projection, L2-normalised. Queries
    are the projection L2-normalised in both kinds (one projection for both sides, so that a query
    token's sign pattern is comparable with the documents' codes in the kNN step).

    ``head="centred"`` (``hash_center``): the float projection to ``float_dim`` (L2-normalised, ``v``), then
    ``x = R (v - center)`` with fixed ``hyperplanes`` ``R`` (buffers, saved with the weights); documents are
    ``sign(x)``, queries stay the unit float vectors ``v`` and are scored by :func:`centred_similarity`.
    """

    def __init__(self, transformer, dim: int = 128, binary: bool = True, alpha: float = 5.0,
                 skip_ids: Iterable[int] = (), head: str = "mlp", float_dim: int | None = None):
        super().__init__()
        self.transformer = transformer
        self.dim, self.binary, self.alpha, self.head = dim, binary, alpha, head
        hidden = transformer.config.hidden_size
        if binary and head == "mlp":
            self.project = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                         nn.ReLU(), nn.Linear(hidden, dim))
        elif head == "centred":
            if not binary or not float_dim:
                raise PipelineError("a centred hash head needs binary codes and the float dimension it hashes")
            self.project = nn.Linear(hidden, float_dim)
            self.register_buffer("hyperplanes", torch.zeros(dim, float_dim))
            self.register_buffer("center", torch.zeros(float_dim))
            self.register_buffer("decode_norm", torch.ones(()))
        else:
            self.project = nn.Linear(hidden, dim)
        self.register_buffer("skip_ids", torch.tensor(sorted(set(skip_ids)), dtype=torch.long), persistent=False)

    @property
    def doc_scale(self) -> float:
        """Factor on ``q . d`` that makes a score a sum of cosines (binary codes have norm ``sqrt(dim)``)."""
        return 1.0 / math.sqrt(self.dim) if self.binary else 1.0

    def token_mask(self, input_ids, attention_mask):
        """True for the tokens that get a vector: not padding, not a special token."""
        return attention_mask.bool() & ~torch.isin(input_ids, self.skip_ids)

    @property
    def centred(self) -> bool:
        return self.head == "centred"

    def _projections(self, input_ids, attention_mask):
        hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.project(hidden.float()), self.token_mask(input_ids, attention_mask)

    def project_tokens(self, input_ids, attention_mask):
        """``([B, L, dim] projections, [B, L] token mask)``: the values whose signs are the binary codes
        (centred head: ``R (normalize(W h) - center)``)."""
        x, mask = self._projections(input_ids, attention_mask)
        return (self.hash_unit_vectors(F.normalize(x, dim=-1)) if self.centred else x), mask

    def hash_unit_vectors(self, vectors):
        """Centred head: ``R (v - center)`` of unit float vectors ``v`` (the signs are their codes)."""
        return (vectors - self.center) @ self.hyperplanes.T

    def encode_queries(self, input_ids, attention_mask):
        """``(L2-normalised query token vectors, mask)``; masked positions are zero (centred head: the unit
        float vectors, ``float_dim`` wide)."""
        x, mask = self._projections(input_ids, attention_mask)
        return F.normalize(x, dim=-1) * mask[..., None], mask

    def encode_docs(self, input_ids, attention_mask, hard: bool = False):
        """Document token vectors: binary ``tanh(alpha x)`` (``hard``: ``sign``), float L2-normalised.
        Returns ``(vectors, mask, projections)``; masked positions are zero."""
        x, mask = self.project_tokens(input_ids, attention_mask)
        vectors = self.binary_codes(x, hard) if self.binary else F.normalize(x, dim=-1)
        return vectors * mask[..., None], mask, x

    def binary_codes(self, x, hard: bool = False):
        """Codes of projections ``x``: ``tanh(alpha x)`` while training, ``sign(x)`` (0 -> +1) when ``hard``."""
        return torch.where(x >= 0, 1.0, -1.0) if hard else torch.tanh(self.alpha * x)

    def score(self, q, q_mask, d, d_mask):
        """MaxSim ``[Nq, Nd]`` with the kind's scale (centred head: over :meth:`decoded_similarity`)."""
        if not self.centred:
            return maxsim(q, q_mask, d, d_mask) * self.doc_scale
        sims = self.decoded_similarity(d.reshape(-1, d.shape[-1]), q.reshape(-1, q.shape[-1]))
        sims = sims.reshape(d.shape[0], d.shape[1], q.shape[0], q.shape[1])
        best = sims.masked_fill(~d_mask[:, :, None, None], float("-inf")).amax(dim=1)   # [Nd, Nq, Lq]
        best = torch.where(q_mask[None] & d_mask.any(dim=1)[:, None, None], best, torch.zeros_like(best))
        return best.sum(dim=-1).T

    def decoded_similarity(self, codes, query_vectors):
        """Centred head: ``[M, K]`` :func:`centred_similarity` of ``M`` codes and ``K`` unit query vectors."""
        return centred_similarity(codes, query_vectors, self.hyperplanes, self.center, self.decode_norm)


def centred_similarity(codes, queries, hyperplanes, center, decode_norm):
    """``[M, K]`` estimates of ``q . v`` for unit query vectors ``queries`` ``[K, f]`` and the unit vectors
    ``v`` behind ``codes`` ``[M, bits]`` (+-1, ``sign(R (v - center))``), without decoding a vector.

    ``v = center + t u`` with ``u`` the unit direction of ``v - center`` and ``t >= 0``; ``|v| = 1`` gives
    ``t = -a + sqrt(a^2 + 1 - |center|^2)`` with ``a = center . u``. ``u`` is estimated as ``R^T b /
    |R^T b|`` (sign random projections: ``R^T b`` points along ``u`` in expectation), with ``|R^T b|`` replaced
    by its mean over the center's sample (``decode_norm``; it varies by ~1% between tokens at 512 bits), so both
    ``a`` and ``q . u`` are inner products of the code with a projected vector (``R center``, ``R q``) and
    the cost is that of the uncentred score. Then ``q . v = q . center + t (q . u)``."""
    a = codes @ (hyperplanes @ center) / decode_norm
    t = -a + torch.sqrt(torch.clamp(a * a + 1.0 - center @ center, min=0.0))
    return (queries @ center)[None, :] + t[:, None] * (codes @ (queries @ hyperplanes.T).T) / decode_norm


def skip_token_ids(tokenizer) -> list[int]:
    """Token ids that never get a vector: the tokenizer's special tokens except [UNK] (an unknown word is
    still a word)."""
    special = set(tokenizer.all_special_ids)
    special.discard(tokenizer.unk_token_id)
    if tokenizer.pad_token_id is not None:
        special.add(tokenizer.pad_token_id)
    return sorted(i for i in special if i is not None)


def new_encoder(options: CodeOptions):
    """A fresh ``(tokenizer, TokenCodeEncoder)`` for ``options`` (pretrained transformer, new projection
    initialised from torch's current random state)."""
    from rerankers.encoders import load_encoder

    tokenizer, transformer = load_encoder(options.encoder)
    return tokenizer, TokenCodeEncoder(transformer, options.dim, options.binary, options.alpha, skip_token_ids(tokenizer))


def random_hyperplanes(count: int, dim: int, seed: int) -> torch.Tensor:
    """``[count, dim]`` unit normals of random hyperplanes: stacked random orthogonal bases of R^dim (QR of
    Gaussian matrices), so that within each block of ``dim`` bits the hyperplanes are orthogonal. Orthogonal
    blocks rank better than independent Gaussian normals (``benchmarks/lsh_draws.py``, 512 bits over 128-d
    ColBERT vectors, mean of 3 draws: nDCG@10 .330 vs .322 on NFCorpus, .484 vs .478 on Vaswani)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = [torch.linalg.qr(torch.randn(dim, dim, generator=generator))[0] for _ in range(-(-count // dim))]
    return torch.cat(blocks)[:count]


def hashed_from_float(float_model: "TokenCodeEncoder", bits: int, alpha: float, seed: int,
                      sample: torch.Tensor | None = None) -> "TokenCodeEncoder":
    """A binary encoder that hashes ``float_model``'s token vectors with ``bits`` random hyperplanes
    (sign random projections, Charikar's SimHash): same transformer, one linear head ``R W`` (``W``, ``b``:
    the float projection, ``R``: :func:`random_hyperplanes`). ``sign(R W h)`` is the code of the float
    vector ``W h`` (its norm does not change a sign); the query side is ``R W h`` L2-normalised, so the
    asymmetric score ``q . sign(R d) / sqrt(bits)`` estimates the float model's cosine (up to a constant
    factor) with a variance that shrinks as ``bits`` grows. The float model's transformer is shared, not
    copied.

    With ``sample`` (``[T, float_dim]`` unit token vectors of documents, :func:`center_sample`), the
    encoder is centred (:func:`recentre`): codes ``sign(R (v - mu))`` with ``mu`` the sample's mean, scored by
    :func:`centred_similarity`."""
    projection = float_model.project
    hyperplanes = random_hyperplanes(bits, projection.out_features, seed).to(projection.weight.device)
    head = "linear" if sample is None else "centred"
    model = TokenCodeEncoder(float_model.transformer, bits, True, alpha, float_model.skip_ids.tolist(), head=head,
                             float_dim=projection.out_features)
    with torch.no_grad():
        if sample is None:
            model.project.weight.copy_(hyperplanes @ projection.weight)
            model.project.bias.copy_(hyperplanes @ projection.bias)
        else:
            model.project.load_state_dict(projection.state_dict())
            model.hyperplanes.copy_(hyperplanes)
            recentre(model, sample)
    return model.to(projection.weight.device)


@torch.no_grad()
def recentre(model: "TokenCodeEncoder", sample: torch.Tensor) -> None:
    """Give a centred head the center of ``sample`` (``[T, float_dim]`` unit token vectors): ``center`` their
    mean and ``decode_norm`` the mean ``|R^T b|`` of their codes ``b`` (see :func:`centred_similarity`)."""
    sample = sample.to(model.center.device).float()
    model.center.copy_(sample.mean(dim=0))
    codes = model.binary_codes(model.hash_unit_vectors(sample), hard=True)
    model.decode_norm.copy_((codes @ model.hyperplanes).norm(dim=1).mean())


def centring_summary(model: "TokenCodeEncoder", documents: int, tokens: int) -> dict:
    """What a centred head's center came from and what it is, for encoder and index metadata."""
    return {"documents": documents, "tokens": tokens, "center_norm": round(float(model.center.norm()), 5),
            "decode_norm": round(float(model.decode_norm), 5)}


#: documents whose token vectors give a centred hash head its center: a seeded uniform sample of the
#: collection (its first documents are not enough: on Vaswani the first 512 give a center that loses up to
#: .01 nDCG@10 more than the whole collection's, BENCHMARKS.md)
CENTER_DOCS = 2048


@torch.no_grad()
def center_sample(model: "TokenCodeEncoder", tokenizer, dataset: Dataset, options: "CodeOptions",
                  device=None, documents: int = CENTER_DOCS) -> tuple[torch.Tensor, int]:
    """``([T, float_dim] unit token vectors, number of documents)`` of ``documents`` documents of ``dataset``
    drawn uniformly (reservoir sampling, seeded by ``options.seed``, one pass over the texts, encoding only
    the sample) under ``model`` (a float encoder, or a centred one: both give the unit float vectors as
    their query vectors). No label and no query is used."""
    model.eval()
    rng = random.Random(options.seed)
    texts: list[str] = []
    for seen, doc in enumerate(dataset.docs_iter()):
        if len(texts) < documents:
            texts.append(doc.text)
        elif (slot := rng.randrange(seen + 1)) < documents:
            texts[slot] = doc.text
    if not texts:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to centre the codes on")
    parts = []
    for start in range(0, len(texts), options.encode_batch_size):
        ids, att = tokenize(tokenizer, texts[start : start + options.encode_batch_size], options.doc_max_length, device)
        with _autocast(device):
            vectors, mask = model.encode_queries(ids, att)
        parts.append(vectors.float()[mask])
    return torch.cat(parts), len(texts)


def draw_seeds(first: int, count: int) -> list[int]:
    """The hyperplane seeds ``hash_draws=count`` tries: ``first`` (the single draw's seed, so one draw is the
    draw of before) and ``count - 1`` seeds derived from it by hashing, so that pools started from different
    seeds do not share draws."""
    derived = [int(hashlib.sha1(f"hyperplanes:{first}:{i}".encode()).hexdigest()[:8], 16) for i in range(1, count)]
    return [first, *derived]


#: training queries and candidates per query :func:`hyperplane_agreement` scores (BM25's top non-relevant
#: documents and up to a quarter of them judged relevant)
AGREEMENT_QUERIES = 64
AGREEMENT_DOCS = 24


def kendall_tau(first: torch.Tensor, second: torch.Tensor) -> float:
    """Kendall's tau-a of two score vectors over the same items (ties count as disagreement-free zeros)."""
    a = torch.sign(first[:, None] - first[None, :])
    b = torch.sign(second[:, None] - second[None, :])
    pairs = len(first) * (len(first) - 1)
    return float((a * b).sum() / pairs) if pairs else 1.0


def agreement_sample(source: TrainingSource, negatives: dict[str, list[str]], seed: int,
                     queries: int = AGREEMENT_QUERIES, docs: int = AGREEMENT_DOCS) -> list[tuple[str, list[str]]]:
    """``(query text, document texts)`` of up to ``queries`` training queries (seeded sample): each with its
    first judged-relevant documents (at most a quarter of ``docs``) and BM25's top non-relevant ones."""
    store = source.dataset.doc_store()
    qrels = source.dataset.qrels_dict()
    chosen = sorted(source.query_ids)
    random.Random(seed).shuffle(chosen)
    sample = []
    for qid in chosen:
        relevant = sorted(d for d, r in qrels.get(qid, {}).items() if r > 0 and d in store)[: max(1, docs // 4)]
        pool = relevant + [d for d in negatives.get(qid, []) if d in store][: docs - len(relevant)]
        if len(pool) >= 2:
            sample.append((source.dataset.queries[qid].text, [store[d].text for d in pool]))
        if len(sample) == queries:
            break
    return sample


@torch.no_grad()
def hyperplane_agreement(float_model: "TokenCodeEncoder", tokenizer, sample: Sequence[tuple[str, list[str]]],
                         bits: int, seeds: Sequence[int], options: "CodeOptions", device=None,
                         center_vectors: torch.Tensor | None = None) -> list[float]:
    """For each seed, the mean Kendall tau, over ``sample``'s queries, between the float model's MaxSim
    scores of the query's documents and the scores of their ``bits``-bit hashed codes under that seed's
    hyperplanes (:func:`hashed_from_float`: normalised ``R x`` for query tokens, ``sign(R x)`` for document
    tokens, ``x`` the float projections; centred codes with ``center_vectors``, see :func:`hashed_from_float`).
    No relevance label is used: the draw is judged only by how well its codes reproduce the float ranking,
    which is all that hashing can lose. Each text is encoded once."""
    float_model.eval()
    if center_vectors is None:
        planes = [random_hyperplanes(bits, float_model.dim, seed).to(float_model.project.weight.device) for seed in seeds]
        hashed = [None] * len(seeds)
    else:
        hashed = [hashed_from_float(float_model, bits, options.alpha, seed, center_vectors) for seed in seeds]
        planes = [model.hyperplanes for model in hashed]
    taus = np.zeros((len(seeds), len(sample)))
    for column, (query, docs) in enumerate(sample):
        q_ids, q_att = tokenize(tokenizer, [query], options.query_max_length, device)
        d_ids, d_att = tokenize(tokenizer, docs, options.doc_max_length, device)
        with _autocast(device):
            q, q_mask = float_model.project_tokens(q_ids, q_att)
            d, d_mask = float_model.project_tokens(d_ids, d_att)
        q, d = q.float(), d.float()
        reference = maxsim(F.normalize(q, dim=-1) * q_mask[..., None], q_mask,
                           F.normalize(d, dim=-1) * d_mask[..., None], d_mask)[0]
        for row, (plane, model) in enumerate(zip(planes, hashed)):
            if model is not None:  # centred: unit float queries against sign(R (v - mu))
                unit_q = F.normalize(q, dim=-1) * q_mask[..., None]
                codes = model.binary_codes(model.hash_unit_vectors(F.normalize(d, dim=-1)), hard=True)
                taus[row, column] = kendall_tau(reference, model.score(unit_q, q_mask, codes, d_mask)[0])
                continue
            hashed_q = F.normalize(q @ plane.T, dim=-1) * q_mask[..., None]
            codes = float_model.binary_codes(d @ plane.T, hard=True) * d_mask[..., None]  # what the index stores
            taus[row, column] = kendall_tau(reference, maxsim(hashed_q, q_mask, codes, d_mask)[0])
    return taus.mean(axis=1).tolist()


def tokenize(tokenizer, texts: Sequence[str], max_length: int, device=None):
    """``(input_ids, attention_mask)`` of ``texts``, truncated to ``max_length`` and padded to the longest."""
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask


def _autocast(device):
    import contextlib

    if device is not None and torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _set_threads(threads: int | None) -> None:
    from pipeline.core.runtime import set_threads

    set_threads(threads)
    if threads:
        import faiss

        faiss.omp_set_num_threads(threads)


# --------------------------------------------------------------------------------- training data


@dataclass
class TrainingSource:
    """Where an encoder's training queries come from: a dataset, its training query ids and a readable
    description (for logs, metadata and benchmark reports)."""

    dataset: Dataset
    query_ids: list[str]
    description: str

    def key(self) -> str:
        return hashlib.sha1(f"{self.dataset.fingerprint}:{','.join(sorted(self.query_ids))}".encode()).hexdigest()


def _judged_queries(dataset: Dataset, query_ids: Iterable[str]) -> list[str]:
    positive = {q.query_id for q in dataset.qrels if q.relevance > 0}
    return [q for q in query_ids if q in positive and q in dataset.queries]


def resolve_training(dataset: Dataset, train_dataset: "Dataset | str | None" = None,
                     mirror: str | os.PathLike | None = None) -> TrainingSource:
    """The training queries for an index of ``dataset``.

    ``train_dataset`` (a Dataset or a name for :func:`pipeline.datasets.load_dataset`; default the dataset
    itself) gives its ``train`` split; without one, its companion in :data:`TRAINING_COMPANIONS`; without
    that, all its judged queries, unless it is ``dataset`` itself (whose queries are the test queries): then
    the error says to pick another dataset.
    """
    from pipeline.core.datasets import load_dataset

    if train_dataset is None or (isinstance(train_dataset, str) and train_dataset == dataset.name):
        source = dataset
    elif isinstance(train_dataset, str):
        source = load_dataset(train_dataset, mirror)
    else:
        source = train_dataset
    if source.splits.get("train"):
        qids = _judged_queries(source, source.splits["train"])
        description = f"{source.name} (train split)"
    elif source.name in TRAINING_COMPANIONS:
        companion = load_dataset(TRAINING_COMPANIONS[source.name], mirror)
        return TrainingSource(companion, _judged_queries(companion, companion.queries),
                              f"{source.name}: its training queries are {companion.name}")
    elif source is dataset or (source.name == dataset.name and source.fingerprint == dataset.fingerprint):
        raise PipelineError(
            f"dataset {dataset.name!r} has no training queries (no 'train' split) for the learned-code first "
            f"stage, and training on its own queries would test on training data; train the encoder on another "
            f"dataset: --train-dataset NAME (python -m pipeline.index) or CodeOptions(train_dataset=NAME), "
            f"e.g. nfcorpus"
        )
    else:
        qids = _judged_queries(source, source.queries)
        description = f"{source.name} (all judged queries)"
    if not qids:
        raise PipelineError(f"training dataset {source.name!r} has no queries with a relevant document")
    return TrainingSource(source, qids, description)


def bm25_negatives(dataset: Dataset, query_ids: Sequence[str], depth: int, root: Path | None = None) -> dict[str, list[str]]:
    """Non-relevant documents in BM25's top ``depth`` (Lucene first stage) for each query, in rank order."""
    retriever = make_first_stage("bm25", dataset, BM25Settings(index_root=root))
    run = retriever.search([dataset.queries[q] for q in query_ids], depth)
    qrels = dataset.qrels_dict()
    store = dataset.doc_store()
    return {q: [h.doc_id for h in run.get(q, []) if qrels.get(q, {}).get(h.doc_id, 0) <= 0 and h.doc_id in store]
            for q in query_ids}


@dataclass
class TrainingBatch:
    """One contrastive step: query texts, document texts, each query's target document and the documents
    left out of its softmax (other judged-relevant ones)."""

    queries: list[str]
    docs: list[str]
    targets: list[int]
    excluded: list[list[bool]]


class BatchSampler:
    """Seeded batches of (query, one judged-relevant doc, ``hard`` negatives) with in-batch negatives."""

    def __init__(self, source: TrainingSource, negatives: dict[str, list[str]] | None, batch_size: int,
                 hard: int, seed: int):
        store = source.dataset.doc_store()
        qrels = source.dataset.qrels_dict()
        self.store, self.batch_size, self.hard = store, batch_size, hard
        self.rng = random.Random(seed)
        self.negatives = negatives or {}
        self.examples = []
        for qid in source.query_ids:
            relevant = sorted(d for d, r in qrels.get(qid, {}).items() if r > 0 and d in store)
            if relevant:
                self.examples.append((source.dataset.queries[qid], relevant, set(relevant)))
        if not self.examples:
            raise PipelineError(f"{source.description}: no training query has a relevant document in the collection")

    def sample(self) -> TrainingBatch:
        chosen = self.rng.sample(self.examples, min(self.batch_size, len(self.examples)))
        doc_ids, targets = [], []
        for _, relevant, _ in chosen:
            targets.append(len(doc_ids))
            doc_ids.append(self.rng.choice(relevant))
        for query, _, _ in chosen:
            pool = self.negatives.get(query.query_id, [])
            doc_ids.extend(self.rng.sample(pool, min(self.hard, len(pool))))
        excluded = [[d in relevant and j != targets[row] for j, d in enumerate(doc_ids)]
                    for row, (_, _, relevant) in enumerate(chosen)]
        return TrainingBatch([q.text for q, _, _ in chosen], [self.store[d].text for d in doc_ids], targets, excluded)


def contrastive_loss(model, tokenizer, batch: TrainingBatch, options: CodeOptions, device=None):
    """Softmax cross-entropy of each query's target document among all the batch's documents (MaxSim /
    temperature), plus the quantisation loss for binary codes. Returns ``(total, cross_entropy)``."""
    q_ids, q_att = tokenize(tokenizer, batch.queries, options.query_max_length, device)
    d_ids, d_att = tokenize(tokenizer, batch.docs, options.doc_max_length, device)
    with _autocast(device):
        q, q_mask = model.encode_queries(q_ids, q_att)
        d, d_mask, x = model.encode_docs(d_ids, d_att)
    if model.binary and options.straight_through:
        # straight-through: the forward pass scores the sign codes the index will store, the backward pass
        # takes tanh(alpha x)'s gradient; training then ranks with exactly the vectors that are searched
        hard = model.binary_codes(x.float(), hard=True) * d_mask[..., None]
        d = d.float() + (hard - d.float()).detach()
    logits = model.score(q.float(), q_mask, d.float(), d_mask) / options.temperature
    excluded = torch.tensor(batch.excluded, dtype=torch.bool, device=logits.device)
    logits = logits.masked_fill(excluded, float("-inf"))
    targets = torch.tensor(batch.targets, device=logits.device)
    ce = torch.nn.functional.cross_entropy(logits, targets)
    total = ce
    if model.binary and options.quantization_weight > 0:
        x = x.float()
        gap = (torch.tanh(options.alpha * x) - torch.where(x >= 0, 1.0, -1.0)) ** 2
        tokens = d_mask.sum().clamp(min=1)
        total = total + options.quantization_weight * (gap.mean(-1) * d_mask).sum() / tokens
    return total, ce


@dataclass
class TrainingReport:
    steps: int
    losses: list[float]
    seconds: float
    queries: int
    source: str

    def summary(self) -> dict:
        head = self.losses[: max(1, len(self.losses) // 10)]
        tail = self.losses[-max(1, len(self.losses) // 10):]
        return {"steps": self.steps, "queries": self.queries, "source": self.source, "seconds": round(self.seconds, 2),
                "first_loss": round(float(np.mean(head)), 4) if self.losses else None,
                "last_loss": round(float(np.mean(tail)), 4) if self.losses else None}


def train_encoder(options: CodeOptions, source: TrainingSource, negatives: dict[str, list[str]] | None = None,
                  device=None, start: tuple | None = None, steps: int | None = None):
    """Train a :class:`TokenCodeEncoder` on ``source``: a new one (``new_encoder(options)``), or ``start``'s
    ``(tokenizer, model)`` for ``steps`` steps (default ``options.steps``). Returns ``(tokenizer, model,
    report)``; the model is left in eval mode on ``device``."""
    from tqdm.auto import tqdm

    from pipeline.core.runtime import resolve_device, seed_everything

    device = device or resolve_device(options.device)
    steps = options.steps if steps is None else steps
    seed_everything(options.seed)
    tokenizer, model = start if start is not None else new_encoder(options)
    model.to(device)
    sampler = BatchSampler(source, negatives, options.batch_size, options.hard_negatives, options.seed)
    optimizer = torch.optim.AdamW([
        {"params": model.transformer.parameters(), "lr": options.learning_rate},
        {"params": model.project.parameters(), "lr": options.head_learning_rate},
    ])
    base = [group["lr"] for group in optimizer.param_groups]
    warmup = max(1, steps // 10)
    losses: list[float] = []
    started = time.perf_counter()
    model.train()
    bar = tqdm(range(steps), desc=f"training {options.kind} encoder", unit="step",
               **progress_switch(options.progress))
    for step in bar:
        for group, lr in zip(optimizer.param_groups, base):
            group["lr"] = lr * min(1.0, (step + 1) / warmup)
        total, ce = contrastive_loss(model, tokenizer, sampler.sample(), options, device)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(total.detach()))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-10:]):.3f}")
    bar.close()
    model.eval()
    report = TrainingReport(steps, losses, time.perf_counter() - started, len(sampler.examples), source.description)
    log.info("trained %s encoder on %s: %s", options.kind, source.description, report.summary())
    return tokenizer, model, report


# ---------------------------------------------------------------------------------- checkpoints


def save_encoder(model, options: CodeOptions, path: Path, extra: dict | None = None) -> None:
    """Write ``model`` (transformer and projection weights, and what rebuilds it) to ``path`` atomically."""
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    payload = {"format": CHECKPOINT_FORMAT, "options": options.training_fields(), "state_dict": state,
               "skip_ids": model.skip_ids.tolist(), **(extra or {})}
    save_checkpoint(path, payload)


def load_encoder_checkpoint(path: Path, device=None):
    """``(tokenizer, model, options dict)`` from a checkpoint written by :func:`save_encoder` (eval mode)."""
    from pipeline.core.errors import CheckpointError
    from rerankers.encoders import load_encoder

    payload = load_checkpoint(path, "code encoder checkpoint")
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {payload.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    opts = payload["options"]
    tokenizer, transformer = load_encoder(opts["encoder"])
    head = "mlp" if opts.get("hash_head", "mlp") != "lsh" else "centred" if opts.get("hash_center") else "linear"
    model = TokenCodeEncoder(transformer, opts["dim"], opts["kind"] == "codes", opts["alpha"], payload["skip_ids"], head,
                             opts.get("float_dim"))
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:
        raise CheckpointError(f"{path}: does not match encoder {opts['encoder']!r} ({error})") from None
    model.eval()
    if device is not None:
        model.to(device)
    return tokenizer, model, opts


def encoder_path(options: CodeOptions, source: TrainingSource, root: Path | None = None) -> Path:
    """The cache directory of the encoder trained with ``options`` on ``source``."""
    digest = _digest({"options": options.training_fields(), "training": source.key()})
    return (root or code_index_root()) / "code-encoders" / f"{options.kind}-{_safe(source.dataset.name)}-{digest}"


def obtain_encoder(options: CodeOptions, source: TrainingSource, root: Path | None = None, force: bool = False,
                   device=None) -> tuple[Path, dict]:
    """The checkpoint of the encoder for ``options`` and ``source``: from the cache, or trained now (with
    BM25 negatives when ``options.hard_negatives``) and saved atomically. Returns ``(checkpoint, metadata)``."""
    path = encoder_path(options, source, root)
    if (path / ENCODER_META).is_file() and not force:
        return path / ENCODER_FILE, json.loads((path / ENCODER_META).read_text(encoding="utf-8"))
    negatives = None
    if options.hard_negatives and (options.hash_head == "mlp" or options.hash_steps):
        negatives = bm25_negatives(source.dataset, source.query_ids, options.negative_depth, root)
    if options.hash_head == "lsh":
        model, summary = _lsh_encoder(options, source, negatives, root, force, device)
    else:
        _, model, report = train_encoder(options, source, negatives, device)
        summary = report.summary()
    meta = {"options": options.training_fields(), "training": summary, "train_dataset": source.dataset.name,
            "train_fingerprint": source.dataset.fingerprint, "train_queries": len(source.query_ids)}
    with atomic_directory(path) as temp:
        save_encoder(model, options, temp / ENCODER_FILE)
        with atomic_write(temp / ENCODER_META) as handle:
            json.dump(meta, handle, indent=1)
    return path / ENCODER_FILE, meta


def _lsh_encoder(options: CodeOptions, source: TrainingSource, negatives, root: Path | None, force: bool, device):
    """The ``lsh`` binary encoder: the float encoder of ``options.float_options()`` (from the cache, or trained
    now), hashed by :func:`hashed_from_float`, then fine-tuned ``hash_steps`` steps with the binary loss.
    Returns ``(model, training summary)``; the summary is the float encoder's with ``hash_steps`` added."""
    float_checkpoint, float_meta = obtain_encoder(options.float_options(), source, root, force, device)
    tokenizer, float_model, _ = load_encoder_checkpoint(float_checkpoint, device)
    summary = {**(float_meta.get("training") or {}), "hash_steps": options.hash_steps}
    seed = options.hyperplane_seed
    centre, centre_docs = center_sample(float_model, tokenizer, source.dataset, options, device) \
        if options.hash_center else (None, 0)
    if options.hash_draws > 1:
        if negatives is None:
            negatives = bm25_negatives(source.dataset, source.query_ids, options.negative_depth, root)
        seeds = draw_seeds(seed, options.hash_draws)
        sample = agreement_sample(source, negatives, options.seed)
        agreement = hyperplane_agreement(float_model, tokenizer, sample, options.dim, seeds, options, device, centre)
        seed = seeds[int(np.argmax(agreement))]
        summary.update(hash_draws={"seeds": seeds, "kendall_tau": [round(t, 5) for t in agreement],
                                   "queries": len(sample), "chosen": seed})
        log.info("lsh hyperplane draws %s: mean Kendall tau with the float scores %s; keeping %d",
                 seeds, [f"{t:.4f}" for t in agreement], seed)
    model = hashed_from_float(float_model, options.dim, options.alpha, seed, centre)
    if centre is not None:
        summary.update(hash_center=centring_summary(model, centre_docs, len(centre)))
    if options.hash_steps:
        _, model, report = train_encoder(options, source, negatives, device, start=(tokenizer, model),
                                         steps=options.hash_steps)
        fine = report.summary()
        summary.update(hash_first_loss=fine["first_loss"], hash_last_loss=fine["last_loss"],
                       seconds=round(summary.get("seconds", 0) + fine["seconds"], 2))
    return model, summary


def _file_sha1(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------- indexes


def index_path(dataset: Dataset, options: CodeOptions, source: TrainingSource, root: Path | None = None) -> Path:
    """The cache directory of ``dataset``'s code index with ``options`` and training data ``source``."""
    digest = _digest({"dataset": dataset.fingerprint, "options": options.key_fields(), "training": source.key()})
    return (root or code_index_root()) / f"{_safe(dataset.name)}-{options.kind}-{digest}"


def is_complete(path: Path) -> bool:
    """True when ``path`` holds a finished code index (its metadata file is written last)."""
    return (Path(path) / META_FILE).is_file()


def index_metadata(path: Path) -> dict:
    return json.loads((Path(path) / META_FILE).read_text(encoding="utf-8"))


def index_size_bytes(path: Path) -> int:
    """Size of the faiss index file (the codes / vectors and, for HNSW, the graph)."""
    return (Path(path) / FAISS_FILE).stat().st_size


def find_code_index(dataset: Dataset, kind: str, root: Path | None = None) -> Path | None:
    """The most recently built complete ``kind`` index of ``dataset`` (same fingerprint) in the cache, if any."""
    root = root or code_index_root()
    if not root.is_dir():
        return None
    found = []
    for path in root.glob(f"{_safe(dataset.name)}-{kind}-*"):
        if is_complete(path):
            meta = index_metadata(path)
            if meta.get("fingerprint") == dataset.fingerprint and meta.get("kind") == kind:
                found.append(((path / META_FILE).stat().st_mtime_ns, path))
    return max(found)[1] if found else None


def _chunks(docs: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for doc in docs:
        chunk.append(doc)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encode_documents(model, tokenizer, texts: Sequence[str], options: CodeOptions, device=None):
    """Token vectors of ``texts``: ``(vectors, lengths)`` with vectors ``[sum(lengths), dim]`` float32 (float
    kind) or ``[sum(lengths), dim / 8]`` packed uint8 codes (binary kind), in document order. Batches are
    formed by token length (less padding)."""
    lengths_in = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=options.doc_max_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths_in[i], i))
    per_doc: list = [None] * len(texts)
    with torch.inference_mode():
        for start in range(0, len(order), options.encode_batch_size):
            rows = order[start : start + options.encode_batch_size]
            ids, att = tokenize(tokenizer, [texts[i] for i in rows], options.doc_max_length, device)
            with _autocast(device):
                vectors, mask, _ = model.encode_docs(ids, att, hard=True)
            vectors, mask = vectors.float().cpu().numpy(), mask.cpu().numpy()
            for row, i in enumerate(rows):
                per_doc[i] = vectors[row][mask[row]]
    width = options.dim // 8 if options.binary else options.dim
    dtype = np.uint8 if options.binary else np.float32
    lengths = np.array([len(v) for v in per_doc], dtype=np.int32)
    stacked = np.concatenate(per_doc) if per_doc and lengths.sum() else np.zeros((0, options.dim), np.float32)
    if options.binary:
        stacked = pack_codes(stacked) if len(stacked) else np.zeros((0, width), dtype)
    return np.ascontiguousarray(stacked, dtype=dtype), lengths


def _new_faiss_index(options: CodeOptions):
    import faiss

    if options.binary:
        if options.index_type == "hnsw":
            return faiss.IndexBinaryHNSW(options.dim, options.hnsw_m)
        return faiss.IndexBinaryFlat(options.dim)
    if options.index_type == "hnsw":
        return faiss.IndexHNSWFlat(options.dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    return faiss.IndexFlatIP(options.dim)


def build_code_index(
    dataset: Dataset,
    options: CodeOptions = CodeOptions(),
    root: Path | None = None,
    force: bool = False,
    train_dataset: "Dataset | str | None" = None,
    mirror: str | os.PathLike | None = None,
) -> Path:
    """Build (or find in the cache) ``dataset``'s code index; returns its directory.

    ``train_dataset`` (a Dataset or a name) overrides ``options.train_dataset``. ``force`` retrains the
    encoder and re-encodes every document.
    """
    from tqdm.auto import tqdm

    from pipeline.core.runtime import resolve_device

    root = Path(root) if root is not None else code_index_root()
    source = resolve_training(dataset, train_dataset if train_dataset is not None else options.train_dataset, mirror)
    path = index_path(dataset, options, source, root)
    if is_complete(path) and not force:
        return path
    _set_threads(options.threads)
    started = time.perf_counter()
    device = resolve_device(options.device)
    checkpoint, encoder_meta = obtain_encoder(options, source, root, force, device)
    tokenizer, model, _ = load_encoder_checkpoint(checkpoint, device)
    centring = None
    if options.hash_center:  # the center of this collection's tokens, not of the training documents'
        sample, documents = center_sample(model, tokenizer, dataset, options, device)
        recentre(model, sample)
        centring = centring_summary(model, documents, len(sample))

    shards = root / f".{path.name}.shards"
    manifest = {"index": path.name, "encoder_sha1": _file_sha1(checkpoint), "shard_size": options.shard_size,
                **({"center": [round(float(x), 6) for x in model.center]} if centring else {})}
    if shards.is_dir():
        try:
            previous = json.loads((shards / SHARD_MANIFEST).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            previous = None
        if force or previous != manifest:
            shutil.rmtree(shards)
    if not shards.is_dir():
        shards.mkdir(parents=True)
        with atomic_write(shards / SHARD_MANIFEST) as handle:
            json.dump(manifest, handle)

    total = len(dataset._store) if dataset._store is not None else None
    shard_files = []
    resumed = 0
    with tqdm(total=total, desc=f"encoding {dataset.name} docs ({options.kind})", unit="doc",
              **progress_switch(options.progress)) as bar:
        for number, chunk in enumerate(_chunks(dataset.docs_iter(), options.shard_size)):
            shard = shards / f"shard-{number:05d}.npz"
            ids = [doc.doc_id for doc in chunk]
            if shard.is_file():
                with np.load(shard, allow_pickle=False) as stored:
                    if stored["doc_ids"].tolist() == ids:
                        shard_files.append(shard)
                        resumed += 1
                        bar.update(len(chunk))
                        continue
                log.warning("%s: documents changed since the interrupted build; re-encoding from here", shard)
                for stale in shards.glob("shard-*.npz"):
                    if int(stale.stem.split("-")[1]) >= number:
                        stale.unlink()
            vectors, lengths = encode_documents(model, tokenizer, [doc.text for doc in chunk], options, device)
            with atomic_write(shard, "wb") as handle:
                np.savez(handle, doc_ids=np.array(ids, dtype=str), lengths=lengths, vectors=vectors)
            shard_files.append(shard)
            bar.update(len(chunk))
    if not shard_files:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to index")
    if resumed:
        log.info("resumed %s: %d of %d shards were already encoded", path.name, resumed, len(shard_files))

    import faiss

    with atomic_directory(path) as temp:
        doc_ids, lengths, parts = [], [], []
        for shard in shard_files:
            with np.load(shard, allow_pickle=False) as stored:
                doc_ids.extend(stored["doc_ids"].tolist())
                lengths.append(stored["lengths"])
                parts.append(stored["vectors"])
        lengths = np.concatenate(lengths)
        vectors = np.ascontiguousarray(np.concatenate(parts))
        if len(vectors) == 0:
            raise PipelineError(f"dataset {dataset.name!r}: no document has a token to index")
        index = _new_faiss_index(options)
        index.add(vectors)
        if options.binary:
            faiss.write_index_binary(index, str(temp / FAISS_FILE))
        else:
            faiss.write_index(index, str(temp / FAISS_FILE))
        np.save(temp / TOKEN_DOCS_FILE, np.repeat(np.arange(len(doc_ids), dtype=np.int32), lengths))
        with atomic_write(temp / DOC_IDS_FILE) as handle:
            json.dump(doc_ids, handle)
        if centring is not None:
            save_encoder(model, options, temp / ENCODER_FILE)
        else:
            try:
                os.link(checkpoint, temp / ENCODER_FILE)
            except OSError:
                shutil.copyfile(checkpoint, temp / ENCODER_FILE)
        meta = {
            "kind": options.kind, "dataset": dataset.name, "source": dataset.source, "fingerprint": dataset.fingerprint,
            "encoder": options.encoder, "options": options.key_fields(), "train": {
                "dataset": source.dataset.name, "description": source.description,
                "fingerprint": source.dataset.fingerprint, "queries": len(source.query_ids),
                "report": encoder_meta.get("training")},
            "documents": len(doc_ids), "vectors": int(len(vectors)), "index_bytes": (temp / FAISS_FILE).stat().st_size,
            "seconds": round(time.perf_counter() - started, 2),
            **({"hash_center": centring} if centring is not None else {}),
        }
        with atomic_write(temp / META_FILE) as handle:
            json.dump(meta, handle, indent=1)
    shutil.rmtree(shards, ignore_errors=True)
    log.info("built %s: %d documents, %d vectors", path, len(doc_ids), len(vectors))
    return path


# ---------------------------------------------------------------------------------------- search


def _gpu_index(index, binary: bool):
    """``index`` on the first GPU when faiss sees one and supports the index type there, else ``index``."""
    import faiss

    try:
        if not getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
            return index
        resources = faiss.StandardGpuResources()
        if binary:
            if isinstance(index, faiss.IndexBinaryFlat) and hasattr(faiss, "GpuIndexBinaryFlat"):
                gpu = faiss.GpuIndexBinaryFlat(resources, index)
                gpu.referenced_objects = [resources]
                return gpu
            return index
        if isinstance(index, faiss.IndexFlat):
            gpu = faiss.index_cpu_to_gpu(resources, 0, index)
            gpu.referenced_objects = [resources]  # keep the resources alive with the index
            return gpu
    except Exception as error:  # noqa: BLE001 - a GPU problem must not break CPU search
        log.warning("faiss GPU unavailable for this index (%s); searching on the CPU", error)
    return index


def _stored_vectors(index, binary: bool, count: int, width: int) -> np.ndarray:
    """A numpy view (no copy) of the vectors / codes inside a CPU flat or HNSW faiss index."""
    import faiss

    if binary:
        storage = index if isinstance(index, faiss.IndexBinaryFlat) else faiss.downcast_IndexBinary(index.storage)
        pointer = storage.xb.data()
    else:
        storage = index if isinstance(index, faiss.IndexFlat) else faiss.downcast_index(index.storage)
        pointer = storage.get_xb()
    return faiss.rev_swig_ptr(pointer, count * width).reshape(count, width)


class CodeRetriever:
    """Search a code index built by :func:`build_code_index` (``search(queries, k) -> Run``).

    Each query token's ``k_prime`` nearest vectors (Hamming distance between the query's sign pattern and
    the codes, or inner product between normalised vectors) name the candidate documents; candidates are
    ranked by exact MaxSim between the query's real-valued token vectors and all their token vectors.
    """

    def __init__(self, path: Path, k_prime: int = 256, batch_size: int = 32, device: str = "auto",
                 threads: int | None = None, gpu: bool = True):
        import faiss

        from pipeline.core.runtime import resolve_device

        path = Path(path)
        if not is_complete(path):
            raise PipelineError(f"{path}: not a finished code index (build it with python -m pipeline.index --kind codes)")
        if k_prime <= 0:
            raise PipelineError(f"k_prime must be positive, got {k_prime}")
        _set_threads(threads)
        self.path, self.k_prime, self.batch_size = path, k_prime, batch_size
        self.meta = index_metadata(path)
        self.name = self.kind = self.meta["kind"]
        self.binary = self.kind == "codes"
        self.device = resolve_device(device)
        self.tokenizer, self.model, opts = load_encoder_checkpoint(path / ENCODER_FILE, self.device)
        self.dim = opts["dim"]
        self.query_max_length = opts["query_max_length"]
        self.doc_ids: list[str] = json.loads((path / DOC_IDS_FILE).read_text(encoding="utf-8"))
        self.token_docs = np.load(path / TOKEN_DOCS_FILE)
        lengths = np.bincount(self.token_docs, minlength=len(self.doc_ids))
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.index_bytes = index_size_bytes(path)
        reader = faiss.read_index_binary if self.binary else faiss.read_index
        self._cpu_index = reader(str(path / FAISS_FILE))
        width = self.dim // 8 if self.binary else self.dim
        self.vectors = _stored_vectors(self._cpu_index, self.binary, int(self._cpu_index.ntotal), width)
        self.index = _gpu_index(self._cpu_index, self.binary) if gpu else self._cpu_index
        if hasattr(self._cpu_index, "hnsw"):
            self._cpu_index.hnsw.efSearch = max(self._cpu_index.hnsw.efSearch, k_prime)

    # query side
    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each query's token vectors (``[tokens, dim]`` float32, L2-normalised; special tokens dropped)."""
        result = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                ids, att = tokenize(self.tokenizer, texts[start : start + self.batch_size], self.query_max_length,
                                    self.device)
                with _autocast(self.device):
                    q, mask = self.model.encode_queries(ids, att)
                q, mask = q.float().cpu().numpy(), mask.cpu().numpy()
                result.extend(q[row][mask[row]] for row in range(len(q)))
        return result

    # document side
    def doc_vectors(self, doc_numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All token vectors of the given documents (float32; +-1 for codes) and each document's count."""
        starts, ends = self.offsets[doc_numbers], self.offsets[doc_numbers + 1]
        counts = ends - starts
        total = int(counts.sum())
        rows = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(total)
        vectors = self.vectors[rows]
        if self.binary:
            vectors = unpack_codes(vectors, self.dim)
        return vectors, counts

    def maxsim_scores(self, query_vectors: np.ndarray, doc_numbers: np.ndarray, chunk: int = 256) -> np.ndarray:
        """Exact MaxSim of one query against documents (each must have at least one vector)."""
        scale = 1.0 / math.sqrt(self.dim) if self.binary and not self.model.centred else 1.0
        scores = np.zeros(len(doc_numbers), dtype=np.float32)
        if len(query_vectors) == 0:
            return scores
        for start in range(0, len(doc_numbers), chunk):
            part = doc_numbers[start : start + chunk]
            vectors, counts = self.doc_vectors(part)
            sims = self._centred_similarity(vectors, query_vectors) if self.model.centred else vectors @ query_vectors.T
            bounds = np.concatenate([[0], np.cumsum(counts)[:-1]])
            scores[start : start + len(part)] = np.maximum.reduceat(sims, bounds, axis=0).sum(axis=1) * scale
        return scores

    def _centred_similarity(self, codes: np.ndarray, query_vectors: np.ndarray) -> np.ndarray:
        """:meth:`TokenCodeEncoder.decoded_similarity` of a centred head, on the model's device."""
        device = self.model.center.device
        with torch.inference_mode():
            sims = self.model.decoded_similarity(torch.from_numpy(codes).to(device),
                                                 torch.from_numpy(np.ascontiguousarray(query_vectors)).to(device))
        return sims.float().cpu().numpy()

    def candidates(self, query_vectors: np.ndarray) -> np.ndarray:
        """Documents of the ``k_prime`` nearest vectors of each query token (sorted doc numbers)."""
        if len(query_vectors) == 0:
            return np.zeros(0, dtype=np.int64)
        k = min(self.k_prime, int(self._cpu_index.ntotal))
        if self.index is not self._cpu_index:
            k = min(k, GPU_MAX_K)
        if self.binary:
            if self.model.centred:
                with torch.inference_mode():
                    keys = self.model.hash_unit_vectors(torch.from_numpy(query_vectors).to(self.model.center.device))
                query_vectors = keys.float().cpu().numpy()
            _, labels = self.index.search(pack_codes(query_vectors), k)
        else:
            _, labels = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), k)
        labels = labels[labels >= 0]
        return np.unique(self.token_docs[labels]).astype(np.int64)

    def _ranking(self, query: Query, vectors: np.ndarray, docs: np.ndarray, k: int) -> list[ScoredDoc]:
        if len(docs) == 0:
            return []
        scores = self.maxsim_scores(vectors, docs)
        hits = sorted(zip(scores.tolist(), (self.doc_ids[d] for d in docs)), key=lambda h: (-h[0], h[1]))
        return [ScoredDoc(query.query_id, doc_id, float(score)) for score, doc_id in hits[:k]]

    def search(self, queries: Iterable[Query], k: int = 1000, exhaustive: bool = False) -> Run:
        """Top-``k`` documents for every query (score descending, ties by doc id). ``exhaustive`` scores every
        document instead of the kNN candidates (brute-force MaxSim, for checks)."""
        from tqdm.auto import tqdm

        queries = list(queries)
        run: Run = {}
        everything = np.flatnonzero(np.diff(self.offsets) > 0)
        with tqdm(total=len(queries), desc=f"{self.name} search", unit="query",
                  **progress_switch(len(queries) >= 64)) as bar:
            for start in range(0, len(queries), self.batch_size):
                chunk = queries[start : start + self.batch_size]
                for query, vectors in zip(chunk, self.encode_queries([q.text for q in chunk])):
                    docs = everything if exhaustive else self.candidates(vectors)
                    run[query.query_id] = self._ranking(query, vectors, docs, k)
                bar.update(len(chunk))
        return run

    def close(self) -> None:
        """Nothing to release (the index is in memory); for symmetry with BM25Retriever."""


def _code_first_stage(kind: str, dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    options = settings.codes
    path = None
    if options is None:
        path = find_code_index(dataset, kind, settings.index_root)
        options = CodeOptions(kind=kind)
    else:  # one CodeOptions serves both kinds; a hash head is a binary-codes option
        binary_only = {"hash_head": "mlp", "hash_seed": None} if kind == "colbert" else {}
        options = dataclasses.replace(options, kind=kind, **binary_only)
    if path is None:
        path = build_code_index(dataset, options, settings.index_root)
    return CodeRetriever(path, k_prime=options.k_prime, device=options.device, threads=options.threads)


def codes_first_stage(dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    """``codes``: binary per-token codes in a faiss binary index (options from ``settings.codes``; without
    them, the dataset's most recent index of this kind, or one built with the default options)."""
    return _code_first_stage("codes", dataset, settings)


def colbert_first_stage(dataset: Dataset, settings: BM25Settings) -> "CodeRetriever":
    """``colbert``: L2-normalised float token vectors in a faiss float index (see :func:`codes_first_stage`)."""
    return _code_first_stage("colbert", dataset, settings)
