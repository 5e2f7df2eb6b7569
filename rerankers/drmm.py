"""DRMM: matching histograms and a term gating network, as a word-level re-ranker.

No paper text is in the repository for this model: it is implemented from the original paper as
published, cited below by section with the formula written out (equation numbers only where we are
sure of them; check them against the PDFs before quoting). Every choice where a paper is silent, or
where we depart from it, is written down here and again where it is made.

* **DRMM** -- Guo, Fan, Ai, Croft. *A Deep Relevance Matching Model for Ad-hoc Retrieval*, CIKM 2016.
  Sec. 3: a matching histogram ``z_i^(0) = h(w_i^(q) (x) d)`` of each query term's cosines with the
  document words ("Matching Histogram Mapping"; the log-count histogram "LCH" is the paper's best), here
  with 30 bins, the last one holding exact matches only; a feed-forward matching network
  ``z_i^(l) = tanh(W^(l) z_i^(l-1) + b^(l))`` shared by all query terms, 30-5-1; a term gating network
  ``g_i = exp(w_g x_i) / sum_j exp(w_g x_j)`` with ``x_i`` the term's IDF (``DRMM_LCHxIDF``; the
  term-vector variant "TV" is ``--set gating=tv``); score ``s = sum_i g_i z_i^(L)``; trained with the
  pairwise hinge loss ``max(0, 1 - s(q, d+) + s(q, d-))``.

Choices shared by the four classic baselines (embeddings, OOV words, training defaults, KNRM's log scale):
see :mod:`rerankers.neural`, section "Classic baselines".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn as nn

from rerankers.blocks import build_embedding, cosine_matrix, feed_forward, masked_softmax, matching_histogram
from rerankers.neural import PAIRWISE_DEFAULTS, WordReranker, require


HISTOGRAM_MODES = ("ch", "nh", "lch")
GATING_INPUTS = ("idf", "tv")


def _layer_sizes(spec: str) -> list[int]:
    try:
        sizes = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"hidden_sizes must be comma-separated integers, got {spec!r}") from None
    require(all(size >= 1 for size in sizes), f"hidden_sizes must be positive, got {spec!r}")
    return sizes


@dataclass
class DRMMConfig:
    """DRMM hyper-parameters; defaults are the paper's best, ``DRMM_LCHxIDF`` with a 30-5-1 network."""

    bins: int = 30               # histogram bins, the exact-match bin included
    histogram: str = "lch"       # ch (counts) | nh (normalised) | lch (log counts), Sec. 3.1
    gating: str = "idf"          # term gating input: idf | tv (term vector)
    hidden_sizes: str = "5"      # hidden tanh layers between the histogram and the 1-unit output

    def __post_init__(self) -> None:
        require(self.bins >= 2, f"bins must be >= 2 (exact match + soft bins), got {self.bins}")
        require(self.histogram in HISTOGRAM_MODES, f"histogram must be one of {HISTOGRAM_MODES}, got {self.histogram!r}")
        require(self.gating in GATING_INPUTS, f"gating must be one of {GATING_INPUTS}, got {self.gating!r}")
        _layer_sizes(self.hidden_sizes)


class DRMMModel(nn.Module):
    """DRMM (Guo et al., CIKM 2016): per-term matching histograms -> tanh network -> gated sum.

    Embeddings are always frozen (see the module docstring). With ``gating="idf"`` the gate is one
    learned scalar ``w_g`` on each term's IDF, initialised to 1 so that training starts from plain
    softmax-of-IDF term weights (the paper gives no initialisation); the softmax makes any bias moot.
    """

    def __init__(self, config: DRMMConfig, embedding_weights: torch.Tensor) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` word vectors (copied, kept fixed).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights, freeze=True)
        # the paper puts tanh on every layer, the output unit included, so each term scores in [-1, 1]
        self.matching_network = nn.Sequential(
            feed_forward([config.bins, *_layer_sizes(config.hidden_sizes), 1], activation=nn.Tanh), nn.Tanh()
        )
        if config.gating == "idf":
            self.gate_weight = nn.Parameter(torch.ones(1))
        else:
            self.gate_weight = nn.Parameter(torch.empty(embedding_weights.shape[1]))
            nn.init.normal_(self.gate_weight, std=embedding_weights.shape[1] ** -0.5)

    def histograms(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """``[B, Lq, bins]`` matching histograms of the embedding cosines (zero rows at query padding)."""
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        similarity = cosine_matrix(self.embedding(query_ids), self.embedding(doc_ids), query_mask, doc_mask)
        return matching_histogram(similarity, query_mask, doc_mask, self.config.bins, self.config.histogram)

    def term_gates(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, query_idf: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Term gating weights ``g_i = softmax_i(w_g x_i)``: ``[B, Lq]``, summing to 1 over each query's real terms, 0 at padding."""
        query_mask = query_mask.bool()
        if self.config.gating == "idf":
            if query_idf is None or query_idf.shape != query_ids.shape:
                got = None if query_idf is None else tuple(query_idf.shape)
                raise ValueError(f"query_idf must have shape {tuple(query_ids.shape)} with gating='idf', got {got}")
            logits = self.gate_weight * query_idf.to(self.gate_weight.dtype)
        else:
            logits = self.embedding(query_ids) @ self.gate_weight
        return masked_softmax(logits, query_mask, dim=-1)

    def forward(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        doc_ids: torch.Tensor,
        doc_mask: torch.Tensor,
        query_idf: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores ``[B]``; ``query_idf`` ``[B, Lq]`` (any value at padding) is required with IDF gating."""
        term_scores = self.matching_network(self.histograms(query_ids, query_mask, doc_ids, doc_mask)).squeeze(-1)
        return (self.term_gates(query_ids, query_mask, query_idf) * term_scores).sum(dim=-1)


class DRMMReranker(WordReranker):
    """``--reranker drmm``: :class:`DRMMModel` with the collection's IDF for term gating, pairwise hinge loss.

    IDF comes from the document frequencies of the collection the model is prepared on
    (:class:`pipeline.core.vocabulary.IDFStatistics`), as the paper computes it on its test collections.
    """

    name: ClassVar[str] = "drmm"
    model_config_class: ClassVar[type] = DRMMConfig
    train_defaults: ClassVar[dict] = {**PAIRWISE_DEFAULTS, "learning_rate": 1e-2}

    def build_module(self, embedding_weights: torch.Tensor) -> DRMMModel:
        """A fresh :class:`DRMMModel` on ``embedding_weights``.

        Args:
            embedding_weights: ``[V, E]`` initial word vectors.

        Returns:
            The module.
        """
        return DRMMModel(self.model_config, embedding_weights.float())

    def features(self, query_tokens: Sequence[Sequence[str]], query_length: int) -> dict:
        """The query terms' IDF for IDF gating; nothing for term-vector gating.

        Args:
            query_tokens: each pair's query tokens, truncated.
            query_length: the padded query length of the batch.

        Returns:
            ``{"query_idf": [B, Lq]}`` (0 at padding), or ``{}``.
        """
        if self.model_config.gating != "idf":
            return {}
        idf = torch.zeros(len(query_tokens), query_length)
        for row, tokens in enumerate(query_tokens):
            if tokens:
                idf[row, : len(tokens)] = torch.tensor([self.idf.idf(token) for token in tokens])
        return {"query_idf": idf}
