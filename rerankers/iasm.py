"""IASM: Interactive Attention networks for Semantic text Matching (Zhao et al., 2020).

Reference: Sendong Zhao, Yong Huang, Chang Su, Yuantong Li and Fei Wang. "Interactive Attention
Networks for Semantic Text Matching." 20th IEEE International Conference on Data Mining (ICDM 2020),
pp. 861-870. doi:10.1109/ICDM50108.2020.00095. Spec: Sec. II (model) and III-B (settings); equation
numbers below refer to it. Where the paper is silent or self-contradictory we follow the
authors' released code (github.com/SendongZhao/IASM, ``src/model.py``, ``src/loss.py``). The choices:

* Shapes. ``A^(0)`` is ``m x n`` (eq. 1: query word i, document word j), so ``A^(0)T Q^(0)`` (eq. 4)
  is ``n x k``: the new source representation lives on the *target's* positions (each document
  position receives the query words similar to it), and ``A^(0) D^(0)`` (eq. 6) is ``m x k``. That is
  why eq. 2-3 transpose the matrix at every layer, and why eq. 8 compares ``Q^(0)`` (``m x k``) with
  ``D^(n)`` and ``D^(0)`` with ``Q^(n)``: the shapes agree only for an odd number of layers n. The
  paper's best depths are 3 and 5, both odd, and the released code (one layer) does exactly this;
  ``num_layers`` must therefore be odd. (Fig. 2's "Q^(1) is m x k" contradicts eq. 4 and is not
  followed.)
* ``f`` of eq. 4-7 is "a linear transformation plus ReLU": ``X' = ReLU(A^T X W + b)`` with W square
  (``k x k``, eq. 8 compares new and original representations, so they keep the embedding size) and
  the bias added after the aggregation, as in the released ``GraphConvolution``. The aggregation is
  the plain matrix product of eq. 4 (no softmax: the paper's "attention" weights are the matching
  matrix itself).
* Matrices: static ``A^(l+1) = A^(l)T`` (eq. 3); dynamic
  ``A^(l+1) = alpha Sim(Q^(l+1), D^(l+1)) + beta A^(l)T`` (eq. 2), Sim the cosine as in eq. 1,
  alpha = .75, beta = .25 (Sec. III-B). Layer l+1 uses ``A^(l)``.
* Distance (eq. 8): "Each Q and D should be normalized before conducting Dist()" -- the released code
  divides each whole matrix by its Frobenius norm and takes the Euclidean (Frobenius) distance of
  the two, so each channel lies in [0, 2] whatever the text lengths. gamma = delta = .5.
* Score and loss. ``s(q, d)`` is a distance (small = relevant) and eq. 9 is
  ``[Delta + s(q, d) - s(q', d')]_+``. The module returns ``-s(q, d)`` so that higher means more
  relevant (the project's convention); the framework's pairwise hinge
  ``max(0, margin - score_pos + score_neg)`` is then exactly eq. 9 with Delta = margin (averaged
  instead of summed over pairs, which only rescales the step). Corrupted pairs replace the target
  text with a sampled non-relevant candidate of the same query (eq. 9 also allows replacing the
  source; the framework samples per query).
* Delta is not given in the paper (the released code passes 0, which the paper's "Delta > 0" rules
  out). We use 0.1 by default: scores span [0, 2], so the framework's default margin of 1 would
  keep the hinge active on every pair (a plain difference loss), while 0.1 stops pushing pairs
  that are already well separated.
* Embeddings are frozen (the released code computes them outside the model); the only trained
  weights are the W and b of each layer and side. ``--set freeze_embeddings=false`` trains them.
* Table VII's smoothing statistic compares the variance of the real cells of ``A^(0)`` with that of
  the last updated matrix ``A^(n)`` (computed from ``Q^(n)``, ``D^(n)``, the final representations):
  see :func:`matrix_variance_drop`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from pipeline.core.errors import ConfigError
from rerankers.blocks import build_embedding, cosine_matrix, interaction_mask, masked_fill_padding, masked_softmax
from rerankers.neural import FROZEN_EMBEDDINGS, WordReranker
from rerankers.training.data import RankingData

__all__ = [
    "MATRIX_MODES",
    "AGGREGATIONS",
    "IASMConfig",
    "IASMStaticConfig",
    "InteractiveAttentionTrace",
    "IASMModel",
    "normalized_distance",
    "matrix_variance",
    "variance_dropped",
    "matrix_variance_drop",
    "IASMReranker",
    "IASMStaticReranker",
]

MATRIX_MODES = ("static", "dynamic")
AGGREGATIONS = ("sum", "softmax")


@dataclass
class IASMConfig:
    """Hyper-parameters of IASM (Sec. II and III-B).

    Attributes:
        matrix: ``"dynamic"`` (eq. 2, IASM-Dynamic, the paper's best in Tables III-IV) or
            ``"static"`` (eq. 3, IASM-Static).
        num_layers: interactive attention layers n; must be odd (see the module docstring). 5 is the
            paper's best for answer selection (YodaQA), 3 for PubMed and TNL.
        alpha: weight of the new local similarities in eq. 2 (.75).
        beta: weight of the previous matrix in eq. 2 (.25).
        gamma: weight of the source channel ``Dist(Q^(0), D^(n))`` in eq. 8 (.5).
        delta: weight of the target channel ``Dist(D^(0), Q^(n))`` in eq. 8 (.5).
        aggregation: how a layer weighs the other text's words. ``"sum"`` (eq. 4-7 as written and in the
            released code): by the matching-matrix cells themselves, so every word of a long text adds
            its share whatever its similarity. ``"softmax"`` (not the paper's): each row of the matrix is
            softmax-normalised at ``temperature`` first, so a position's update is led by its closest
            matches (an exact match, cosine 1, outweighs a hundred words at cosine .3 when the
            temperature is .05). The probe of ``benchmarks/exact_match_probe.py`` measures both.
        temperature: softmax temperature of ``aggregation="softmax"`` (cosines lie in [-1, 1]).
    """

    matrix: str = "dynamic"
    num_layers: int = 5
    alpha: float = 0.75
    beta: float = 0.25
    gamma: float = 0.5
    delta: float = 0.5
    aggregation: str = "sum"
    temperature: float = 0.05

    def __post_init__(self) -> None:
        if self.matrix not in MATRIX_MODES:
            raise ConfigError(f"matrix must be one of {MATRIX_MODES}, got {self.matrix!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.num_layers < 1 or self.num_layers % 2 == 0:
            raise ConfigError(
                f"num_layers must be odd and >= 1 (eq. 8 compares Q^(0) with D^(n), whose rows are the "
                f"query positions only for odd n), got {self.num_layers}"
            )
        for name in ("alpha", "beta", "gamma", "delta"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.gamma + self.delta <= 0:
            raise ConfigError("gamma + delta must be > 0 (eq. 8 would score every pair 0)")


@dataclass
class IASMStaticConfig(IASMConfig):
    """:class:`IASMConfig` defaulting to the static matching matrix (eq. 3, IASM-Static)."""

    matrix: str = "static"


@dataclass
class InteractiveAttentionTrace:
    """Everything the interactive attention layers computed for a batch.

    Attributes:
        query0: ``Q^(0)`` ``[B, Lq, k]`` (embeddings, zero at padding).
        doc0: ``D^(0)`` ``[B, Ld, k]``.
        query_n: ``Q^(n)`` ``[B, Ld, k]`` (n odd: rows on the document's positions), zero at padding.
        doc_n: ``D^(n)`` ``[B, Lq, k]`` (rows on the query's positions), zero at padding.
        matrices: ``[A^(0), ..., A^(n)]``; ``A^(l)`` is ``[B, Lq, Ld]`` for even l and ``[B, Ld, Lq]``
            for odd l, zero at padding cells. ``A^(n)`` is only present when asked for.
        query_mask: ``[B, Lq]`` bool.
        doc_mask: ``[B, Ld]`` bool.
    """

    query0: torch.Tensor
    doc0: torch.Tensor
    query_n: torch.Tensor
    doc_n: torch.Tensor
    matrices: list[torch.Tensor]
    query_mask: torch.Tensor
    doc_mask: torch.Tensor

    def cell_mask(self, layer: int) -> torch.Tensor:
        """Real cells of ``A^(layer)``: ``[B, Lq, Ld]`` for even layers, ``[B, Ld, Lq]`` for odd ones."""
        if layer % 2 == 0:
            return interaction_mask(self.query_mask, self.doc_mask)
        return interaction_mask(self.doc_mask, self.query_mask)


def normalized_distance(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Euclidean distance of two matrices after scaling each to unit Frobenius norm (eq. 8's Dist).

    Args:
        a: ``[B, L, k]`` with zero rows at padding (zero rows change neither norm nor distance).
        b: ``[B, L, k]`` likewise.
        eps: guards the norm of an all-zero matrix (it stays zero).

    Returns:
        ``[B]`` distances in [0, 2].
    """
    a = a.flatten(1)
    b = b.flatten(1)
    a = a / a.norm(dim=-1, keepdim=True).clamp_min(eps)
    b = b / b.norm(dim=-1, keepdim=True).clamp_min(eps)
    return (a - b).norm(dim=-1)


class IASMModel(nn.Module):
    """IASM-Static / IASM-Dynamic (eq. 1-8); ``forward`` returns ``-s(q, d)`` of eq. 8 (higher = closer)."""

    def __init__(self, config: IASMConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = True) -> None:
        """
        Args:
            config: the hyper-parameters.
            embedding_weights: ``[V, k]`` word vectors (row 0 is padding).
            freeze_embeddings: keep the word vectors fixed (the authors' setting).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights.float(), freeze=freeze_embeddings)
        dim = embedding_weights.shape[1]
        # W_q^(l), W_d^(l) (+ bias) of eq. 5 and 7: square, so Q^(n), D^(n) stay comparable with Q^(0), D^(0)
        self.query_layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(config.num_layers))
        self.doc_layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(config.num_layers))

    def _next_matrix(
        self, query: torch.Tensor, doc: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, previous: torch.Tensor
    ) -> torch.Tensor:
        carried = previous.transpose(1, 2)
        if self.config.matrix == "static":
            return carried  # eq. 3
        local = cosine_matrix(query, doc, rows, cols)
        return self.config.alpha * local + self.config.beta * carried  # eq. 2

    def _weights(self, matrix: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The aggregation weights of ``matrix`` ``[B, R, C]`` (rows aggregate over columns): the cells
        themselves (eq. 4-7) or, with ``aggregation="softmax"``, each row softmax-normalised."""
        if self.config.aggregation == "sum":
            return matrix
        return masked_softmax(matrix / self.config.temperature, interaction_mask(rows, cols), dim=2)

    def interactive_attention(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        doc_ids: torch.Tensor,
        doc_mask: torch.Tensor,
        final_matrix: bool = False,
    ) -> InteractiveAttentionTrace:
        """Run eq. 1 and the n layers of eq. 4-7 with the static (eq. 3) or dynamic (eq. 2) matrix.

        Args:
            query_ids: ``[B, Lq]`` long.
            query_mask: ``[B, Lq]`` bool.
            doc_ids: ``[B, Ld]`` long.
            doc_mask: ``[B, Ld]`` bool.
            final_matrix: also compute ``A^(n)`` from ``Q^(n)``, ``D^(n)`` (not needed for the score,
                needed for Table VII's statistic).

        Returns:
            An :class:`InteractiveAttentionTrace`.
        """
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        query0 = masked_fill_padding(self.embedding(query_ids), query_mask)
        doc0 = masked_fill_padding(self.embedding(doc_ids), doc_mask)
        matrix = cosine_matrix(query0, doc0, query_mask, doc_mask)  # eq. 1
        matrices = [matrix]
        query, doc = query0, doc0
        # rows of Q^(l) / D^(l) sit on these positions; every layer swaps them (eq. 4, 6)
        query_rows, doc_rows = query_mask, doc_mask
        for layer, (query_layer, doc_layer) in enumerate(zip(self.query_layers, self.doc_layers)):
            # matrix is [B, rows of Q^(l), rows of D^(l)]: Q^(l+1) lives on D^(l)'s rows and the reverse
            to_query = self._weights(matrix.transpose(1, 2), doc_rows, query_rows)
            to_doc = self._weights(matrix, query_rows, doc_rows)
            new_query = torch.relu(query_layer(torch.bmm(to_query, query)))  # eq. 4-5
            new_doc = torch.relu(doc_layer(torch.bmm(to_doc, doc)))  # eq. 6-7
            query_rows, doc_rows = doc_rows, query_rows
            # ReLU(bias) would leave non-zero rows at padding positions
            query = masked_fill_padding(new_query, query_rows)
            doc = masked_fill_padding(new_doc, doc_rows)
            if layer + 1 < len(self.query_layers) or final_matrix:
                matrix = self._next_matrix(query, doc, query_rows, doc_rows, matrix)
                matrices.append(matrix)
        return InteractiveAttentionTrace(query0, doc0, query, doc, matrices, query_mask, doc_mask)

    def distance(self, trace: InteractiveAttentionTrace) -> torch.Tensor:
        """``s(q, d) = gamma Dist(Q^(0), D^(n)) + delta Dist(D^(0), Q^(n))`` (eq. 8): ``[B]``."""
        source = normalized_distance(trace.query0, trace.doc_n)
        target = normalized_distance(trace.doc0, trace.query_n)
        return self.config.gamma * source + self.config.delta * target

    def forward(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        doc_ids: torch.Tensor,
        doc_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Relevance scores ``-s(q, d)`` (eq. 8 negated, so that eq. 9 is the pairwise hinge): ``[B]``."""
        return -self.distance(self.interactive_attention(query_ids, query_mask, doc_ids, doc_mask))


# --------------------------------------------------------------------------------------------------
# Table VII: does the matching matrix get smoother?
# --------------------------------------------------------------------------------------------------


def matrix_variance(matrix: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of the real cells of each matrix (Table VII's sparsity proxy).

    Args:
        matrix: ``[B, R, C]``.
        mask: ``[B, R, C]`` bool, True on real cells.

    Returns:
        ``[B]``; 0 for a matrix with no real cell.
    """
    weights = mask.to(matrix.dtype)
    count = weights.sum(dim=(1, 2)).clamp_min(1.0)
    mean = (matrix * weights).sum(dim=(1, 2)) / count
    centered = (matrix - mean.view(-1, 1, 1)) * weights
    return (centered**2).sum(dim=(1, 2)) / count


def variance_dropped(trace: InteractiveAttentionTrace, tolerance: float = 1e-6) -> torch.Tensor:
    """Whether the last matrix ``A^(n)`` has a smaller cell variance than ``A^(0)``, per pair.

    Args:
        trace: from :meth:`IASMModel.interactive_attention` with ``final_matrix=True``.
        tolerance: relative margin a drop must exceed, so that rounding (e.g. the static model's
            transposed copies, whose variance is mathematically unchanged) never counts as a drop.

    Returns:
        ``[B]`` bool.
    """
    last = len(trace.matrices) - 1
    if last < 1:
        raise ValueError("the trace holds A^(0) only: run interactive_attention(..., final_matrix=True)")
    initial = matrix_variance(trace.matrices[0], trace.cell_mask(0))
    final = matrix_variance(trace.matrices[last], trace.cell_mask(last))
    return final < initial * (1.0 - tolerance)


def matrix_variance_drop(
    reranker: "IASMReranker", data: "RankingData", relevant_only: bool = False, batch_size: int = 256
) -> float:
    """Table VII: the share of (query, candidate) pairs whose matching matrix variance drops after the
    interactive attention layers (``var(A^(n)) < var(A^(0))`` over real cells).

    Args:
        reranker: a prepared or loaded IASM re-ranker.
        data: queries and their candidates (e.g. the test split's ``RankingData``).
        relevant_only: count only judged-relevant candidates (the paper's "samples" may mean the
            true pairs; by default every candidate pair counts).
        batch_size: pairs per forward pass.

    Returns:
        The share in [0, 1] (0.0 when there is no pair).
    """
    pairs = []
    for query_id, query in data.queries.items():
        judged = data.qrels.get(query_id, {})
        for hit in data.candidates.get(query_id, []):
            if not relevant_only or judged.get(hit.doc_id, 0) > 0:
                pairs.append((query, data.docs[hit.doc_id]))
    if not pairs:
        return 0.0
    module = reranker.module
    module.eval()
    device = next(module.parameters()).device
    dropped = 0
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            batch = {k: v.to(device) for k, v in reranker.encode(pairs[start : start + batch_size]).items()}
            trace = module.interactive_attention(
                batch["query_ids"], batch["query_mask"], batch["doc_ids"], batch["doc_mask"], final_matrix=True
            )
            dropped += int(variance_dropped(trace).sum())
    return dropped / len(pairs)


# --------------------------------------------------------------------------------------------------
# Re-rankers on the word-level framework (rerankers.neural)
# --------------------------------------------------------------------------------------------------

_TRAIN_DEFAULTS = {
    "loss": "hinge",
    "margin": 0.1,
    "optimizer": "adam",
    "learning_rate": 1e-4,
    "batch_size": 64,
    "negatives": 4,
    "epochs": 50,
    "patience": 3,
}


class IASMReranker(WordReranker):
    """``--reranker iasm``: IASM-Dynamic (``--set matrix=static`` for IASM-Static).

    Training (Sec. II-E, III-B): eq. 9 as the framework's pairwise hinge on ``-s(q, d)`` (margin 0.1,
    see the module docstring), Adam with lr 1e-4, at most 50 epochs (early stopping on dev MAP), 4
    sampled negatives per relevant pair and 32 pairs per batch (the released code updates after every
    single pair). Word vectors: GloVe 6B 50d, frozen (the paper's YodaQA runs used GloVe 100d).
    """

    name: ClassVar[str] = "iasm"
    model_config_class: ClassVar[type] = IASMConfig
    train_defaults: ClassVar[dict] = _TRAIN_DEFAULTS
    text_defaults: ClassVar[dict] = FROZEN_EMBEDDINGS
    module_class: ClassVar[type] = IASMModel


class IASMStaticReranker(IASMReranker):
    """``--reranker iasm-static``: IASM with the static matching matrix of eq. 3."""

    name: ClassVar[str] = "iasm-static"
    model_config_class: ClassVar[type] = IASMStaticConfig
