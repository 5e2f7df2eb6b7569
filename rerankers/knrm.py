"""KNRM and Conv-KNRM: kernel pooling over word-embedding similarities, as word-level re-rankers.

No paper text is in the repository for this model: it is implemented from the original paper as
published, cited below by section with the formula written out (equation numbers only where we are
sure of them; check them against the PDFs before quoting). Every choice where a paper is silent, or
where we depart from it, is written down here and again where it is made.

* **KNRM** -- Xiong, Dai, Callan, Liu, Power. *End-to-End Neural Ad-hoc Ranking with Kernel Pooling*,
  SIGIR 2017. Sec. 3: translation matrix ``M_ij = cos(v_ti, v_dj)`` of word embeddings; kernel pooling
  ``K_k(M_i) = sum_j exp(-(M_ij - mu_k)^2 / (2 sigma_k^2))`` (soft-TF of query word i in kernel k) and
  ``phi(M) = sum_i log K(M_i)``; learning to rank ``f(q, d) = tanh(w^T phi(M) + b)`` trained with the
  pairwise hinge loss ``max(0, 1 - f(q, d+) + f(q, d-))``. Experimental setup (Sec. 4): 11 kernels, an
  exact-match kernel ``mu=1, sigma=1e-3`` and 10 soft-match kernels ``mu = 0.9, 0.7, ..., -0.9``,
  ``sigma=0.1`` (:func:`~rerankers.blocks.kernel_mus_sigmas`).
* **Conv-KNRM** -- Dai, Xiong, Callan, Liu. *Convolutional Neural Networks for Soft-Matching N-Grams in
  Ad-hoc Search*, WSDM 2018. h-gram embeddings ``g_i^h = relu(W^h T_{i:i+h} + b^h)`` for h = 1..3 with
  128 filters, shared by query and document (Sec. 3.2); cross-matching of every query h-gram size with
  every document h-gram size (h_max^2 = 9 cosine matrices, Sec. 3.3); kernel pooling of each matrix with
  the same 11 kernels and concatenation (Sec. 3.4); ``tanh`` learning-to-rank layer and pairwise hinge
  loss (Sec. 3.5).

Choices shared by the four classic baselines (embeddings, OOV words, training defaults, KNRM's log scale):
see :mod:`rerankers.neural`, section "Classic baselines".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from rerankers.blocks import (
    MaskedConv1d, build_embedding, cosine_matrix, gaussian_kernel_pooling, kernel_mus_sigmas,
)
from rerankers.neural import PAIRWISE_DEFAULTS, WordReranker, require


class KernelPooling(nn.Module):
    """K-NRM kernel pooling (Xiong et al. 2017, Sec. 3): ``[B, Lq, Ld]`` similarities -> ``K`` summed log soft-TF features.

    Wraps :func:`~rerankers.blocks.gaussian_kernel_pooling` with the kernels of
    :func:`~rerankers.blocks.kernel_mus_sigmas` stored as (non-persistent) buffers, so they follow the
    module to its device and checkpoints hold only learned weights.
    """

    def __init__(self, n_kernels: int, sigma: float, exact_sigma: float, log_scale: float) -> None:
        """
        Args:
            n_kernels: number of kernels, the exact-match one included.
            sigma: width of the soft-match kernels.
            exact_sigma: width of the exact-match kernel.
            log_scale: factor on each log soft-TF term (see the module docstring).
        """
        super().__init__()
        mus, sigmas = kernel_mus_sigmas(n_kernels, sigma, exact_sigma)
        self.register_buffer("mus", mus, persistent=False)
        self.register_buffer("sigmas", sigmas, persistent=False)
        self.log_scale = log_scale

    def forward(self, similarity: torch.Tensor, query_mask: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
        """``[B, Lq, Ld]`` similarities -> ``[B, K]`` features (padding rows and columns ignored)."""
        return gaussian_kernel_pooling(similarity, query_mask, doc_mask, self.mus, self.sigmas, scale=self.log_scale)


def _validate_kernels(n_kernels: int, sigma: float, exact_sigma: float) -> None:
    require(n_kernels >= 2, f"n_kernels must be >= 2 (exact match + soft kernels), got {n_kernels}")
    require(sigma > 0 and exact_sigma > 0, f"kernel widths must be > 0, got sigma={sigma}, exact_sigma={exact_sigma}")


@dataclass
class KNRMConfig:
    """KNRM hyper-parameters (each settable with ``--set name=value``); defaults from Xiong et al. 2017, Sec. 4."""

    n_kernels: int = 11          # exact-match kernel + 10 soft-match kernels
    sigma: float = 0.1           # soft-match kernel width
    exact_sigma: float = 1e-3    # exact-match kernel width
    log_scale: float = 0.01      # released code's factor on log soft-TF (paper: none)
    output_tanh: bool = True     # the tanh of f = tanh(w^T phi + b)

    def __post_init__(self) -> None:
        _validate_kernels(self.n_kernels, self.sigma, self.exact_sigma)
        require(self.log_scale > 0, f"log_scale must be > 0, got {self.log_scale}")


class KernelRanker(nn.Module):
    """The learning-to-rank layer both kernel models end with: ``tanh(w^T phi + b)`` over a subclass's kernel
    features ``phi`` (``kernel_features``; ``tanh`` unless ``config.output_tanh`` is off)."""

    def forward(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[B]`` of ``[B, Lq]`` / ``[B, Ld]`` id tensors and masks (True = real token)."""
        score = self.ranker(self.kernel_features(query_ids, query_mask, doc_ids, doc_mask)).squeeze(-1)
        return torch.tanh(score) if self.config.output_tanh else score


