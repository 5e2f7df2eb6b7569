"""HCAN: Hybrid Co-Attention Network (Rao et al., EMNLP 2019).

Reference: Jinfeng Rao, Linqing Liu, Yi Tay, Wei Yang, Peng Shi and Jimmy Lin. "Bridging the Gap Between
Relevance Matching and Semantic Matching for Short Text Similarity Modeling." EMNLP-IJCNLP 2019, pp.
5370-5381. doi:10.18653/v1/D19-1540. Spec: Sec. 2 for the model, Sec. 3.2 for the hyper-parameters. Section
numbers and equation numbers below refer to that paper. Where the paper is silent or ambiguous we follow the
authors' released Keras code (github.com/jinfengr/hcan, ``attention_model.py`` / ``encoders.py``), and every
such choice is written down where it is made. Summary of the choices:

* Layers. Relevance matching (RM, Sec. 2.2) runs on the word embeddings ("layer 0") and on each of the N
  encoder layers (N+1 levels, matching the IDF tensor layout); semantic matching (SM, Sec. 2.3) runs on the N
  encoder layers only, as in the released code and the ``l = 1..N`` of Sec. 2.4.
* Convolution padding. Output position i of a CNN layer covers the phrase that *starts* at token i (zero
  padding on the right only). For k=2 this is exactly Keras ``padding='same'`` that the authors used; for the
  wider wide-encoder windows it is our choice (Keras would centre them), made so every level's phrase at i
  starts at i and the caller's IDF lookup is uniform.
* RM softmax axis. Eq. 1's text normalises each query phrase's scores over the context
  (``rm_softmax_over="context"``). Then the Mean feature is identically ``1/m`` (m = real document length),
  and Max is near 1 whether or not the phrase occurs (the softmax always crowns some best match) while a
  phrase occurring three times gets Max 1/3. The released code normalises over the query axis for each context
  position (``rm_softmax_over="query"``), which keeps both features informative and ranks clearly better (RM
  only, Microblog 2013: BENCHMARKS.md, HCAN section). The default is therefore ``"query"``: the authors'
  results come from that code.
* IDF weights are applied at every level (the released code applies them to levels 0-1 only; the paper says
  the weights change with the layer).
* Co-attention (Sec. 2.3): ``softmax_col`` normalises over the query axis (context-to-query, as in BiDAF and
  the released code); the query-to-context weights are ``softmax_over_context(max_over_query(A))`` of the
  *unnormalised* scores, as in BiDAF and the released code (the paper's ``max_col(A) U_c`` leaves the
  normalisation implicit).
* SM output (eq. 2): "the last hidden state (with dimension d)": a BiLSTM with ``d/2`` units per direction
  whose final forward and backward states are concatenated, so ``O_SM`` is in R^d (``sm_pooling="last"``). The
  released code instead max- and mean-pools all BiLSTM outputs (``sm_pooling="maxmean"``, giving 2d features).
* Final layer (Sec. 2.4): ``Linear(features, d) -> ReLU -> Linear(d, 1)``. The single output is the log-odds
  of relevance: training it with ``binary_cross_entropy_with_logits`` is the paper's two-class softmax NLL.
* Dropout: channel (spatial) dropout on the embeddings and dropout after every encoder layer and on the SM
  BiLSTM input, as in the released code; none in the MLP. No highway layer (off by default in the released
  code).
* RM features are laid out per query position, so the MLP input has a fixed ``query_slots`` positions per
  level; shorter queries leave zeros there.

The hybrid encoders (Sec. 2.1) are :mod:`rerankers.blocks.stacks`, semantic matching (Sec. 2.3, eq. 2)
:mod:`rerankers.blocks.coattention`, relevance matching (Sec. 2.2, eq. 1)
:func:`rerankers.blocks.pooling.relevance_matching_features`; the model and the re-ranker are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
import torch.nn as nn

from pipeline.core.errors import ConfigError
from rerankers.blocks import SpatialDropout1d, build_embedding, feed_forward, masked_fill_padding
from rerankers.blocks.layers import per_distinct_row
from rerankers.blocks.pooling import relevance_matching_features
from rerankers.blocks.coattention import SemanticMatching
from rerankers.blocks.stacks import ContextualEncoder, DeepEncoder, WideEncoder
from rerankers.lru import LRUCache
from rerankers.neural import WordReranker, check_choices

__all__ = [
    "HCANConfig", "HCANModel", "HCANReranker", "hcan_phrase_lengths", "hcan_query_phrases",
    "relevance_matching_features", "SemanticMatching", "DeepEncoder", "WideEncoder", "ContextualEncoder",
]

ENCODERS = ("deep", "wide", "contextual")
MATCHINGS = ("rm", "sm", "full")
RM_NORMALISATIONS = ("query", "context", "none")


@dataclass
class HCANConfig:
    """Hyper-parameters of HCAN; defaults follow Sec. 3.2.

    Attributes:
        encoder: ``"deep"`` (N stacked CNNs of width k), ``"wide"`` (N parallel CNNs of widths k..k+N-1) or
            ``"contextual"`` (N stacked BiLSTMs), Sec. 2.1.
        matching: ``"rm"`` (relevance matching only), ``"sm"`` (semantic matching only) or ``"full"`` (both;
            the HCAN of Tables 2-4).
        num_layers: N, encoder layers (4 in Sec. 3.2).
        kernel_size: k, CNN window size (2 in Sec. 3.2).
        num_filters: F, CNN filters, also the BiLSTM-encoder output size (tuned in {128, 256, 512}).
        hidden_dim: d, size of ``O_SM`` and of the MLP hidden layer (150).
        dropout: dropout rate (tuned in [0.1, 0.5]).
        query_slots: query positions the MLP has RM inputs for (the text's ``max_query_length`` is capped to
            it); longer queries must be truncated by the caller. Called ``max_query_len`` before, a name
            checkpoints of that time still carry (``RENAMED``).
        rm_softmax_over: ``"context"`` (eq. 1 as written) or ``"query"`` (released code); see the module
            docstring. ``"none"`` (neither): Max and Mean of the *cosine* matrix, unnormalised, so an exact
            match reads 1 whatever else the text holds (what DRMM, KNRM and MatchPyramid read);
            ``benchmarks/exact_match_probe.py`` measures the three.
        rm_null_logit: add a learned "no match" logit (one per level, initialised at 0) to the RM softmax, so
            the normalised similarity is measured against an absolute reference as well as against the other
            phrases; see the module docstring.
        sm_pooling: ``"last"`` (eq. 2: final BiLSTM states, d features) or ``"maxmean"`` (released code:
            max+mean over positions, 2d).
    """

    encoder: str = "deep"
    matching: str = "full"
    num_layers: int = 4
    kernel_size: int = 2
    num_filters: int = 256
    hidden_dim: int = 150
    dropout: float = 0.1
    query_slots: int = 20
    rm_softmax_over: str = "query"
    rm_null_logit: bool = False
    sm_pooling: str = "last"

    #: earlier option names, read from older checkpoints
    RENAMED: ClassVar[dict[str, str]] = {"max_query_len": "query_slots"}

    def __post_init__(self) -> None:
        check_choices(self, encoder=ENCODERS, matching=MATCHINGS, rm_softmax_over=RM_NORMALISATIONS)
        if self.rm_null_logit and self.rm_softmax_over == "none":
            raise ConfigError("rm_null_logit takes part in the RM softmax: it needs rm_softmax_over 'query' or 'context'")
        if self.sm_pooling not in ("last", "maxmean"):
            raise ConfigError("sm_pooling must be 'last' or 'maxmean'")
        if self.num_layers < 1 or self.kernel_size < 1 or self.query_slots < 1:
            raise ConfigError("num_layers, kernel_size and query_slots must be >= 1")
        if self.hidden_dim % 2:
            raise ConfigError("hidden_dim must be even (split over the two BiLSTM directions)")
        if self.encoder == "contextual" and self.num_filters % 2:
            raise ConfigError("num_filters must be even for the contextual (BiLSTM) encoder")


def hcan_phrase_lengths(config: HCANConfig) -> list[int]:
    """n-gram length represented at each of the N+1 levels (embeddings first).

    Position i of level l represents the query tokens ``i .. i+n_l-1`` (cut at the query end), where ``n_l``
    is:

    * level 0 (word embeddings): 1;
    * deep encoder, layer l: ``l*(k-1)+1``, the receptive field of l stacked width-k convolutions padded on
      the right (k=2: 2, 3, 4, 5);
    * wide encoder, layer l: ``k+l-1``, the width of that parallel convolution (k=2: 2, 3, 4, 5);
    * contextual encoder: 1 at every layer (the BiLSTM output at i is the contextualised word i; its IDF is
      the word's).

    Args:
        config: the model configuration.

    Returns:
        ``[n_0, n_1, ..., n_N]``.
    """
    k, n = config.kernel_size, config.num_layers
    if config.encoder == "deep":
        per_layer = [layer * (k - 1) + 1 for layer in range(1, n + 1)]
    elif config.encoder == "wide":
        per_layer = [k + layer - 1 for layer in range(1, n + 1)]
    else:
        per_layer = [1] * n
    return [1] + per_layer


def hcan_query_phrases(tokens: Sequence[str], config: HCANConfig) -> list[list[tuple[str, ...]]]:
    """The query phrase whose IDF goes into ``query_idf[l, i]``.

    A reference for callers building ``query_idf``: the phrase at level l, position i is
    ``tuple(tokens[i : i + n_l])`` with ``n_l`` from :func:`hcan_phrase_lengths`, truncated at the end of the
    query.

    Args:
        tokens: the real (unpadded) query tokens.
        config: the model configuration.

    Returns:
        ``phrases[l][i]`` for ``l = 0..N`` and ``i = 0..len(tokens)-1``.
    """
    return [
        [tuple(tokens[i : i + length]) for i in range(len(tokens))]
        for length in hcan_phrase_lengths(config)
    ]


# -- The model (Sec. 2, Figure 1) -------------------------------------------------------------------------


class HCANModel(nn.Module):
    """HCAN scorer (Sec. 2, Figure 1): hybrid encoder -> RM + SM at every layer -> MLP.

    Inputs (vocabulary row 0 = padding, row 1 = OOV; the paper initialises OOV vectors uniformly in [0, 0.1],
    which is up to whoever builds the matrix):

    * ``query_ids`` ``[B, Lq]`` long, ``query_mask`` ``[B, Lq]`` bool (True = real token, real tokens first);
    * ``doc_ids`` ``[B, Ld]`` long, ``doc_mask`` ``[B, Ld]`` bool;
    * ``query_idf`` ``[B, N+1, Lq]`` float: ``query_idf[b, l, i]`` is the IDF of the query phrase of tokens
      ``i .. i+n_l-1`` (``n_l`` from :func:`hcan_phrase_lengths`, see :func:`hcan_query_phrases`), the IDF of
      the truncated phrase where it would run past the query end, and 0 at padding. Concretely, position i at
      level l covers:

      - level 0, every encoder: the word i;
      - deep: tokens ``i .. i+l(k-1)`` (receptive field ``l(k-1)+1`` starting at i, because each convolution
        pads on the right only);
      - wide: tokens ``i .. i+k+l-2`` (width ``k+l-1`` starting at i);
      - contextual: the word i.

      Unused (may be None) when ``matching == "sm"``.

    Output: ``[B]`` scores, the log-odds of relevance. Padding never changes a
    score: the same pair scores the same (up to float rounding) alone or padded inside a batch, in eval mode.
    """

    def __init__(self, config: HCANConfig, embedding_weights: torch.Tensor, freeze_embeddings: bool = False) -> None:
        """
        Args:
            config: hyper-parameters.
            embedding_weights: ``[V, E]`` initial word vectors (copied).
            freeze_embeddings: keep them fixed (the paper trains them).
        """
        super().__init__()
        self.config = config
        self.embedding = build_embedding(embedding_weights, freeze=freeze_embeddings, padding_idx=0)
        self.embedding_dropout = SpatialDropout1d(config.dropout)
        embed_dim = embedding_weights.shape[1]
        encoder_cls = {"deep": DeepEncoder, "wide": WideEncoder, "contextual": ContextualEncoder}
        self.encoder = encoder_cls[config.encoder](embed_dim, config)

        self.use_rm = config.matching in ("rm", "full")
        self.use_sm = config.matching in ("sm", "full")
        null_logit = self.use_rm and config.rm_null_logit
        self.rm_null_logits = nn.Parameter(torch.zeros(config.num_layers + 1)) if null_logit else None
        feature_size = (config.num_layers + 1) * 2 * config.query_slots if self.use_rm else 0
        self.semantic = nn.ModuleList()
        if self.use_sm:
            sm_args = (config.num_filters, config.hidden_dim, config.dropout, config.sm_pooling)
            self.semantic = nn.ModuleList(SemanticMatching(*sm_args) for _ in range(config.num_layers))
            feature_size += sum(sm.output_size for sm in self.semantic)
        self.feature_size = feature_size
        self.classifier = feed_forward([feature_size, config.hidden_dim, 1])

    def _fit_query_length(self, query_ids: torch.Tensor, query_mask: torch.Tensor, query_idf: torch.Tensor | None):
        # RM features have one MLP slot per query position, so columns past query_slots may only be padding
        # (dropped here); real tokens there would have no slot.
        max_len = self.config.query_slots
        if query_ids.shape[1] <= max_len:
            return query_ids, query_mask, query_idf
        if query_mask[:, max_len:].any():
            raise ValueError(f"query has real tokens beyond query_slots={max_len}; truncate queries "
                             "(and their IDF rows) to config.query_slots before scoring")
        query_idf = query_idf[..., :max_len] if query_idf is not None else None
        return query_ids[:, :max_len], query_mask[:, :max_len], query_idf

    def forward(self, query_ids: torch.Tensor, query_mask: torch.Tensor, doc_ids: torch.Tensor, doc_mask: torch.Tensor,
                query_idf: torch.Tensor | None) -> torch.Tensor:
        """Score a batch of (query, document) pairs.

        Args:
            query_ids: ``[B, Lq]`` long.
            query_mask: ``[B, Lq]`` bool.
            doc_ids: ``[B, Ld]`` long.
            doc_mask: ``[B, Ld]`` bool.
            query_idf: ``[B, N+1, Lq]`` float (see class docstring), or None when ``matching == "sm"``.

        Returns:
            ``[B]`` relevance logits.
        """
        cfg = self.config
        query_mask = query_mask.bool()
        doc_mask = doc_mask.bool()
        if self.use_rm:
            expected = (query_ids.shape[0], cfg.num_layers + 1, query_ids.shape[1])
            if query_idf is None or tuple(query_idf.shape) != expected:
                got = None if query_idf is None else tuple(query_idf.shape)
                raise ValueError(f"query_idf must have shape {expected}, got {got}")
        query_ids, query_mask, query_idf = self._fit_query_length(query_ids, query_mask, query_idf)

        q_levels = self._levels(query_ids, query_mask)
        d_levels = self._levels(doc_ids, doc_mask)

        features = []
        if self.use_rm:
            pad_slots = cfg.query_slots - query_ids.shape[1]
            for level, (u_q, u_c) in enumerate(zip(q_levels, d_levels)):
                rm = relevance_matching_features(
                    u_q, u_c, query_mask, doc_mask, query_idf[:, level].to(u_q.dtype), cfg.rm_softmax_over,
                    None if self.rm_null_logits is None else self.rm_null_logits[level],
                )
                # Fixed-size slots: shorter queries leave zeros, exactly what a
                # padded query position would have produced.
                features.append(nn.functional.pad(rm, (0, pad_slots)).flatten(1))
        if self.use_sm:
            for sm, u_q, u_c in zip(self.semantic, q_levels[1:], d_levels[1:]):
                features.append(sm(u_q, u_c, query_mask, doc_mask))
        return self.classifier(torch.cat(features, dim=-1)).squeeze(-1)

    def _levels(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The N+1 levels (embeddings, then each encoder layer) of texts ``ids`` ``[B, L]``.

        In eval mode each distinct row is encoded once and shared by the pairs that hold it
        (:func:`~rerankers.blocks.layers.per_distinct_row`): a query repeated over its candidates, a document
        under several queries when batches mix queries (its pairs sit together in length-sorted scoring
        batches). The embedding and the encoders see one text at a time, so sharing changes no value; in
        training each pair keeps its own dropout.
        """
        return self._encode(ids, mask) if self.training else per_distinct_row(self._encode, ids, mask)

    def _embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_fill_padding(self.embedding_dropout(self.embedding(ids)), mask)

    def _encode(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        levels = [self._embed(ids, mask)]
        return levels + self.encoder(levels[0], mask)


# -- Re-ranker: HCAN on the word-level framework (rerankers.neural) ---------------------------------------


class HCANReranker(WordReranker):
    """``--reranker hcan``: :class:`HCANModel` with the project's tokenizer, vocabulary, IDF and trainer.

    ``query_idf`` rows come from the collection's document frequencies
    (:class:`pipeline.core.vocabulary.IDFStatistics`) of the phrase each level represents
    (:func:`hcan_query_phrases`); the paper computes IDF "from the training corpus" (Sec. 3.2), and the
    collection the model is prepared on is that corpus here. Training is pointwise (binary cross-entropy on
    the logit, = the paper's two-class NLL of Sec. 2.4). Differences from Sec. 3.2, chosen for a 2-core CPU
    and offline data: Adam (lr 1e-3) instead of SGD with lr in {0.05, 0.02, 0.01}; GloVe 6B 50d (or
    ``--set embeddings=word2vec``) instead of 300d word2vec trained on tweets; F = 256.
    """

    name = "hcan"
    model_config_class = HCANConfig
    train_defaults = {"loss": "pointwise", "epochs": 10, "batch_size": 64, "learning_rate": 1e-3}

    def __init__(self, *args, **kwargs):
        """
        Args:
            *args: as :class:`~rerankers.neural.WordReranker` takes them.
            **kwargs: as :class:`~rerankers.neural.WordReranker` takes them.
        """
        super().__init__(*args, **kwargs)
        # bounded like every cache of prepared texts (rerankers.lru): a long-lived server sees unbounded queries
        self._idf_rows = LRUCache(8192)

    @property
    def phrase_lengths(self) -> tuple[int, ...]:
        """The n-gram lengths whose IDF the query levels use (:func:`hcan_phrase_lengths`)."""
        return tuple(sorted(set(hcan_phrase_lengths(self.model_config))))

    def build_module(self, embedding_weights):
        """A fresh :class:`HCANModel`; queries are cut to the model's ``query_slots``.

        Args:
            embedding_weights: ``[V, E]`` initial word vectors.

        Returns:
            The module.
        """
        if self.text_config.max_query_length > self.model_config.query_slots:
            self.text_config.max_query_length = self.model_config.query_slots
        return HCANModel(self.model_config, embedding_weights.float(), self.text_config.freeze_embeddings)

    def _query_idf(self, tokens: Sequence[str]) -> list[list[float]]:
        key = tuple(tokens)
        rows = self._idf_rows.get(key)
        if rows is None:
            rows = [[self.idf.idf(p) for p in level] for level in hcan_query_phrases(tokens, self.model_config)]
            self._idf_rows.put(key, rows)
        return rows

    def features(self, query_tokens: Sequence[Sequence[str]], query_length: int) -> dict:
        """The IDF of the phrase each query position stands for, at every level.

        Args:
            query_tokens: each pair's query tokens, truncated.
            query_length: the padded query length of the batch.

        Returns:
            ``{"query_idf": [B, N+1, Lq]}`` (0 at padding).
        """
        levels = self.model_config.num_layers + 1
        idf = torch.zeros(len(query_tokens), levels, query_length)
        for row, tokens in enumerate(query_tokens):
            if tokens:
                idf[row, :, : len(tokens)] = torch.tensor(self._query_idf(tokens))
        return {"query_idf": idf}
