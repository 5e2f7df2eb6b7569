"""Match-SRNN and Bi-Match-SRNN (Wan et al., IJCAI 2016).

Reference: Shengxian Wan, Yanyan Lan, Jun Xu, Jiafeng Guo, Liang Pang and Xueqi Cheng. "Match-SRNN:
Modeling the Recursive Matching Structure with Spatial RNN." IJCAI 2016, pp. 2922-2928.
arXiv:1604.04378. Section and equation numbers below refer to that paper.
The model has three parts (Sec. 4, Figure 2):

1. a neural tensor network gives every word pair ``(w_i, v_j)`` an interaction vector ``s_ij``
   (Sec. 4.1) -> :class:`NeuralTensorNetwork`;
2. a spatial GRU scans that ``m x n`` tensor from the top-left to the bottom-right corner, each state
   ``h_ij`` composed from ``h_{i-1,j}``, ``h_{i,j-1}``, ``h_{i-1,j-1}`` and ``s_ij`` (eq. 2-3)
   -> :class:`SpatialGRU`;
3. a linear function scores the global interaction ``h_mn`` (eq. 5) -> :class:`MatchSRNNModel`.

S1 (rows, ``i``) is the query and S2 (columns, ``j``) the candidate document. In the paper's QA task these are
the question and the answer.

Where the paper is vague, these are the choices made. Each is also written where it is made:

* NTN bias. Sec. 4.1 writes ``F(u^T T v + W[u; v]) + b`` with ``b`` outside the rectifier. Outside, ``b`` is
  a constant shift of ``s_ij``, which the spatial GRU's own biases already absorb, so it would add nothing.
  We follow the standard NTN of the cited Socher et al. (2013): ``F(u^T T v + W[u; v] + b)``. There the bias
  sets each channel's rectifier threshold.
* ``phi`` in eq. 3 is ``tanh``, as in the 1-D GRU the spatial GRU extends (Cho et al., 2014).
* Gate names. Sec. 4.2's text calls the update gates ``z_i, z_j, z_d, z_s``. Eq. 3 calls them
  ``z_i, z_l, z_t, z_d``, and we follow eq. 3: ``l`` (left) is ``(i, j-1)``, ``t`` (top) is ``(i-1, j)`` and
  ``d`` (diagonal) is ``(i-1, j-1)``. As in eq. 3, ``r_l`` resets the left state, ``r_t`` the top one and
  ``r_d`` the diagonal one.
* Borders. ``h_{0,j} = h_{i,0} = 0``, as in LCS's ``c[0, j] = c[i, 0] = 0`` (eq. 7).
* Padding. ``h_mn`` (``m``, ``n`` = real lengths) depends only on cells ``i <= m, j <= n``. Reading the state
  at each pair's own real corner, not at the padded corner, therefore makes padding unable to change a
  score.
* Bi-Match-SRNN (Sec. 6.1: "also scans from right bottom to left top on the word interaction tensor").
  The paper gives no more detail. Both scans read the same interaction tensor, so the NTN is shared. Each
  direction has its own spatial GRU, as each direction of a BiLSTM has its own weights. The backward scan
  is the forward recursion run on both texts reversed within their real lengths, so it starts at the real
  ``(m, n)`` and ends at ``(1, 1)``. Eq. 5's linear scorer reads the concatenation ``[h_mn; h~_11]``.
* Initialisation (Sec. 6.1: "uniform distribution with the same scale, selected according to the
  performance on validation set"). ``init_scale > 0`` draws every non-embedding parameter from
  ``U(-init_scale, init_scale)``. The default 0 keeps PyTorch's fan-in-scaled uniform initialisation and
  Glorot for the tensor, which needs no tuning.
* Training (Sec. 4.4, 6.1). The QA experiments use the pairwise hinge loss with margin 1, 4 negatives per
  question and batches of 128. These are :attr:`MatchSRNNReranker.train_defaults`. AdaGrad is not among
  the trainer's optimizers, so Adam (lr 1e-3) replaces it. Word embeddings are trained jointly, as in
  Sec. 4.4. They start from GloVe 6B 50d (the project's default), not from the paper's 50-d SkipGram
  vectors trained on Yahoo! Answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.core.errors import ConfigError
from pipeline.core.runtime import native_bf16
from rerankers.blocks import BilinearInteraction, build_embedding, lengths_from_mask
from rerankers.blocks.wavefront import GridRecurrence, reverse_within_lengths
from rerankers.neural import WordReranker

__all__ = [
    "MatchSRNNConfig", "NeuralTensorNetwork", "SpatialGRU", "reference_spatial_gru", "MatchSRNNModel",
    "reverse_within_lengths", "matching_path", "MatchSRNNReranker", "BiMatchSRNNReranker",
]

#: order of the four update gates along the gate axis of :class:`SpatialGRU` outputs (eq. 3's listing)
UPDATE_GATES = ("input", "left", "top", "diagonal")


@dataclass
class MatchSRNNConfig:
    """Hyper-parameters of Match-SRNN. The defaults follow Sec. 6.1.

    Attributes:
        tensor_channels: ``c``, the number of tensor slices ``T^[1:c]`` in the neural tensor network
            (Sec. 4.1), i.e. the size of ``s_ij``. Sec. 6.1 uses 10, the best of 1, 2, 5, 10 and 20.
        hidden_dim: the size of the spatial GRU's states ``h_ij`` (eq. 3); 10 in Sec. 6.1.
        init_scale: ``s`` > 0 initialises every non-embedding parameter from ``U(-s, s)`` (Sec. 6.1,
            where the scale is tuned on validation data). 0 keeps PyTorch's fan-in-scaled defaults.
    """

    tensor_channels: int = 10
    hidden_dim: int = 10
    init_scale: float = 0.0

    def __post_init__(self) -> None:
        if self.tensor_channels < 1:
            raise ConfigError(f"tensor_channels must be >= 1, got {self.tensor_channels}")
        if self.hidden_dim < 1:
            raise ConfigError(f"hidden_dim must be >= 1, got {self.hidden_dim}")
        if not (0.0 <= self.init_scale < float("inf")):
            raise ConfigError(f"init_scale must be a finite number >= 0, got {self.init_scale}")


# -- Word-level interactions (Sec. 4.1) -------------------------------------------------------------------


class NeuralTensorNetwork(nn.Module):
    """The word interaction tensor of Sec. 4.1: ``s_ij = max(0, u(w_i)^T T^[1:c] u(v_j) + W [u(w_i); u(v_j)] + b)``.

    This is :class:`~rerankers.blocks.BilinearInteraction` with ``c`` channels, its linear terms (the two
    halves of ``W``) and a per-channel bias, followed by the rectifier ``F``. The bias sits inside ``F``,
    as in the standard NTN (see the module docstring).
    """

    def __init__(self, embedding_dim: int, channels: int) -> None:
        """
        Args:
            embedding_dim: the size of the word vectors ``u(.)``.
            channels: ``c``, the number of tensor slices.
        """
        super().__init__()
        self.bilinear = BilinearInteraction(embedding_dim, embedding_dim, channels=channels,
                                            linear_terms=True, bias=True)

    def forward(self, query: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
        """
        Args:
            query: ``[B, M, E]`` word vectors of S1.
            doc: ``[B, N, E]`` word vectors of S2.

        Returns:
            ``[B, M, N, c]``, with ``s_ij`` as the channel-last vector of cell ``(i, j)``. Padding cells are
            not masked. The spatial recursion never carries them into a real corner.
        """
        return torch.relu(self.bilinear(query, doc)).permute(0, 2, 3, 1)


# -- Spatial GRU (Sec. 4.2, eq. 2-3) ----------------------------------------------------------------------


class SpatialGRU(GridRecurrence):
    """The spatial GRU of eq. 3, which computes ``h_ij = f(h_{i-1,j}, h_{i,j-1}, h_{i-1,j-1}, s_ij)`` (eq. 2).

    With ``q = [h_{i-1,j}; h_{i,j-1}; h_{i-1,j-1}; s_ij]``::

        r_l, r_t, r_d   = sigmoid(W^(r_*) q + b^(r_*))
        z_i, z_l, z_t, z_d = SoftmaxByRow(W^(z_*) q + b^(z_*))     # softmax over the 4 gates, per dimension
        h'_ij = tanh(W s_ij + U([r_l; r_t; r_d] * [h_{i,j-1}; h_{i-1,j}; h_{i-1,j-1}]) + b)
        h_ij  = z_l * h_{i,j-1} + z_t * h_{i-1,j} + z_d * h_{i-1,j-1} + z_i * h'_ij

    The borders are zero: ``h_{0,j} = h_{i,0} = 0``.

    Parameters are laid out as in the paper. ``gates`` holds the seven ``W^(.)``, ``b^(.)`` stacked in the
    order ``r_l, r_t, r_d, z_i, z_l, z_t, z_d``, and its input columns follow ``q``'s order.
    ``candidate_input`` is ``W, b`` and ``candidate_hidden`` is ``U``.

    All cells of one anti-diagonal ``i + j = k`` depend only on diagonals ``k-1`` and ``k-2``. The forward
    pass (:class:`~rerankers.blocks.wavefront.GridRecurrence`: the scan, :meth:`forward`, :meth:`corners`)
    therefore loops over the ``M + N - 1`` anti-diagonals and computes each one's cells at once, for the
    whole batch (a wavefront). What makes a step cheap:

    * the input ``s`` (``C`` channels) is skewed once into diagonal order
      (:func:`rerankers.blocks.wavefront.skew`); its projections
      are computed per step inside the same matrix product as the hidden terms, from one weight matrix whose
      rows are reordered once per call (resets and update gates in the order ``top, left, diagonal`` of
      ``q``, so that they multiply ``q``'s hidden part without another concatenation), plus ``W`` and ``b``;
    * a step computes only the cells on the grid (rows ``max(0, k-N+1) .. min(M-1, k)``), so nothing needs
      masking: the zero borders are the slots never written;
    * :meth:`corners` keeps only the states scoring reads (each pair's real corner ``h_mn``) instead of
      unskewing the whole grid;
    * under CPU bfloat16 autocast, on a CPU with bfloat16 matrix instructions (``native_bf16``), the weights
      are cast once per call, not at every step; the two matrix products of a step run in bfloat16, the
      gates and states stay in the inputs' dtype. Elsewhere autocast leaves the recursion in float32;
    * without autograd (scoring), the states go into one preallocated buffer written in place.
    """

    def __init__(self, input_dim: int, hidden_dim: int) -> None:
        """
        Args:
            input_dim: the size of ``s_ij``.
            hidden_dim: the size of ``h_ij``.
        """
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.gates = nn.Linear(3 * hidden_dim + input_dim, 7 * hidden_dim)
        self.candidate_input = nn.Linear(input_dim, hidden_dim)
        self.candidate_hidden = nn.Linear(3 * hidden_dim, hidden_dim, bias=False)

    #: the cell's update gates (``z_t, z_l, z_d, z_i``) reordered as :data:`UPDATE_GATES` for :meth:`forward`
    gate_order = [3, 1, 0, 2]

    def _native_bf16(self) -> bool:
        return native_bf16()

    def _step_weights(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(W [8d, 3d + C], b [8d], U [d, 3d])`` in the order one step uses them.

        Output rows: resets ``r_t, r_l, r_d``, update gates ``z_t, z_l, z_d, z_i``, then ``W s + b`` (zero
        weights on the hidden columns). ``U``'s columns follow ``q``'s ``top, left, diagonal``.
        """
        d, c = self.hidden_dim, self.input_dim
        blocks = self.gates.weight.unflatten(0, (7, d))[[1, 0, 2, 5, 4, 6, 3]].flatten(0, 1)
        bias = self.gates.bias.unflatten(0, (7, d))[[1, 0, 2, 5, 4, 6, 3]].flatten()
        candidate = torch.cat([self.candidate_input.weight.new_zeros(d, 3 * d), self.candidate_input.weight], 1)
        weight = torch.cat([blocks, candidate], 0)
        bias = torch.cat([bias, self.candidate_input.bias])
        hidden = self.candidate_hidden.weight.unflatten(1, (3, d))[:, [1, 0, 2]].flatten(1)
        return weight.to(dtype), bias.to(dtype), hidden.to(dtype)

    def _cell(self, q: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, hidden: torch.Tensor):
        """One diagonal's cells: ``q [B, n, 3d + C]`` -> ``(h [B, n, d], update gates [B, n, 4, d])``."""
        d = self.hidden_dim
        previous = q[..., : 3 * d]
        if weight.dtype == q.dtype:
            projected = F.linear(q, weight, bias)
            reset = torch.sigmoid(projected[..., : 3 * d])
            candidate = torch.addmm(projected[..., 7 * d:].flatten(0, -2), (reset * previous).flatten(0, -2),
                                    hidden.t()).view_as(projected[..., 7 * d:])
        else:  # bfloat16 products, float32 states and gates
            projected = F.linear(q.to(weight.dtype), weight, bias).to(q.dtype)
            reset = torch.sigmoid(projected[..., : 3 * d])
            candidate = projected[..., 7 * d:] + F.linear((reset * previous).to(hidden.dtype), hidden).to(q.dtype)
        candidate = torch.tanh(candidate)
        update = torch.softmax(projected[..., 3 * d: 7 * d].unflatten(-1, (4, d)), dim=-2)  # SoftmaxByRow
        state = (update[..., :3, :] * previous.unflatten(-1, (3, d))).sum(-2)
        return torch.addcmul(state, update[..., 3, :], candidate), update

def reference_spatial_gru(gru: SpatialGRU, s: torch.Tensor) -> torch.Tensor:
    """Eq. 3 written literally, one cell at a time: the reference that :class:`SpatialGRU` is checked against.

    This is the plain double loop over ``i = 1..M``, ``j = 1..N`` with ``h`` 1-based and zero borders
    (``h_{0,j} = h_{i,0} = 0``), using ``gru``'s parameters exactly as laid out there. It is deliberately
    slow (``M * N`` sequential steps of small ops) and exists for tests (``tests/rerankers/test_match_srnn.py``) and
    for the wavefront speed benchmark (``benchmarks/match_srnn_wavefront.py``); the model never calls it.
    States are kept in a Python grid, not written in place into one tensor, so autograd works through it
    without copying the whole grid at every cell.

    Args:
        gru: the spatial GRU whose weights to use.
        s: ``[..., M, N, C]`` interaction vectors. Leading dimensions (e.g. a batch) are carried along,
            so one call loops over the cells once for all pairs; a single pair is ``[M, N, C]``.

    Returns:
        ``[..., M, N, d]``: ``h_ij`` for ``i, j >= 1``, as :meth:`SpatialGRU.forward` returns them.
    """
    d = gru.hidden_dim
    rows, cols = s.shape[-3], s.shape[-2]
    zero = s.new_zeros(*s.shape[:-3], d)
    h = [[zero] * (cols + 1) for _ in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            top, left, diag, s_ij = h[i - 1][j], h[i][j - 1], h[i - 1][j - 1], s[..., i - 1, j - 1, :]
            q = torch.cat([top, left, diag, s_ij], -1)
            logits = q @ gru.gates.weight.T + gru.gates.bias
            r_l, r_t, r_d = torch.sigmoid(logits[..., : 3 * d]).split(d, -1)
            update = torch.softmax(logits[..., 3 * d :].unflatten(-1, (4, d)), dim=-2)  # SoftmaxByRow
            z_i, z_l, z_t, z_d = update.unbind(-2)
            reset_states = torch.cat([r_l * left, r_t * top, r_d * diag], -1)
            candidate = torch.tanh(gru.candidate_input(s_ij) + reset_states @ gru.candidate_hidden.weight.T)
            h[i][j] = z_l * left + z_t * top + z_d * diag + z_i * candidate
    return torch.stack([torch.stack(row[1:], -2) for row in h[1:]], -3)


def matching_path(gates: torch.Tensor, rows: int, cols: int, dimension: int | None = None) -> list[tuple[int, int]]:
    """Backtrack the largest gates from ``(rows, cols)`` to the border (Sec. 5.2, Figure 4c, and Sec. 6.2).

    At each cell the path moves left for ``z_l``, up for ``z_t`` and diagonally for ``z_d + z_i``.
    ``z_d h_{i-1,j-1} + z_i h'_ij`` together are the LCS term ``c[i-1, j-1] + I[x_i = y_j]`` (Sec. 5.1),
    so both gates stand for the diagonal step. This runs outside the model for one pair (a Python loop
    over at most ``rows + cols`` steps).

    Args:
        gates: ``[M, N, 4, d]`` update gates of one pair from :meth:`SpatialGRU.forward` with
            ``return_gates=True``.
        rows: the real length of S1 (``m``).
        cols: the real length of S2 (``n``).
        dimension: the state dimension whose gates to follow. ``None`` averages the gates over dimensions.
            Sec. 6.2 ties them instead, for the same purpose.

    Returns:
        The visited cells as 1-based ``(i, j)``, from ``(rows, cols)`` back to the first cell on row 1 or
        column 1.
    """
    values = gates[..., dimension] if dimension is not None else gates.mean(-1)
    values = values.detach().cpu()
    i, j = rows, cols
    path = []
    while i >= 1 and j >= 1:
        path.append((i, j))
        z_input, z_left, z_top, z_diagonal = values[i - 1, j - 1].tolist()
        # max keeps the first of equal values, so ties go diagonal, then left, then up
        _, i, j = max([(z_diagonal + z_input, i - 1, j - 1), (z_left, i, j - 1), (z_top, i - 1, j)],
                      key=lambda move: move[0])
    return path


# -- The model (Sec. 4, eq. 5) ----------------------------------------------------------------------------


class MatchSRNNModel(nn.Module):
    """Match-SRNN (Sec. 4, Figure 2): embeddings -> NTN (Sec. 4.1) -> spatial GRU (eq. 3) -> linear score (eq. 5).

    With ``bidirectional``, this is Bi-Match-SRNN (Sec. 6.1). A second spatial GRU scans the same
    interaction tensor from the bottom-right corner, and eq. 5 scores ``[h_mn; h~_11]`` (see the module
    docstring).
    """

    def __init__(self, config: MatchSRNNConfig, embedding_weights: torch.Tensor, bidirectional: bool = False,
                 freeze_embeddings: bool = False) -> None:
        """
        Args:
            config: the hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors. Row 0 is padding.
            bidirectional: build Bi-Match-SRNN.
            freeze_embeddings: keep the word vectors fixed. The paper trains them (Sec. 4.4).
        """
        super().__init__()
        self.config = config
        self.bidirectional = bidirectional
        self.embedding = build_embedding(embedding_weights, freeze_embeddings)
        self.tensor_network = NeuralTensorNetwork(embedding_weights.shape[1], config.tensor_channels)
        self.forward_rnn = SpatialGRU(config.tensor_channels, config.hidden_dim)
        self.backward_rnn = SpatialGRU(config.tensor_channels, config.hidden_dim) if bidirectional else None
        self.scorer = nn.Linear(config.hidden_dim * (2 if bidirectional else 1), 1)
        if config.init_scale > 0:
            for name, parameter in self.named_parameters():
                if not name.startswith("embedding."):
                    nn.init.uniform_(parameter, -config.init_scale, config.init_scale)

    def global_interaction(self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor,
                           doc_mask: torch.Tensor) -> torch.Tensor:
        """The representation eq. 5 scores: ``h_mn``, or ``[h_mn; h~_11]`` for Bi-Match-SRNN.

        Args:
            query_ids: ``[B, M]`` token ids of S1.
            query_mask: ``[B, M]`` bool. True marks real tokens, which come first.
            doc_ids: ``[B, N]`` token ids of S2.
            doc_mask: ``[B, N]`` bool.

        Returns:
            ``[B, d]`` or ``[B, 2d]``. A pair with an empty text gets zeros, so its score is the scorer's bias.
        """
        rows, cols = lengths_from_mask(query_mask), lengths_from_mask(doc_mask)
        cells = self.tensor_network(self.embedding(query_ids), self.embedding(doc_ids))
        directions = [self.forward_rnn.corners(cells, rows, cols)]
        if self.backward_rnn is not None:
            directions.append(self.backward_rnn.corners(reverse_within_lengths(cells, rows, cols), rows, cols))
        return torch.cat(directions, -1)

    def forward(self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor,
                doc_mask: torch.Tensor, **features) -> torch.Tensor:
        """Eq. 5: ``M(S1, S2) = W^(s) h_mn + b^(s)``.

        Args:
            query_ids, query_mask, doc_ids, doc_mask: as in :meth:`global_interaction`.
            features: ignored. Match-SRNN uses the token ids only.

        Returns:
            ``[B]`` matching scores.
        """
        return self.scorer(self.global_interaction(query_ids, query_mask, doc_ids, doc_mask)).squeeze(-1)


# -- Re-rankers --------------------------------------------------------------------------------------------


class MatchSRNNReranker(WordReranker):
    """``--reranker match-srnn``: :class:`MatchSRNNModel` with the project's tokenizer, vocabulary and trainer.

    Training follows the QA setup of Sec. 4.4 and 6.1: a pairwise hinge loss ``max(0, 1 - M(S1, S2+) +
    M(S1, S2-))``, 4 negatives per positive (sampled from the first-stage candidates, whereas the paper
    drew them from Lucene's top 1,000) and batches of 128 texts. Adam replaces AdaGrad (see the module
    docstring).
    """

    name: ClassVar[str] = "match-srnn"
    model_config_class: ClassVar[type] = MatchSRNNConfig
    #: Bi-Match-SRNN (Sec. 6.1) when True
    bidirectional: ClassVar[bool] = False
    train_defaults: ClassVar[dict] = {"loss": "hinge", "margin": 1.0, "negatives": 4, "batch_size": 128,
                                      "learning_rate": 1e-3, "epochs": 10}

    def build_module(self, embedding_weights: torch.Tensor) -> MatchSRNNModel:
        """A fresh :class:`MatchSRNNModel` on ``embedding_weights``.

        Args:
            embedding_weights: ``[V, E]`` initial word vectors.

        Returns:
            The module.
        """
        return MatchSRNNModel(self.model_config, embedding_weights.float(), self.bidirectional,
                              self.text_config.freeze_embeddings)


class BiMatchSRNNReranker(MatchSRNNReranker):
    """``--reranker bi-match-srnn``: Bi-Match-SRNN (Sec. 6.1), with the spatial GRU run in both directions."""

    name: ClassVar[str] = "bi-match-srnn"
    bidirectional: ClassVar[bool] = True