class KNRMModel(KernelRanker):
    """K-NRM (Xiong et al., SIGIR 2017): embedding cosines -> kernel pooling -> ``tanh(w^T phi + b)``."""

    def __init__(self, config: KNRMConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = False) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (copied; row 0 is padding).
            freeze_embeddings: keep them fixed (the paper learns them end to end).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights, freeze=freeze_embeddings)
        self.kernel_pooling = KernelPooling(config.n_kernels, config.sigma, config.exact_sigma, config.log_scale)
        self.ranker = nn.Linear(config.n_kernels, 1)

    def kernel_features(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """``phi(M) = sum_i log K(M_i)``: ``[B, K]`` kernel features of the translation matrix ``M_ij = cos(v_ti, v_dj)``."""
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        translation = cosine_matrix(self.embedding(query_ids), self.embedding(doc_ids), query_mask, doc_mask)
        return self.kernel_pooling(translation, query_mask, doc_mask)



class KNRMReranker(WordReranker):
    """``--reranker knrm``: :class:`KNRMModel` on the word-level framework, pairwise hinge loss (Sec. 3)."""

    name: ClassVar[str] = "knrm"
    model_config_class: ClassVar[type] = KNRMConfig
    train_defaults: ClassVar[dict] = dict(PAIRWISE_DEFAULTS)

    module_class: ClassVar[type] = KNRMModel


@dataclass
class ConvKNRMConfig:
    """Conv-KNRM hyper-parameters; defaults from Dai et al. 2018 (h = 1..3, 128 filters, 11 kernels)."""

    max_ngram: int = 3           # h-gram sizes 1..max_ngram
    num_filters: int = 128       # CNN filters per h-gram size (the shared n-gram embedding size)
    cross_match: bool = True     # match every query h-gram size with every document size (Sec. 3.3)
    n_kernels: int = 11
    sigma: float = 0.1
    exact_sigma: float = 1e-3
    log_scale: float = 0.01
    output_tanh: bool = True

    def __post_init__(self) -> None:
        require(self.max_ngram >= 1, f"max_ngram must be >= 1, got {self.max_ngram}")
        require(self.num_filters >= 1, f"num_filters must be >= 1, got {self.num_filters}")
        _validate_kernels(self.n_kernels, self.sigma, self.exact_sigma)
        require(self.log_scale > 0, f"log_scale must be > 0, got {self.log_scale}")

    @property
    def ngram_pairs(self) -> list[tuple[int, int]]:
        """``(query h, document h)`` of each matched pair, in feature order."""
        sizes = range(1, self.max_ngram + 1)
        if self.cross_match:
            return [(hq, hd) for hq in sizes for hd in sizes]
        return [(h, h) for h in sizes]


class ConvKNRMModel(KernelRanker):
    """Conv-KNRM (Dai et al., WSDM 2018): h-gram CNNs -> cross-matched cosines -> kernel pooling -> tanh.

    The h-gram at position i covers tokens ``i .. i+h-1`` and exists for every real token i (the
    convolution is zero-padded on the right, through :class:`~rerankers.blocks.MaskedConv1d`), so the
    last ``h-1`` h-grams of a text include zero vectors past its end; the paper leaves the border open,
    and this keeps every text, even a one-word query, with ``length`` h-grams of each size.
    """

    def __init__(self, config: ConvKNRMConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = False) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (copied).
            freeze_embeddings: keep them fixed (the paper learns them end to end).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights, freeze=freeze_embeddings)
        embed_dim = embedding_weights.shape[1]
        # one CNN per h, shared by query and document so their h-grams live in one space (Sec. 3.2)
        self.ngram_convs = nn.ModuleList(
            MaskedConv1d(embed_dim, config.num_filters, h, padding_side="right") for h in range(1, config.max_ngram + 1)
        )
        self.kernel_pooling = KernelPooling(config.n_kernels, config.sigma, config.exact_sigma, config.log_scale)
        self.ranker = nn.Linear(config.n_kernels * len(config.ngram_pairs), 1)

    def kernel_features(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """``Phi(M)``: ``[B, K * P]`` kernel features of the P matched h-gram size pairs, concatenated in
        :attr:`ConvKNRMConfig.ngram_pairs` order (pair-major: features ``p*K .. p*K+K-1`` are pair p's)."""
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        query_embedded, doc_embedded = self.embedding(query_ids), self.embedding(doc_ids)
        query_grams = [conv(query_embedded, query_mask) for conv in self.ngram_convs]
        doc_grams = [conv(doc_embedded, doc_mask) for conv in self.ngram_convs]
        features = [
            self.kernel_pooling(
                cosine_matrix(query_grams[hq - 1], doc_grams[hd - 1], query_mask, doc_mask), query_mask, doc_mask
            )
            for hq, hd in self.config.ngram_pairs
        ]
        return torch.cat(features, dim=-1)



class ConvKNRMReranker(WordReranker):
    """``--reranker conv-knrm``: :class:`ConvKNRMModel` on the word-level framework, pairwise hinge loss."""

    name: ClassVar[str] = "conv-knrm"
    model_config_class: ClassVar[type] = ConvKNRMConfig
    train_defaults: ClassVar[dict] = dict(PAIRWISE_DEFAULTS)

    module_class: ClassVar[type] = ConvKNRMModel
