"""MV-LSTM (Wan et al., AAAI 2016) and aMV-LSTM (Belkacem et al., SAC 2019).

References: Thiziri Belkacem, Taoufiq Dkaki, Jose G. Moreno and Mohand Boughanem. "aMV-LSTM: an
attention-based model with multiple positional text matching." 34th ACM/SIGAPP Symposium on Applied
Computing (SAC 2019), pp. 788-795. doi:10.1145/3297280.3297355; and Shengxian Wan, Yanyan Lan, Jiafeng
Guo, Jun Xu, Liang Pang and Xueqi Cheng. "A Deep Architecture for Semantic Matching with Multiple
Positional Sentence Representations." AAAI 2016. arXiv:1511.08277. Section and equation numbers below
refer to the first
(MV-LSTM is its Sec. 2.3, eq. 1-3; aMV-LSTM its Sec. 3, eq. 4-5; the setup its Sec. 4.1). Where the
paper is silent we follow what its authors ran: MatchZoo 1.x (``mvlstm.py`` and the WikiQA config
``mvlstm_wikiqa.config``) and their aMV-LSTM fork of it (``text1_attention``/``text2_attention``
gates). The choices:

* Pipeline (Sec. 2.3, Fig. 2): embeddings -> [attention gate, eq. 4] -> BiLSTM per text (eq. 1-2, the
  forward and backward states concatenated at each position) -> interaction matrix of every query
  position with every document position -> k-max pooling over the whole matrix -> ``s = Uz + b``
  (eq. 3). The output activation delta of eq. 3 is the identity: the score is trained with the
  rank hinge loss of eq. 5, which wants an unbounded score (MatchZoo's ``Dense(1)`` for ranking).
* Interaction: cosine (Sec. 4.1, "we used the cosine similarity function ... of the bidirectional
  representations"), the default. The original MV-LSTM paper that Sec. 2.3 summarises also has a
  bilinear ``u^T M v + b`` and a tensor layer ``ReLU(u^T M^[1:c] v + W[u; v] + b)`` with c channels;
  both are available (``interaction="bilinear"|"tensor"``), the tensor layer being k-max pooled per
  channel. Footnote 8's "forward and backward interaction matrices" is read as the two halves of the
  concatenated representation taking part in one cosine (what MatchZoo computes).
* k-max pooling keeps the k largest cells of the whole matrix over real (query, document) cells only;
  when a pair has fewer than k real cells, the remaining slots are 0 (MatchZoo pads the texts to
  fixed lengths, so its padding cells compete; masking them keeps a score independent of padding).
* Sizes (Sec. 4.1): 50 LSTM units per direction (100-dimensional positions), k = 100.
* Attention gate (eq. 4): ``alpha_t = softmax_t(V^T w_t)`` over the real tokens of the text, one
  vector V per gated text, no bias, initialised in U(-0.01, 0.01) as in the authors' fork (uniform
  attention at the start); the gated input is ``alpha_t * w_t`` (the line after eq. 4).
  ``attention`` picks the gated side(s): ``"q"`` = aMV-LSTM (Q), the paper's best on WikiQA
  (Table 3), ``"a"``, ``"qa"``, or ``"none"`` = MV-LSTM.
* Separate BiLSTM weights for the two texts (two ``Bidirectional(LSTM)`` layers in the authors'
  code); ``shared_encoder=True`` shares them.
* Embeddings are L2-normalised rows ("All the embedded vectors have been normalized", Sec. 4.1) and
  frozen (``train_embed: false`` in the WikiQA config); ``--set freeze_embeddings=false`` trains them.
* Dropout 0.5 (the WikiQA config) on the LSTM inputs, one mask per feature shared over positions
  (Keras' LSTM ``dropout``), and on the pooled vector, as in MatchZoo.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.core.errors import ConfigError
from rerankers.blocks import (
    BilinearInteraction,
    MaskedBiLSTM,
    SpatialDropout1d,
    build_embedding,
    cosine_matrix,
    feed_forward,
    interaction_mask,
    kmax_pooling,
    masked_fill_padding,
    masked_softmax,
)
from rerankers.neural import FROZEN_EMBEDDINGS, WordReranker

__all__ = [
    "ATTENTION_SIDES",
    "INTERACTIONS",
    "MVLSTMConfig",
    "AMVLSTMConfig",
    "AttentionGate",
    "MVLSTMModel",
    "MVLSTMReranker",
    "AMVLSTMReranker",
]

ATTENTION_SIDES = ("none", "q", "a", "qa")
INTERACTIONS = ("cosine", "bilinear", "tensor")


@dataclass
class MVLSTMConfig:
    """Hyper-parameters of MV-LSTM / aMV-LSTM (Sec. 2.3, 3.2 and 4.1 of the aMV-LSTM paper).

    Attributes:
        attention: which text gets the attention gate of eq. 4: ``"none"`` (MV-LSTM), ``"q"`` (question,
            aMV-LSTM (Q)), ``"a"`` (answer, aMV-LSTM (A)) or ``"qa"`` (both, aMV-LSTM (Q+A)).
        interaction: ``"cosine"`` (Sec. 4.1), ``"bilinear"`` or ``"tensor"`` (the original MV-LSTM's
            other two similarity functions); see the module docstring.
        hidden_size: LSTM units per direction (50, Sec. 4.1); positions are ``2 * hidden_size`` wide.
        top_k: k of the k-max pooling (100, Sec. 4.1).
        tensor_channels: c, slices of the tensor layer (5, MatchZoo's default ``r``).
        mlp_hidden: 0 for eq. 3's single linear layer; > 0 adds one ReLU hidden layer of that size.
        dropout: dropout on the LSTM inputs and on the pooled features (0.5, MatchZoo's WikiQA config).
        normalize_embeddings: L2-normalise every embedding row before use (Sec. 4.1).
        shared_encoder: one BiLSTM for both texts instead of one per text.
    """

    attention: str = "none"
    interaction: str = "cosine"
    hidden_size: int = 50
    top_k: int = 100
    tensor_channels: int = 5
    mlp_hidden: int = 0
    dropout: float = 0.5
    normalize_embeddings: bool = True
    shared_encoder: bool = False

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_SIDES:
            raise ConfigError(f"attention must be one of {ATTENTION_SIDES}, got {self.attention!r}")
        if self.interaction not in INTERACTIONS:
            raise ConfigError(f"interaction must be one of {INTERACTIONS}, got {self.interaction!r}")
        if self.hidden_size < 1 or self.top_k < 1 or self.tensor_channels < 1:
            raise ConfigError("hidden_size, top_k and tensor_channels must be >= 1")
        if self.mlp_hidden < 0:
            raise ConfigError("mlp_hidden must be >= 0 (0: a single linear layer, eq. 3)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class AMVLSTMConfig(MVLSTMConfig):
    """:class:`MVLSTMConfig` whose default is aMV-LSTM (Q), the best variant on WikiQA (Table 3)."""

    attention: str = "q"


class AttentionGate(nn.Module):
    """The attention gating of eq. 4: ``alpha_t = exp(V^T w_t) / sum_j exp(V^T w_j)`` over real tokens.

    The softmax runs over the real tokens only, so padding gets weight 0 and never shifts the weights of
    real tokens. V is initialised in U(-0.01, 0.01) (the authors' code), so training starts from nearly
    uniform weights ``1/l``.
    """

    def __init__(self, embedding_dim: int) -> None:
        """
        Args:
            embedding_dim: size of the word vectors ``w_t``.
        """
        super().__init__()
        self.vector = nn.Parameter(torch.empty(embedding_dim))
        nn.init.uniform_(self.vector, -0.01, 0.01)

    def weights(self, embedded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``alpha`` of eq. 4: ``[B, L, E]``, ``[B, L]`` -> ``[B, L]`` (rows sum to 1 over real tokens)."""
        return masked_softmax(embedded @ self.vector, mask, dim=-1)

    def forward(self, embedded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The gated text ``S' = (alpha_0 w_0, ..., alpha_l w_l)`` (Sec. 3.2): ``[B, L, E]``."""
        return embedded * self.weights(embedded, mask).unsqueeze(-1)


class MVLSTMModel(nn.Module):
    """MV-LSTM (eq. 1-3) with the optional attention gates of aMV-LSTM (eq. 4).

    ``forward`` returns one unbounded relevance score per pair (eq. 3 with an identity output).
    """

    def __init__(
        self, config: MVLSTMConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = True
    ) -> None:
        """
        Args:
            config: the hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (row 0 is padding).
            freeze_embeddings: keep the word vectors fixed during training.
        """
        super().__init__()
        self.config = config
        weights = embedding_weights.float()
        if config.normalize_embeddings:
            weights = F.normalize(weights, dim=-1)
        self.embedding = build_embedding(weights, freeze=freeze_embeddings)
        dim = weights.shape[1]
        self.query_gate = AttentionGate(dim) if config.attention in ("q", "qa") else None
        self.doc_gate = AttentionGate(dim) if config.attention in ("a", "qa") else None
        self.input_dropout = SpatialDropout1d(config.dropout)
        self.query_encoder = MaskedBiLSTM(dim, config.hidden_size)
        self.doc_encoder = self.query_encoder if config.shared_encoder else MaskedBiLSTM(dim, config.hidden_size)
        width = self.query_encoder.output_size
        # learned similarity of the original MV-LSTM (None for the parameter-free cosine)
        if config.interaction == "bilinear":
            self.similarity = BilinearInteraction(width, width, channels=1, bias=True)
        elif config.interaction == "tensor":
            self.similarity = BilinearInteraction(
                width, width, channels=config.tensor_channels, linear_terms=True, bias=True
            )
        else:
            self.similarity = None
        channels = config.tensor_channels if config.interaction == "tensor" else 1
        self.feature_size = channels * config.top_k
        self.feature_dropout = nn.Dropout(config.dropout)
        hidden = [config.mlp_hidden] if config.mlp_hidden else []
        self.scorer = feed_forward([self.feature_size, *hidden, 1])

    def positional_representations(self, ids: torch.Tensor, mask: torch.Tensor, side: str) -> torch.Tensor:
        """Per-position BiLSTM outputs ``y_t`` (eq. 2) of the question (``side="q"``) or answer (``"a"``).

        Returns:
            ``[B, L, 2H]`` with zeros at padding.
        """
        if side not in ("q", "a"):
            raise ValueError(f"side must be 'q' (question) or 'a' (answer), got {side!r}")
        gate = self.query_gate if side == "q" else self.doc_gate
        encoder = self.query_encoder if side == "q" else self.doc_encoder
        embedded = masked_fill_padding(self.embedding(ids), mask)
        if gate is not None:
            embedded = gate(embedded, mask)
        outputs, _ = encoder(self.input_dropout(embedded), mask)
        return outputs

    def interactions(
        self, query: torch.Tensor, query_mask: torch.Tensor, doc: torch.Tensor, doc_mask: torch.Tensor
    ) -> torch.Tensor:
        """Interaction tensor ``[B, C, Lq, Ld]`` of positional representations (C = 1 but for the tensor layer)."""
        if self.config.interaction == "cosine":
            return cosine_matrix(query, doc, query_mask, doc_mask).unsqueeze(1)
        scores = self.similarity(query, doc)
        return torch.relu(scores) if self.config.interaction == "tensor" else scores

    def forward(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        doc_ids: torch.Tensor,
        doc_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Scores of a batch of (question, answer) pairs.

        Args:
            query_ids: ``[B, Lq]`` long.
            query_mask: ``[B, Lq]`` bool, True on real tokens (a prefix of each row).
            doc_ids: ``[B, Ld]`` long.
            doc_mask: ``[B, Ld]`` bool.

        Returns:
            ``[B]`` scores ``s = Uz + b`` (eq. 3), z the k-max pooled interactions.
        """
        query_mask, doc_mask = query_mask.bool(), doc_mask.bool()
        query = self.positional_representations(query_ids, query_mask, "q")
        doc = self.positional_representations(doc_ids, doc_mask, "a")
        matrix = self.interactions(query, query_mask, doc, doc_mask)
        cells = interaction_mask(query_mask, doc_mask).unsqueeze(1).expand_as(matrix)
        pooled = kmax_pooling(matrix.flatten(2), self.config.top_k, dim=-1, mask=cells.flatten(2))
        return self.scorer(self.feature_dropout(pooled.flatten(1))).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# Re-rankers on the word-level framework (rerankers.neural)
# --------------------------------------------------------------------------------------------------

_TRAIN_DEFAULTS = {
    "loss": "hinge",
    "margin": 1.0,
    "optimizer": "adam",
    "learning_rate": 1e-3,
    "batch_size": 200,
    "negatives": 4,
    "epochs": 20,
    "patience": 3,
}


class MVLSTMReranker(WordReranker):
    """``--reranker mvlstm``: MV-LSTM (no attention) on the project's tokenizer, vocabulary and trainer.

    Training (Sec. 4.1): rank hinge loss with margin 1 (eq. 5) on (positive, sampled negative) pairs of
    a question's candidates. Differences, chosen for a CPU and offline data: Adam with lr 1e-3 (the
    paper names no optimizer; MatchZoo's WikiQA config uses Adadelta, MatchZoo 2 Adam); 100 pairs per
    batch (MatchZoo's ``batch_size: 100``), 4 negatives per positive per epoch, at most 20 epochs with
    early stopping on dev MAP instead of the paper's 400 MatchZoo "epochs" (= 400 x 10 batches);
    GloVe 6B 50d (frozen, normalised) instead of GloVe 840B 300d.
    """

    name: ClassVar[str] = "mvlstm"
    model_config_class: ClassVar[type] = MVLSTMConfig
    train_defaults: ClassVar[dict] = _TRAIN_DEFAULTS
    text_defaults: ClassVar[dict] = FROZEN_EMBEDDINGS
    module_class: ClassVar[type] = MVLSTMModel


class AMVLSTMReranker(MVLSTMReranker):
    """``--reranker amvlstm``: aMV-LSTM, attention on the question by default (``--set attention=a|qa``)."""

    name: ClassVar[str] = "amvlstm"
    model_config_class: ClassVar[type] = AMVLSTMConfig
