"""The token encoder of the code indexes (:class:`TokenCodeEncoder`: transformer, projection, one vector or
binary code per token), bit packing and MaxSim over its vectors."""

from __future__ import annotations

import logging
import math
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core.errors import PipelineError
from infra.maxsim import maxsim as late_interaction

from .options import CodeOptions

log = logging.getLogger(__name__)


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
    ``[Nd, Ld, dim]``, masks boolean ``[N, L]`` (:func:`infra.maxsim.maxsim` with ``all_pairs``)."""
    return late_interaction(q, q_mask, d, d_mask, all_pairs=True)


class TokenCodeEncoder(nn.Module):
    """Transformer -> projection -> one ``dim``-vector per (non-special, non-padding) token.

    Binary: ADDAX's hashing MLP (tanh, ReLU, linear; ``head="mlp"``) or one linear map (``head="linear"``,
    the hyperplanes of :func:`~indexes.codes.hashing.hashed_from_float`), documents ``tanh(alpha x)`` while
    training and
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


class QueryVectors(nn.Module):
    """``encoder``'s query side as one ``forward(input_ids, attention_mask) -> [B, L, dim]`` (L2-normalised
    projections of every position, the mask not applied): the graph :class:`infra.onnx_runtime.OnnxEncoder`
    exports. :meth:`TokenCodeEncoder.token_mask` gives the positions that keep a vector."""

    def __init__(self, encoder: TokenCodeEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return F.normalize(self.encoder.project(hidden.float()), dim=-1)


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
    from infra.encoders import load_encoder

    tokenizer, transformer = load_encoder(options.encoder)
    return tokenizer, TokenCodeEncoder(transformer, options.dim, options.binary, options.alpha, skip_token_ids(tokenizer))



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


