"""Tests for rerankers.mvlstm: MV-LSTM (eq. 1-3) and aMV-LSTM's attention gates (eq. 4)."""

import itertools
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.errors import CheckpointError
from rerankers.mvlstm import (
    AMVLSTMConfig,
    AMVLSTMReranker,
    AttentionGate,
    MVLSTMConfig,
    MVLSTMModel,
    MVLSTMReranker,
)
from tests import helpers
from tests.helpers import fit_on_tiny_dataset, one_torch_thread  # noqa: F401 (autouse fixture)

VOCAB, EMBED = 40, 10
SIDES = ["none", "q", "a", "qa"]
pad_batch = partial(helpers.pad_batch, vocab=VOCAB)
random_pairs = partial(helpers.random_pairs, vocab=VOCAB)


def small_config(**overrides):
    params = dict(hidden_size=6, top_k=7, tensor_channels=3, dropout=0.0)
    params.update(overrides)
    return MVLSTMConfig(**params)


def make_model(config, seed=0):
    torch.manual_seed(seed)
    return MVLSTMModel(config, torch.randn(VOCAB, EMBED))


# ------------------------------------------------------------------------------------------ module


def test_attention_gate_is_eq4_softmax_over_real_tokens():
    torch.manual_seed(3)
    gate = AttentionGate(4)
    with torch.no_grad():
        gate.vector.copy_(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    words = torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    alpha = gate.weights(words, mask)
    for row, length in enumerate([5, 2]):
        logits = [sum(float(words[row, t, i]) * [1.0, -2.0, 0.5, 3.0][i] for i in range(4)) for t in range(length)]
        expected = torch.softmax(torch.tensor(logits), dim=0)
        torch.testing.assert_close(alpha[row, :length], expected)
        assert torch.all(alpha[row, length:] == 0)
    torch.testing.assert_close(gate(words, mask), words * alpha.unsqueeze(-1))


def _same_weights(attention, reference, gate_vector):
    """A model with ``reference``'s weights plus gates set to ``gate_vector`` (only the gates differ)."""
    model = MVLSTMModel(small_config(attention=attention), torch.zeros(VOCAB, EMBED))
    missing, unexpected = model.load_state_dict(reference.state_dict(), strict=False)
    assert not unexpected and all("gate" in name for name in missing)
    with torch.no_grad():
        for gate in (model.query_gate, model.doc_gate):
            if gate is not None:
                gate.vector.copy_(gate_vector)
    return model.eval()


def test_attention_variants_all_run_and_differ():
    reference = make_model(small_config(attention="none"), seed=4).eval()
    gate_vector = torch.linspace(-2.0, 2.0, EMBED)
    models = {side: _same_weights(side, reference, gate_vector) for side in SIDES}
    queries, docs = random_pairs(5, seed=5, max_q=5, max_d=9)
    queries = [q + [3, 4] for q in queries]  # every question has >= 2 tokens, so its gate cannot be 1
    docs = [d + [5, 6] for d in docs]
    batch = pad_batch(queries, docs)
    with torch.no_grad():
        scores = {side: model(*batch) for side, model in models.items()}
    torch.testing.assert_close(scores["none"], reference(*batch))
    for first, second in itertools.combinations(SIDES, 2):
        assert (scores[first] - scores[second]).abs().max() > 1e-4, (first, second)


def test_question_gate_is_a_no_op_on_one_word_questions():
    # eq. 4 over a single word gives alpha = 1: aMV-LSTM (Q) must then equal MV-LSTM exactly
    reference = make_model(small_config(attention="none"), seed=6).eval()
    gated = _same_weights("q", reference, torch.linspace(-2.0, 2.0, EMBED))
    batch = pad_batch([[7], [9]], [[3, 4, 5], [6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(gated(*batch), reference(*batch))
        multi = pad_batch([[7, 8]], [[3, 4, 5]])
        assert (gated(*multi) - reference(*multi)).abs().max() > 1e-4


def test_score_is_eq3_on_kmax_of_cosine_matrix():
    config = small_config(attention="none", interaction="cosine", top_k=5)
    model = make_model(config, seed=7).eval()
    batch = pad_batch([[3, 4, 5]], [[6, 7, 8, 9]])
    q_ids, q_mask, d_ids, d_mask = batch
    with torch.no_grad():
        query = model.positional_representations(q_ids, q_mask, "q")[0]
        doc = model.positional_representations(d_ids, d_mask, "a")[0]
        cells = [float(F.cosine_similarity(query[i], doc[j], dim=0)) for i in range(3) for j in range(4)]
        top = torch.tensor(sorted(cells, reverse=True)[:5])
        linear = model.scorer[0]
        expected = float(top @ linear.weight[0] + linear.bias[0])
        assert float(model(*batch)) == pytest.approx(expected, abs=1e-5)


def test_embeddings_are_frozen_by_default():
    # that every trainable parameter gets a gradient is the contract of tests/rerankers/test_every_reranker.py
    assert not make_model(small_config()).embedding.weight.requires_grad  # train_embed: false
    assert MVLSTMReranker().text_config.freeze_embeddings and AMVLSTMReranker().text_config.freeze_embeddings


def test_shared_encoder_and_normalized_embeddings():
    shared = make_model(small_config(shared_encoder=True))
    assert shared.query_encoder is shared.doc_encoder
    separate = make_model(small_config())
    assert separate.query_encoder is not separate.doc_encoder
    norms = separate.embedding.weight[1:].norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms))
    assert torch.all(separate.embedding.weight[0] == 0)


def test_config_validation_and_defaults():
    assert MVLSTMConfig().attention == "none" and AMVLSTMConfig().attention == "q"
    assert (MVLSTMConfig().hidden_size, MVLSTMConfig().top_k) == (50, 100)
    for bad in (dict(attention="both"), dict(interaction="dot"), dict(top_k=0), dict(dropout=1.0),
                dict(mlp_hidden=-1)):
        with pytest.raises(ValueError):
            MVLSTMConfig(**bad)
    with pytest.raises(ValueError):
        MVLSTMReranker.from_options({"attention": "x"})


# ---------------------------------------------------------------------------- through the framework

WORDS = [f"w{i}" for i in range(40)]


def fitted(cls, tmp_path, **options):
    settings = dict(hidden_size=8, top_k=10, dropout=0.0, epochs=3, learning_rate=0.01, batch_size=16, negatives=3,
                    device="cpu")
    return fit_on_tiny_dataset(cls, tmp_path, WORDS, settings, **options)


@pytest.mark.parametrize("cls", [MVLSTMReranker, AMVLSTMReranker])
def test_tiny_fit_lowers_the_hinge_loss(cls, tmp_path):
    reranker, report, _ = fitted(cls, tmp_path)
    assert reranker.train_config.loss == "hinge" and reranker.train_config.margin == 1.0
    assert reranker.model_config.attention == ("q" if cls is AMVLSTMReranker else "none")
    helpers.assert_the_loss_falls(report, epochs=3)


def test_save_load_round_trip_gives_identical_scores(tmp_path):
    reranker, _, train = fitted(AMVLSTMReranker, tmp_path, epochs=1, attention="qa", interaction="tensor")
    path = tmp_path / "amvlstm.pt"
    reranker.save(path)
    loaded = AMVLSTMReranker.load(path)
    assert loaded.model_config == reranker.model_config
    for query_id in list(train.queries)[:4]:
        docs = [train.docs[h.doc_id] for h in train.candidates[query_id]]
        assert loaded.score(train.queries[query_id], docs) == reranker.score(train.queries[query_id], docs)
    with pytest.raises(CheckpointError):
        MVLSTMReranker.load(path)  # an amvlstm checkpoint is not an mvlstm one
