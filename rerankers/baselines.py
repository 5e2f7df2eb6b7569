"""Classic interaction baselines: KNRM, Conv-KNRM, DRMM and MatchPyramid as word-level re-rankers.

No paper text is in the repository for these models: they are implemented from the original papers
as published, cited below by section with the formula written out (equation numbers only where we are
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
* **DRMM** -- Guo, Fan, Ai, Croft. *A Deep Relevance Matching Model for Ad-hoc Retrieval*, CIKM 2016.
  Sec. 3: a matching histogram ``z_i^(0) = h(w_i^(q) (x) d)`` of each query term's cosines with the
  document words ("Matching Histogram Mapping"; the log-count histogram "LCH" is the paper's best), here
  with 30 bins, the last one holding exact matches only; a feed-forward matching network
  ``z_i^(l) = tanh(W^(l) z_i^(l-1) + b^(l))`` shared by all query terms, 30-5-1; a term gating network
  ``g_i = exp(w_g x_i) / sum_j exp(w_g x_j)`` with ``x_i`` the term's IDF (``DRMM_LCHxIDF``; the
  term-vector variant "TV" is ``--set gating=tv``); score ``s = sum_i g_i z_i^(L)``; trained with the
  pairwise hinge loss ``max(0, 1 - s(q, d+) + s(q, d-))``.
* **MatchPyramid** -- Pang, Lan, Guo, Xu, Wan, Cheng. *Text Matching as Image Recognition*, AAAI 2016,
  and Pang, Lan, Guo, Xu, Cheng. *A Study of MatchPyramid Models on Ad-hoc Retrieval*, Neu-IR 2016.
  AAAI Sec. 3.1: a matching matrix ``M_ij = w_i (x) v_j`` of word similarities (indicator, cosine or
  dot product; the Neu-IR study also compares a Gaussian kernel ``exp(-||w_i - v_j||^2)``). Sec. 3.2: a
  2-D convolution with ReLU over the matrix, then dynamic max pooling whose window sizes follow the two
  texts' lengths so the output grid has a fixed size. Sec. 3.3: a two-layer MLP gives the score.

Choices shared by all four (beyond what the papers fix):

* Embeddings are the framework's (GloVe 6B 50d by default; the papers trained their own word2vec). KNRM, Conv-KNRM
  and MatchPyramid fine-tune them unless ``--set freeze_embeddings=true``, as KNRM and Conv-KNRM do
  end to end. DRMM always keeps them fixed: the paper uses fixed pre-trained embeddings, and its
  histogram is piecewise constant in the similarities, so no gradient could reach them anyway.
* Every out-of-vocabulary word (beyond ``max_vocabulary``) shares the framework's OOV row, so two
  different OOV words count as an exact match for all four models.
* Training defaults: pairwise hinge loss with margin 1 (the KNRM, Conv-KNRM and DRMM papers' loss; see
  :class:`MatchPyramidReranker` for MatchPyramid) and Adam with lr 1e-3 (KNRM and Conv-KNRM use Adam),
  except DRMM, whose 162 weights get lr 1e-2 (our choice).
* KNRM/Conv-KNRM multiply every log soft-TF by ``log_scale = 0.01``, as the authors' released code does
  (the papers have no factor): unscaled, a kernel nothing falls into adds ``log(1e-10) = -23`` per query
  term, which saturates the ranking ``tanh`` from the first step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from rerankers.blocks import (
    MaskedConv1d,
    build_embedding,
    cosine_matrix,
    dot_matrix,
    feed_forward,
    gaussian_kernel_pooling,
    interaction_mask,
    kernel_mus_sigmas,
    masked_dynamic_max_pool2d,
    masked_fill_padding,
    masked_softmax,
    matching_histogram,
)
from rerankers.neural import WordReranker

__all__ = [
    "KNRMConfig",
    "KNRMModel",
    "KNRMReranker",
    "ConvKNRMConfig",
    "ConvKNRMModel",
    "ConvKNRMReranker",
    "DRMMConfig",
    "DRMMModel",
    "DRMMReranker",
    "MatchPyramidConfig",
    "MatchPyramidModel",
    "MatchPyramidReranker",
    "KernelPooling",
]

#: pairwise hinge loss (margin 1) with Adam; ``batch_size`` counts scored documents, so 64 is
#: 32 (positive, negative) pairs per step
PAIRWISE_DEFAULTS = {"loss": "hinge", "margin": 1.0, "epochs": 10, "batch_size": 64, "learning_rate": 1e-3}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# --------------------------------------------------------------------------
# Kernel pooling shared by KNRM and Conv-KNRM
# --------------------------------------------------------------------------


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
    _require(n_kernels >= 2, f"n_kernels must be >= 2 (exact match + soft kernels), got {n_kernels}")
    _require(sigma > 0 and exact_sigma > 0, f"kernel widths must be > 0, got sigma={sigma}, exact_sigma={exact_sigma}")


# --------------------------------------------------------------------------
# KNRM
# --------------------------------------------------------------------------


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
        _require(self.log_scale > 0, f"log_scale must be > 0, got {self.log_scale}")


class KNRMModel(nn.Module):
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

    def forward(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[B]`` of ``[B, Lq]`` / ``[B, Ld]`` id tensors and masks (True = real token)."""
        score = self.ranker(self.kernel_features(query_ids, query_mask, doc_ids, doc_mask)).squeeze(-1)
        return torch.tanh(score) if self.config.output_tanh else score


