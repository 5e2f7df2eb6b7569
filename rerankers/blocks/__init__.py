"""Shared neural building blocks of the re-rankers, one theme per module, every name importable from here.

Every model of the project works on padded batches, so everything here is batched and masked and never loops
over tokens or matrix cells in Python. Conventions shared by all blocks:

* sequences are channel-last: ``[B, L, D]``;
* masks are ``BoolTensor`` s with ``True`` on real tokens, ``[B, L]`` for a sequence and ``[B, Lq, Ld]`` for an
  interaction matrix;
* padding must never change what a real position sees, so every block either ignores masked entries or writes
  exact zeros into them.

Modules: :mod:`.masking` (masks, masked softmax / max / mean / sum), :mod:`.similarity` (interaction
matrices; MaxSim is :func:`infra.maxsim.maxsim`), :mod:`.pooling` (k-max, kernels, histograms, dynamic
pooling), :mod:`.layers` (embeddings, dropout, convolution, feed-forward), :mod:`.recurrent`
(:class:`MaskedBiLSTM`), :mod:`.precision` (what stays float32 under bfloat16 autocast), :mod:`.first_token`
(a BERT encoder's ``[CLS]`` output for scoring, without the work nothing reads).
"""
from __future__ import annotations

from .first_token import classifier_logits, first_token_states, scoring_only, supports_first_token
from .layers import MaskedConv1d, SpatialDropout1d, build_embedding, feed_forward
from .masking import (
    interaction_mask, lengths_from_mask, masked_fill_padding, masked_max, masked_mean, masked_softmax, masked_sum,
)
from .pooling import (
    gaussian_kernel_pooling, kernel_mus_sigmas, kmax_pooling, masked_dynamic_max_pool2d, matching_histogram,
)
from .precision import score_heads, score_heads_in_float32
from .recurrent import MaskedBiLSTM
from .similarity import BilinearInteraction, bidaf_coattention, bilinear_matrix, cosine_matrix, dot_matrix

__all__ = [
    "lengths_from_mask", "interaction_mask", "masked_fill_padding", "masked_softmax", "masked_max", "masked_mean",
    "masked_sum", "dot_matrix", "cosine_matrix", "bilinear_matrix", "BilinearInteraction", "bidaf_coattention",
    "kmax_pooling", "kernel_mus_sigmas", "gaussian_kernel_pooling", "matching_histogram", "build_embedding",
    "SpatialDropout1d", "MaskedConv1d", "MaskedBiLSTM", "feed_forward", "masked_dynamic_max_pool2d",
    "score_heads", "score_heads_in_float32", "first_token_states", "supports_first_token", "scoring_only",
    "classifier_logits",
]
