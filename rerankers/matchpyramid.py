"""MatchPyramid: a 2-D convolution over the word matching matrix, as a word-level re-ranker.

No paper text is in the repository for this model: it is implemented from the original paper as
published, cited below by section with the formula written out (equation numbers only where we are
sure of them; check them against the PDFs before quoting). Every choice where a paper is silent, or
where we depart from it, is written down here and again where it is made.

* **MatchPyramid** -- Pang, Lan, Guo, Xu, Wan, Cheng. *Text Matching as Image Recognition*, AAAI 2016,
  and Pang, Lan, Guo, Xu, Cheng. *A Study of MatchPyramid Models on Ad-hoc Retrieval*, Neu-IR 2016.
  AAAI Sec. 3.1: a matching matrix ``M_ij = w_i (x) v_j`` of word similarities (indicator, cosine or
  dot product; the Neu-IR study also compares a Gaussian kernel ``exp(-||w_i - v_j||^2)``). Sec. 3.2: a
  2-D convolution with ReLU over the matrix, then dynamic max pooling whose window sizes follow the two
  texts' lengths so the output grid has a fixed size. Sec. 3.3: a two-layer MLP gives the score.

Choices shared by the four classic baselines (embeddings, OOV words, training defaults, KNRM's log scale):
see :mod:`rerankers.neural`, section "Classic baselines".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from rerankers.blocks import (
    build_embedding, cosine_matrix, dot_matrix, feed_forward, interaction_mask,
    masked_dynamic_max_pool2d, masked_fill_padding,
)
from rerankers.neural import PAIRWISE_DEFAULTS, WordReranker, require


SIMILARITIES = ("cosine", "dot", "indicator", "gaussian")


@dataclass
class MatchPyramidConfig:
    """MatchPyramid hyper-parameters: one convolution layer and one dynamic pooling layer.

    The papers stack one or more such layers and sweep kernel and pooling sizes; one layer, 32 kernels
    of 3x3, a 3x10 (query x document) pooling grid and 128 MLP hidden units are our defaults, sized
    for short queries and passages.
    """

    similarity: str = "cosine"   # cosine | dot | indicator (AAAI Sec. 3.1) | gaussian (Neu-IR study)
    num_filters: int = 32        # convolution kernels (output channels)
    kernel_height: int = 3       # kernel extent over query positions
    kernel_width: int = 3        # kernel extent over document positions
    pool_query: int = 3          # dynamic pooling grid rows
    pool_doc: int = 10           # dynamic pooling grid columns
    hidden_size: int = 128       # MLP hidden units (Sec. 3.3)

    def __post_init__(self) -> None:
        require(self.similarity in SIMILARITIES, f"similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        for field_name in ("num_filters", "kernel_height", "kernel_width", "pool_query", "pool_doc", "hidden_size"):
            value = getattr(self, field_name)
            require(value >= 1, f"{field_name} must be >= 1, got {value}")


class MatchPyramidModel(nn.Module):
    """MatchPyramid (Pang et al., AAAI 2016): matching matrix -> 2-D conv + ReLU -> dynamic pooling -> MLP.

    The convolution is zero-padded to keep the matrix size ("same"; the extra row/column of an even
    kernel goes below/right). Cells outside a pair's real region are zeros, exactly like the
    convolution's border padding, and :func:`~rerankers.blocks.masked_dynamic_max_pool2d` pools only
    the real region with windows computed from the pair's own lengths, so padding never changes a score.
    """

    def __init__(self, config: MatchPyramidConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = False) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (copied).
            freeze_embeddings: keep them fixed.
        """
        super().__init__()
        self.config = config
        # the indicator matrix compares ids only; an unused embedding table would just bloat checkpoints
        self.embedding = None if config.similarity == "indicator" else build_embedding(embedding_weights, freeze=freeze_embeddings)
        self.conv = nn.Conv2d(1, config.num_filters, (config.kernel_height, config.kernel_width))
        rows, cols = config.kernel_height - 1, config.kernel_width - 1
        self.conv_padding = (cols // 2, cols - cols // 2, rows // 2, rows - rows // 2)
        self.mlp = feed_forward([config.num_filters * config.pool_query * config.pool_doc, config.hidden_size, 1])

    def matching_matrix(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """``[B, Lq, Ld]`` word-by-word similarities, exactly 0 in every padding cell."""
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        cells = interaction_mask(query_mask, doc_mask)
        kind = self.config.similarity
        if kind == "indicator":
            matrix = (query_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)).float()
        else:
            query = masked_fill_padding(self.embedding(query_ids), query_mask)
            doc = masked_fill_padding(self.embedding(doc_ids), doc_mask)
            if kind == "cosine":
                matrix = cosine_matrix(query, doc, query_mask, doc_mask)
            elif kind == "dot":
                matrix = dot_matrix(query, doc)
            else:
                # ||u - v||^2 expanded, so no [B, Lq, Ld, E] difference tensor is built
                squared = (query * query).sum(-1).unsqueeze(-1) + (doc * doc).sum(-1).unsqueeze(-2) - 2 * dot_matrix(query, doc)
                matrix = torch.exp(-squared.clamp_min(0.0))
        return matrix.masked_fill(~cells, 0.0)

    def pooled_features(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """``[B, num_filters, pool_query, pool_doc]``: the convolved matrix after dynamic max pooling."""
        matrix = self.matching_matrix(query_ids, query_mask, doc_ids, doc_mask)
        feature_maps = F.relu(self.conv(F.pad(matrix.unsqueeze(1), self.conv_padding)))
        grid = (self.config.pool_query, self.config.pool_doc)
        return masked_dynamic_max_pool2d(feature_maps, query_mask.bool(), doc_mask.bool(), grid)

    def forward(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[B]`` (see :meth:`rerankers.knrm.KernelRanker.forward` for the inputs)."""
        return self.mlp(self.pooled_features(query_ids, query_mask, doc_ids, doc_mask).flatten(1)).squeeze(-1)


class MatchPyramidReranker(WordReranker):
    """``--reranker matchpyramid``: :class:`MatchPyramidModel` on the word-level framework.

    Trained with the pairwise hinge loss like the other three ad-hoc baselines; the AAAI paper trains a
    classifier with softmax cross-entropy, which ``--set loss=pointwise`` (two classes on one logit) or
    ``--set loss=softmax`` (one positive among sampled negatives) reproduces.
    """

    name: ClassVar[str] = "matchpyramid"
    model_config_class: ClassVar[type] = MatchPyramidConfig
    train_defaults: ClassVar[dict] = dict(PAIRWISE_DEFAULTS)

    module_class: ClassVar[type] = MatchPyramidModel