class KNRMReranker(WordReranker):
    """``--reranker knrm``: :class:`KNRMModel` on the word-level framework, pairwise hinge loss (Sec. 3)."""

    name: ClassVar[str] = "knrm"
    model_config_class: ClassVar[type] = KNRMConfig
    train_defaults: ClassVar[dict] = dict(PAIRWISE_DEFAULTS)

    def build_module(self, embedding_weights: torch.Tensor) -> KNRMModel:
        """A fresh :class:`KNRMModel` on ``embedding_weights``."""
        return KNRMModel(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)


# --------------------------------------------------------------------------
# Conv-KNRM
# --------------------------------------------------------------------------


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
        _require(self.max_ngram >= 1, f"max_ngram must be >= 1, got {self.max_ngram}")
        _require(self.num_filters >= 1, f"num_filters must be >= 1, got {self.num_filters}")
        _validate_kernels(self.n_kernels, self.sigma, self.exact_sigma)
        _require(self.log_scale > 0, f"log_scale must be > 0, got {self.log_scale}")

    @property
    def ngram_pairs(self) -> list[tuple[int, int]]:
        """``(query h, document h)`` of each matched pair, in feature order."""
        sizes = range(1, self.max_ngram + 1)
        if self.cross_match:
            return [(hq, hd) for hq in sizes for hd in sizes]
        return [(h, h) for h in sizes]


class ConvKNRMModel(nn.Module):
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

    def forward(
        self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[B]`` (see :meth:`KNRMModel.forward` for the inputs)."""
        score = self.ranker(self.kernel_features(query_ids, query_mask, doc_ids, doc_mask)).squeeze(-1)
        return torch.tanh(score) if self.config.output_tanh else score


class ConvKNRMReranker(WordReranker):
    """``--reranker conv-knrm``: :class:`ConvKNRMModel` on the word-level framework, pairwise hinge loss."""

    name: ClassVar[str] = "conv-knrm"
    model_config_class: ClassVar[type] = ConvKNRMConfig
    train_defaults: ClassVar[dict] = dict(PAIRWISE_DEFAULTS)

    def build_module(self, embedding_weights: torch.Tensor) -> ConvKNRMModel:
        """A fresh :class:`ConvKNRMModel` on ``embedding_weights``."""
        return ConvKNRMModel(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)


# --------------------------------------------------------------------------
# DRMM
# --------------------------------------------------------------------------

HISTOGRAM_MODES = ("ch", "nh", "lch")
GATING_INPUTS = ("idf", "tv")


def _layer_sizes(spec: str) -> list[int]:
    try:
        sizes = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"hidden_sizes must be comma-separated integers, got {spec!r}") from None
    _require(all(size >= 1 for size in sizes), f"hidden_sizes must be positive, got {spec!r}")
    return sizes


@dataclass
class DRMMConfig:
    """DRMM hyper-parameters; defaults are the paper's best, ``DRMM_LCHxIDF`` with a 30-5-1 network."""

    bins: int = 30               # histogram bins, the exact-match bin included
    histogram: str = "lch"       # ch (counts) | nh (normalised) | lch (log counts), Sec. 3.1
    gating: str = "idf"          # term gating input: idf | tv (term vector)
    hidden_sizes: str = "5"      # hidden tanh layers between the histogram and the 1-unit output

    def __post_init__(self) -> None:
        _require(self.bins >= 2, f"bins must be >= 2 (exact match + soft bins), got {self.bins}")
        _require(self.histogram in HISTOGRAM_MODES, f"histogram must be one of {HISTOGRAM_MODES}, got {self.histogram!r}")
        _require(self.gating in GATING_INPUTS, f"gating must be one of {GATING_INPUTS}, got {self.gating!r}")
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
    (:class:`pipeline.core.text.IDFStatistics`), as the paper computes it on its test collections.
    """

    name: ClassVar[str] = "drmm"
    model_config_class: ClassVar[type] = DRMMConfig
    train_defaults: ClassVar[dict] = {**PAIRWISE_DEFAULTS, "learning_rate": 1e-2}

    def build_module(self, embedding_weights: torch.Tensor) -> DRMMModel:
        """A fresh :class:`DRMMModel` on ``embedding_weights``."""
        return DRMMModel(self.model_config, embedding_weights.float())

    def features(self, query_tokens: Sequence[Sequence[str]], query_length: int) -> dict:
        """``query_idf`` ``[B, Lq]`` (0 at padding) for IDF gating; nothing for term-vector gating."""
        if self.model_config.gating != "idf":
            return {}
        idf = torch.zeros(len(query_tokens), query_length)
        for row, tokens in enumerate(query_tokens):
            if tokens:
                idf[row, : len(tokens)] = torch.tensor([self.idf.idf(token) for token in tokens])
        return {"query_idf": idf}


# --------------------------------------------------------------------------
# MatchPyramid
# --------------------------------------------------------------------------

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
        _require(self.similarity in SIMILARITIES, f"similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        for field_name in ("num_filters", "kernel_height", "kernel_width", "pool_query", "pool_doc", "hidden_size"):
            value = getattr(self, field_name)
            _require(value >= 1, f"{field_name} must be >= 1, got {value}")


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
        """Scores ``[B]`` (see :meth:`KNRMModel.forward` for the inputs)."""
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

    def build_module(self, embedding_weights: torch.Tensor) -> MatchPyramidModel:
        """A fresh :class:`MatchPyramidModel` on ``embedding_weights``."""
        return MatchPyramidModel(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)
