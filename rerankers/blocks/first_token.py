"""The final hidden state of the first (``[CLS]``) position of a BERT encoder, computed for scoring only.

A cross-encoder reads one vector of the encoder's output, the first position's. Hugging Face's
``BertModel`` computes every position of every layer; here the same weights compute the same function with
less work, for inference (no gradients, eval mode):

* the last layer computes its keys and values for every position (the first position attends to them all)
  but its query, attention output, feed-forward and layer norms for the first position only: about 14 % of
  a 6-layer encoder's matrix products and a sixth of its attention are never computed;
* each layer's query, key and value projections are one matrix product with the three weights side by side
  (one larger product keeps AMX / AVX512 busier than three small ones; int8-quantized layers run one by one);
* attention is ``torch.nn.functional.scaled_dot_product_attention`` with the padding mask, as the ``sdpa``
  implementation of ``BertModel`` uses.

The layer norms, embeddings and activation are the encoder's own modules, so autocast treats them as in the
full forward. Outputs equal ``BertModel(...).last_hidden_state[:, 0]`` up to float rounding (tested in
float32, bfloat16 and int8). It serves a plain ``BertModel`` with absolute positions (BERT, MiniLM, the
packaged all-MiniLM-L6-v2) and, through :func:`classifier_logits`, ``BertForSequenceClassification`` models
such as ``cross-encoder/ms-marco-MiniLM-L-6-v2``; other encoders keep the full forward
(:func:`supports_first_token` says which). Training always runs the full forward (:func:`scoring_only`).

Measured (``benchmarks/cross_encoder_bf16_speed.py``, DL19 pairs, one thread): see BENCHMARKS.md, "Speed".
"""
from __future__ import annotations

__all__ = ["supports_first_token", "first_token_states", "scoring_only", "classifier_logits"]


def supports_first_token(encoder) -> bool:
    """Whether :func:`first_token_states` can compute ``encoder``'s first-position output.

    Args:
        encoder: a torch module (usually a Hugging Face ``AutoModel``).

    Returns:
        True for a ``transformers`` ``BertModel`` encoder (not a decoder, no cross-attention) with absolute
        position embeddings and a named activation.
    """
    from transformers import BertModel

    if type(encoder) is not BertModel:
        return False
    config = encoder.config
    return (not getattr(config, "is_decoder", False) and not getattr(config, "add_cross_attention", False)
            and getattr(config, "position_embedding_type", "absolute") == "absolute"
            and isinstance(config.hidden_act, str))


def scoring_only(module) -> bool:
    """Whether ``module`` runs for scoring only: in eval mode with gradients off (``torch.inference_mode`` or
    ``no_grad``), where :func:`first_token_states` may replace its full forward.

    Args:
        module: a torch module.

    Returns:
        True when nothing will be back-propagated through this forward.
    """
    import torch

    return not module.training and not torch.is_grad_enabled()


def classifier_logits(classifier, input_ids, attention_mask, token_type_ids=None):
    """The logits of a ``BertForSequenceClassification`` model (its pooler and classifier on the first
    position) through :func:`first_token_states`; ``None`` when ``classifier`` is another kind of model
    (the caller then runs its full forward).

    Args:
        classifier: a Hugging Face sequence-classification model, in eval mode.
        input_ids: ``[B, L]`` token ids.
        attention_mask: ``[B, L]``, true / 1 on real tokens.
        token_type_ids: ``[B, L]`` segment ids, or ``None``.

    Returns:
        ``[B, labels]`` logits, as ``classifier(...).logits`` up to float rounding, or ``None``.
    """
    from transformers import BertForSequenceClassification

    if type(classifier) is not BertForSequenceClassification or classifier.bert.pooler is None \
            or not supports_first_token(classifier.bert):
        return None
    first = first_token_states(classifier.bert, input_ids, attention_mask, token_type_ids)
    return classifier.classifier(classifier.dropout(classifier.bert.pooler(first.unsqueeze(1))))


def first_token_states(encoder, input_ids, attention_mask, token_type_ids=None):
    """``encoder``'s final hidden state at position 0 for every input, without the work no later step reads.

    Args:
        encoder: a module :func:`supports_first_token` accepts, in eval mode.
        input_ids: ``[B, L]`` token ids.
        attention_mask: ``[B, L]``, true / 1 on real tokens.
        token_type_ids: ``[B, L]`` segment ids, or ``None`` (all zero).

    Returns:
        ``[B, hidden]``: what ``encoder(...).last_hidden_state[:, 0]`` returns, up to float rounding.

    Example:
        >>> import torch
        >>> from infra.encoders import load_encoder
        >>> _, encoder = load_encoder()
        >>> ids = torch.tensor([[101, 7592, 102, 0]]); mask = torch.tensor([[1, 1, 1, 0]])
        >>> with torch.inference_mode():
        ...     fast = first_token_states(encoder, ids, mask)
        ...     full = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        >>> bool(torch.allclose(fast, full, atol=1e-5))
        True
    """
    keep = attention_mask.bool()[:, None, None, :]        # [B, 1, 1, L]: every query position sees real keys
    states = encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
    layers = encoder.encoder.layer
    for depth, layer in enumerate(layers):
        states = _layer(layer, states, keep, first_only=depth == len(layers) - 1)
    return states


def _layer(layer, states, keep, first_only: bool):
    """One ``BertLayer`` on ``states [B, L, h]``: ``[B, L, h]``, or with ``first_only`` ``[B, h]`` for position 0
    (the query ``[B, heads, 1, size]`` attends over all ``L`` keys)."""
    import torch.nn.functional as F

    attention = layer.attention.self
    heads, size = attention.num_attention_heads, attention.attention_head_size
    batch, hidden = states.shape[0], states.shape[-1]
    query, key, value = attention.query, attention.key, attention.value

    def split(x):                                         # [B, L', h] -> [B, heads, L', size]
        return x.view(batch, -1, heads, size).transpose(1, 2)

    if first_only:
        # the first position as a 2-D [B, h] matrix: a strided [B, 1, h] slice would make linear expand its
        # weight per batch entry and multiply batch by batch
        residual = states[:, 0]
        q = query(residual)
        k, v = _side_by_side((key, value), states)
    else:
        q, k, v = _side_by_side((query, key, value), states)
        residual = states
    context = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=keep, scale=attention.scaling)
    context = context.transpose(1, 2).reshape(residual.shape)
    output = layer.attention.output
    attended = output.LayerNorm(output.dense(context) + residual)
    inner = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(attended))
    return layer.output.LayerNorm(layer.output.dense(inner) + attended)


def _side_by_side(linears, x) -> list:
    """Each of ``linears`` applied to ``x``: as one product with their weights side by side when all are plain
    float ``nn.Linear`` layers with biases, else layer by layer (int8-quantized layers, whose weights are
    packed).

    Args:
        linears: layers that read ``x``'s last dimension.
        x: ``[..., in]`` input.

    Returns:
        One ``[..., out_i]`` output per layer.
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not all(type(layer) is nn.Linear and layer.bias is not None for layer in linears):
        return [layer(x) for layer in linears]
    joined = F.linear(x, torch.cat([layer.weight for layer in linears]), torch.cat([layer.bias for layer in linears]))
    return list(joined.split([layer.out_features for layer in linears], dim=-1))
