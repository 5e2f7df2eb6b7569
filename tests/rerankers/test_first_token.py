"""The [CLS]-only scoring forward of BERT encoders (rerankers/blocks/first_token.py) against the full one."""
import copy

import pytest
import torch
import transformers

from rerankers import reranker_class
from rerankers.blocks.first_token import classifier_logits, first_token_states, scoring_only, supports_first_token
from rerankers.hf_export.classifier import PretrainedHeadModel
from tests.helpers import ENCODER_DOCS as DOCS, ENCODER_QUERY as QUERY, save_tiny_bert


def tiny_config(**changes):
    settings = dict(vocab_size=120, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=40, type_vocab_size=2)
    return transformers.BertConfig(**{**settings, **changes})


def padded_batch(seed=0):
    """Four inputs of lengths 9, 5, 2 and 9, padded to 9, with two segments."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 120, (4, 9), generator=generator)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    ids[mask == 0] = 0
    types = (torch.arange(9) >= 4).long().expand(4, 9) * mask
    return ids, mask, types


def full_first(encoder, ids, mask, types):
    return encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state[:, 0]


def test_first_token_equals_the_full_forward_in_float32():
    torch.manual_seed(0)
    encoder = transformers.BertModel(tiny_config()).eval()
    ids, mask, types = padded_batch()
    with torch.inference_mode():
        fast = first_token_states(encoder, ids, mask, types)
        full = full_first(encoder, ids, mask, types)
        no_types = first_token_states(encoder, ids, mask)
        full_no_types = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
    assert fast.shape == (4, 32)
    assert torch.allclose(fast, full, atol=1e-5), (fast - full).abs().max()
    assert torch.allclose(no_types, full_no_types, atol=1e-5)
    assert not torch.allclose(fast, no_types, atol=1e-3)        # the segments were read


def test_padding_never_changes_the_first_token():
    torch.manual_seed(0)
    encoder = transformers.BertModel(tiny_config()).eval()
    ids, mask, types = padded_batch()
    with torch.inference_mode():
        alone = first_token_states(encoder, ids[2:3, :2], mask[2:3, :2], types[2:3, :2])
        padded = first_token_states(encoder, ids, mask, types)[2:3]
    assert torch.allclose(alone, padded, atol=1e-5)


def test_first_token_follows_the_full_forward_in_bfloat16():
    torch.manual_seed(0)
    encoder = copy.deepcopy(transformers.BertModel(tiny_config()).eval()).to(torch.bfloat16)
    ids, mask, types = padded_batch()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        fast = first_token_states(encoder, ids, mask, types).float()
        full = full_first(encoder, ids, mask, types).float()
    assert fast.dtype == torch.float32 and torch.allclose(fast, full, atol=0.1), (fast - full).abs().max()


def test_what_is_supported():
    assert supports_first_token(transformers.BertModel(tiny_config()))
    assert not supports_first_token(transformers.BertModel(tiny_config(position_embedding_type="relative_key")))
    assert not supports_first_token(transformers.BertModel(tiny_config(is_decoder=True)))
    assert not supports_first_token(torch.nn.Linear(2, 2))
    assert classifier_logits(torch.nn.Linear(2, 2), *padded_batch()) is None


def test_scoring_only_needs_eval_mode_and_no_gradients():
    module = torch.nn.Linear(2, 2)
    assert not scoring_only(module.eval())                       # gradients on
    with torch.no_grad():
        assert scoring_only(module)
        assert not scoring_only(module.train())


@pytest.mark.parametrize("labels", [1, 2])
def test_classifier_logits_equal_the_sequence_classifier(labels):
    torch.manual_seed(0)
    classifier = transformers.BertForSequenceClassification(tiny_config(num_labels=labels)).eval()
    ids, mask, types = padded_batch()
    model = PretrainedHeadModel(classifier).eval()
    with torch.inference_mode():
        full = classifier(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        fast = classifier_logits(classifier, ids, mask, types)
        scores = model(ids, mask.bool(), types)
    assert torch.allclose(fast, full, atol=1e-5)
    expected = full[:, 0] if labels == 1 else full[:, 1] - full[:, 0]
    assert torch.allclose(scores, expected, atol=1e-5)


def test_cross_encoder_scores_as_the_full_forward_and_trains_through_it(tmp_path, monkeypatch):
    reranker = reranker_class("cross-encoder").from_options(
        {"encoder": save_tiny_bert(tmp_path), "max_query_length": 8, "max_doc_length": 16}, seed=1)
    reranker.prepare()
    fast = reranker.score(QUERY, DOCS)
    reranker.score_in_bf16()
    fast_bf16 = reranker.score(QUERY, DOCS)
    reranker.score_in_bf16(False)
    calls = []
    monkeypatch.setattr("rerankers.cross_encoder.supports_first_token", lambda encoder: calls.append(1) and False)
    full = reranker.score(QUERY, DOCS)
    assert calls and fast == pytest.approx(full, abs=1e-5)
    assert fast_bf16 == pytest.approx(full, abs=0.05) and fast_bf16 != fast
    # training computes the full forward: gradients reach every layer, the last layer's query included
    module = reranker.module.train()
    batch = reranker.tensors(reranker.encode([(QUERY, doc) for doc in DOCS]))
    monkeypatch.undo()
    module(**batch).sum().backward()
    query = module.encoder.encoder.layer[-1].attention.self.query.weight
    assert query.grad is not None and query.grad.abs().sum() > 0


def test_int8_cross_encoder_scores_through_the_first_token_forward(tmp_path, monkeypatch):
    options = {"encoder": save_tiny_bert(tmp_path), "max_query_length": 8, "max_doc_length": 16}
    reranker = reranker_class("cross-encoder").from_options(options, seed=1)
    reranker.prepare()
    reranker.quantize_int8()                              # packed int8 weights: the projections run one by one
    fast = reranker.score(QUERY, DOCS)
    monkeypatch.setattr("rerankers.cross_encoder.supports_first_token", lambda encoder: False)
    full = reranker.score(QUERY, DOCS)
    assert fast == pytest.approx(full, abs=1e-4)
