"""Tests for rerankers.addax: eq. 3-15 blocks on hand-checkable cases, masking, ablations, the auxiliary
losses reaching the Trainer, training, checkpoints, the document cache and determinism.

Everything runs on a tiny random BERT (2 layers, hidden 32) saved with the MiniLM tokenizer, so no test
fine-tunes the real MiniLM; one test loads the real default encoder and only scores two pairs.
"""
from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Doc, Query
from infra.checkpoints import save_checkpoint
from rerankers.training.data import RankingData
from rerankers.training.config import TrainConfig
from rerankers import reranker_class
from rerankers.addax import (
    AddaxAttentionMAGSReranker, AddaxConfig, AddaxNoHashingReranker, AddaxNoHighwayReranker,
    AddaxNoMAGSReranker, AddaxReranker, HashingDenoiser, MAGCell, maxsim, positionwise,
)
from rerankers.transformer_base import AuxiliaryLossTrainer
from tests.helpers import (  # noqa: F401  (autouse fixture)
    assert_garbage_and_missing_checkpoints_fail, assert_the_tiny_fit_overfits, one_torch_thread, tiny_dataset,
)
from tests.helpers import (  # noqa: F401
    ENCODER_DOCS as DOCS, ENCODER_QUERY as QUERY, ENCODER_WORDS as WORDS, make_tiny_encoder,
)

NAMES = ["addax", "addax-no-mags", "addax-no-hw", "addax-no-hd", "addax-att-mags"]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def make(name="addax", encoder=None, seed=1, prepare=True, **options):
    settings = dict(encoder=encoder, max_query_length=8, max_doc_length=16, hidden_dim=8, hash_hidden=8)
    settings.update(options)
    reranker = reranker_class(name).from_options(settings, seed=seed)
    if prepare:
        reranker.prepare()
    return reranker


def scores_of(reranker, pairs):
    reranker.module.eval()
    with torch.no_grad():
        return reranker.forward(reranker.encode(pairs))


# ------------------------------------------------------------------------------------ eq. 14, hashing


def test_maxsim_eq14_hand_example():
    q = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]]])          # third query position is padding
    d = torch.tensor([[[3.0, 0.0], [1.0, 1.0], [0.0, -1.0], [0.0, 9.0]]])  # fourth doc position is padding
    q_mask = torch.tensor([[True, True, False]])
    d_mask = torch.tensor([[True, True, True, False]])
    # q1: cos with (3,0)=1; q2 (0,1): cos with (1,1)=1/sqrt2, with (0,-1)=-1 -> max 1/sqrt2 (padding's 1 ignored)
    expected = torch.tensor([1.0 + 1 / math.sqrt(2)])
    torch.testing.assert_close(maxsim(q, q_mask, d, d_mask), expected)
    # cosine ignores scale
    torch.testing.assert_close(maxsim(3 * q, q_mask, 0.5 * d, d_mask), expected)


def test_hashing_tanh_alpha_and_auxiliary_losses_hand_example():
    denoiser = HashingDenoiser(dim=2, hidden=3, code_dim=2, alpha=5.0, reduction="sum")
    latent = torch.tensor([[[0.1, -0.2], [0.5, 0.0]]])
    mask = torch.tensor([[True, False]])
    codes = denoiser.hash(latent)
    torch.testing.assert_close(codes, torch.tanh(5 * latent))
    # L1 = ||tanh(5B) - sgn(B)||_F^2 over the real position only
    l1 = denoiser.quantization_loss(codes, latent, mask)
    torch.testing.assert_close(l1, torch.tensor([(math.tanh(0.5) - 1) ** 2 + (math.tanh(-1.0) + 1) ** 2]))
    # L2 with a decoder that outputs zeros: ||0 - H||_F^2 over real positions
    for parameter in denoiser.decoder.parameters():
        torch.nn.init.zeros_(parameter)
    features = torch.tensor([[[1.0, 2.0], [7.0, 7.0]]])
    torch.testing.assert_close(denoiser.reconstruction_loss(codes, features, mask), torch.tensor([5.0]))
    denoiser.reduction = "mean"
    torch.testing.assert_close(denoiser.reconstruction_loss(codes, features, mask), torch.tensor([2.5]))
    # the encoder: tanh, ReLU (second layer), tanh; codes in (-1, 1)
    kinds = [type(m).__name__ for m in denoiser.encoder]
    assert kinds == ["Linear", "Tanh", "Linear", "ReLU", "Linear", "Tanh"]
    out, q_loss, r_loss = denoiser(features, mask, losses=True)
    assert out.shape == (1, 2, 2) and out.abs().max() < 1 and q_loss.shape == r_loss.shape == (1,)
    assert denoiser(features, mask)[1] is None


def test_positionwise_runs_on_real_positions_and_zeros_padding():
    x = torch.arange(12.0).view(2, 3, 2)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    seen = []

    def double(rows):
        seen.append(rows.shape)
        return torch.cat([rows, rows], dim=-1) * 2

    out = positionwise(double, mask, x)
    assert seen == [(3, 2)] and out.shape == (2, 3, 4)
    torch.testing.assert_close(out[mask], torch.cat([x[mask], x[mask]], dim=-1) * 2)
    assert (out[~mask] == 0).all()
    torch.testing.assert_close(positionwise(double, None, x), double(x))


# ------------------------------------------------------------------------------------------ MAGS


def mag_inputs():
    u = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])                      # own (query) states
    v = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])          # other (doc) states, last is padding
    v_mask = torch.tensor([[True, True, False]])
    similarity = u @ v.transpose(1, 2)                                 # eq. 3
    return u, v, v_mask, similarity


def hand_reference(u, v, similarity):
    """Eq. 4 over the two real doc positions."""
    weights = torch.softmax(similarity[:, :, :2], dim=-1)
    return weights @ v[:, :2]


def test_mag_cross_attention_eq3_4_and_padding():
    u, v, v_mask, similarity = mag_inputs()
    cell = MAGCell(2, positions=4, attention_only=True)
    torch.testing.assert_close(cell(u, v, v_mask, similarity), hand_reference(u, v, similarity))
    assert not list(cell.parameters())


def test_mag_gates_eq5_9_and_highway_eq10_13_hand_example():
    u, v, v_mask, similarity = mag_inputs()
    cell = MAGCell(2, positions=4, highway=True)
    with torch.no_grad():
        for parameter in (cell.gate_weight, cell.gate_bias, cell.mix_weight, cell.mix_bias):
            parameter.zero_()                                          # E = p = 1/2
        cell.transform.weight.copy_(torch.eye(4))                      # p_i = relu(F(c))
        cell.transform.bias.zero_()
        cell.carry.weight.zero_()                                      # g_i = 1/2
        cell.carry.bias.zero_()
        cell.output.weight.copy_(torch.cat([torch.eye(2), torch.eye(2)], dim=1))  # h = first half + second
        cell.output.bias.zero_()
    r = hand_reference(u, v, similarity)
    f_c = torch.cat([0.5 * 0.5 * r, 0.5 * 0.5 * (u - r)], dim=-1)      # eq. 6, 7, 9 with E = p = 1/2
    i = 0.5 * f_c + 0.5 * torch.relu(f_c)                              # eq. 10-12 with g = 1/2
    expected = i[..., :2] + i[..., 2:]                                 # eq. 13
    torch.testing.assert_close(cell(u, v, v_mask, similarity), expected)
    # a saturated carry gate g = 0 passes F(c) through unchanged (eq. 12)
    with torch.no_grad():
        cell.carry.bias.fill_(-1e4)
    torch.testing.assert_close(cell(u, v, v_mask, similarity), f_c[..., :2] + f_c[..., 2:])


def test_mag_gate_e_uses_position_rows_and_ignores_padding():
    u, v, v_mask, similarity = mag_inputs()
    cell = MAGCell(2, positions=4, highway=False)
    torch.manual_seed(3)
    with torch.no_grad():
        cell.gate_weight.normal_()
        cell.mix_weight.normal_()
    r = hand_reference(u, v, similarity)
    s = similarity[:, :, :2]
    gate = torch.sigmoid(s @ cell.gate_weight[:, :2].T + cell.gate_bias)         # eq. 5 (rows of real positions)
    mix = torch.sigmoid(s @ cell.mix_weight[:, :2].T + cell.mix_bias)             # eq. 8
    expected = mix * (r * gate) + (1 - mix) * ((u - r) * (1 - gate))              # w/o HW: added
    torch.testing.assert_close(cell(u, v, v_mask, similarity), expected)
    garbage = similarity.clone()
    garbage[:, :, 2] = 1e3
    torch.testing.assert_close(cell(u, v, v_mask, garbage), expected)
    own_mask = torch.tensor([[True, False]])                                       # second own row: padding
    packed = cell(u, v, v_mask, garbage, own_mask)
    torch.testing.assert_close(packed[:, 0], expected[:, 0])
    assert (packed[:, 1] == 0).all()
    with pytest.raises(ValueError, match="positions"):
        MAGCell(2, positions=2)(u, v, v_mask, similarity)


# ------------------------------------------------------------------------------------ the model


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_encodes_each_query_once(tiny_encoder, name):
    # that padding never changes a score is the contract of tests/rerankers/test_every_reranker.py
    reranker = make(name, tiny_encoder, doc_cache_size=0)
    queries = [QUERY, Query("q2", "tigers"), Query("q3", "")]
    pairs = [(queries[i % 3], doc) for i, doc in enumerate(DOCS)]
    batch = reranker.encode(pairs)
    assert batch["query_ids"].shape[0] == 3 and batch["doc_ids"].shape[0] == 5
    assert batch["query_index"].tolist() == [0, 1, 2, 0, 1]


def test_encode_positions_keep_cls_and_text_but_not_sep(tiny_encoder):
    reranker = make("addax", tiny_encoder)
    batch = reranker.encode([(QUERY, DOCS[2]), (QUERY, DOCS[3])])
    tokenizer = reranker.tokenizer
    doc_tokens = tokenizer("tigers live in forests", add_special_tokens=False)["input_ids"]
    assert batch["doc_ids"][0, : len(doc_tokens) + 2].tolist() == [tokenizer.cls_token_id, *doc_tokens,
                                                                   tokenizer.sep_token_id]
    assert batch["doc_positions"][0].sum() == len(doc_tokens) + 1
    assert batch["doc_positions"][1].tolist()[:2] == [True, False]     # empty text: [CLS] only
    long = Doc("long", " ".join(WORDS * 3))
    long_batch = reranker.encode([(Query("q", " ".join(WORDS)), long)])
    assert long_batch["doc_attention"].sum() == 16 + 2 and long_batch["query_attention"].sum() == 8 + 2


def reference_scores(reranker, pairs):
    """Eq. 3-14 recomposed by hand from the module's parts, following the config's ablation flags."""
    module, config = reranker.module, reranker.model_config
    batch = reranker.encode(pairs)
    with torch.no_grad():
        u_all = module.context(batch["query_ids"], batch["query_attention"])
        v_all = module.context(batch["doc_ids"], batch["doc_attention"])
        rows = []
        for b in range(len(pairs)):
            qi, di = batch["query_index"][b], batch["doc_index"][b]
            nq, nd = int(batch["query_positions"][qi].sum()), int(batch["doc_positions"][di].sum())
            u, v = u_all[qi, :nq][None], v_all[di, :nd][None]
            ones_q, ones_d = torch.ones(1, nq, dtype=torch.bool), torch.ones(1, nd, dtype=torch.bool)
            s = u @ v.transpose(1, 2)
            if not config.mags:
                h_q, h_d = u, v
            elif config.attention_only:
                h_q, h_d = torch.softmax(s, -1) @ v, torch.softmax(s.transpose(1, 2), -1) @ u
            else:
                h_q = module.query_mag(u, v, ones_d, s)
                h_d = module.doc_mag(v, u, ones_q, s.transpose(1, 2))
            if config.hashing:
                h_q = torch.tanh(module.query_mlp[0](h_q))
                h_d = torch.tanh(config.alpha * module.denoiser.encoder(h_d))
            cos = F.cosine_similarity(h_q[0][:, None, :], h_d[0][None, :, :], dim=-1)
            rows.append(cos.max(dim=1).values.sum())
    return torch.stack(rows)


@pytest.mark.parametrize("name", NAMES)
def test_every_ablation_computes_what_table3_describes(tiny_encoder, name):
    reranker = make(name, tiny_encoder)
    module, config = reranker.module, reranker.model_config
    expected_flags = {
        "addax": (True, True, True, False), "addax-no-mags": (False, True, True, False),
        "addax-no-hw": (True, False, True, False), "addax-no-hd": (True, True, False, False),
        "addax-att-mags": (True, True, False, True),
    }[name]
    assert (config.mags, config.highway, config.hashing, config.attention_only) == expected_flags
    parts = {".".join(n.split(".")[:2]) for n, _ in module.named_parameters() if not n.startswith("encoder")}
    assert any(p.startswith("denoiser") for p in parts) == config.hashing
    assert any(p.startswith("query_mlp") for p in parts) == config.hashing
    assert any(p.startswith("query_mag") for p in parts) == (config.mags and not config.attention_only)
    assert ("query_mag.transform" in parts) == (config.mags and config.highway and not config.attention_only)
    pairs = [(QUERY, doc) for doc in DOCS[:3]]
    torch.testing.assert_close(scores_of(reranker, pairs), reference_scores(reranker, pairs), atol=1e-5, rtol=1e-5)


def test_ablation_names_only_flip_defaults_and_set_flips_them_too(tiny_encoder):
    classes = [AddaxReranker, AddaxNoMAGSReranker, AddaxNoHighwayReranker, AddaxNoHashingReranker,
               AddaxAttentionMAGSReranker]
    assert [reranker_class(n) for n in NAMES] == classes
    assert all(issubclass(c, AddaxReranker) for c in classes)
    assert AddaxReranker.from_options({"hashing": "false", "attention_only": "true"}).model_config == \
        AddaxAttentionMAGSReranker().model_config
    assert AddaxNoMAGSReranker.from_options({"mags": "true"}).model_config == AddaxConfig()
    with pytest.raises(PipelineError, match="aux_reduction"):
        AddaxReranker.from_options({"aux_reduction": "max"})
    defaults = AddaxReranker().train_config
    assert (defaults.loss, defaults.margin, defaults.optimizer, defaults.learning_rate) == ("hinge", 1.0, "adam", 1e-5)
    config = AddaxConfig()
    assert (config.hidden_dim, config.alpha, config.delta, config.gamma) == (300, 5.0, 1e-6, 0.003)


@pytest.mark.parametrize("name", ["addax", "addax-no-hd"])
def test_auxiliary_losses_reach_the_trainer_eq15(tiny_encoder, name):
    reranker = make(name, tiny_encoder, delta=0.5, gamma=0.25, dropout=0.0)
    trainer = AuxiliaryLossTrainer(reranker, TrainConfig(loss="hinge"), seed=0)
    units = [(QUERY, [DOCS[0], DOCS[1]], [1.0, 0.0]), (QUERY, [DOCS[0], DOCS[2]], [1.0, 0.0])]
    reranker.module.train()
    scores = reranker.forward(reranker.encode([(q, d) for q, docs, _ in units for d in docs]))
    stored = reranker.module.last_auxiliary
    hinge = torch.clamp(1.0 - scores.view(2, 2)[:, 0] + scores.view(2, 2)[:, 1], min=0).mean()
    total = trainer.loss(scores, units)
    if name == "addax-no-hd":
        assert stored is None
        torch.testing.assert_close(total, hinge)
        return
    l1, l2 = stored
    assert l1.shape == l2.shape == (4,) and (l1 > 0).all() and (l2 > 0).all()
    torch.testing.assert_close(total, hinge + (0.5 * l1.sum() + 0.25 * l2.sum()) / 2)
    assert reranker.module.last_auxiliary is None                   # consumed
    total.backward()
    decoder_grad = sum(p.grad.abs().sum() for p in reranker.module.denoiser.decoder.parameters())
    assert decoder_grad > 0                                          # only L2 reaches the decoder
    # evaluation stores nothing
    reranker.module.eval()
    with torch.no_grad():
        reranker.forward(reranker.encode([(QUERY, DOCS[0])]))
    assert reranker.module.last_auxiliary is None and reranker.auxiliary_loss(1) is None


# ------------------------------------------------------------------------------- training, checkpoints


def fit_tiny(tiny_encoder, seed=3, epochs=12, state_path=None, **options):
    dataset = tiny_dataset(WORDS, num_queries=12)
    train = RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage)
    settings = dict(learning_rate=3e-3, epochs=epochs, batch_size=16, negatives=2, dropout=0.0)
    settings.update(options)
    reranker = make("addax", tiny_encoder, seed=seed, prepare=False, **settings)
    reranker.prepare(train, dataset)
    return reranker, reranker.fit(train, state_path=state_path), train


def test_an_interrupted_addax_training_resumes_with_the_same_weights(tiny_encoder, tmp_path, monkeypatch):
    from helpers import TrainingInterrupted, interrupt_after_epoch

    options = dict(epochs=3, dropout=0.2, schedule="linear")
    straight, _, _ = fit_tiny(tiny_encoder, **options)
    interrupt_after_epoch(monkeypatch, 1)
    state = tmp_path / "addax.state"
    with pytest.raises(TrainingInterrupted):
        fit_tiny(tiny_encoder, state_path=state, **options)
    monkeypatch.undo()
    resumed, report, _ = fit_tiny(tiny_encoder, state_path=state, **options)
    assert [e.epoch for e in report.epochs] == [1, 2, 3] and not state.exists()
    expected, got = straight.module.state_dict(), resumed.module.state_dict()
    assert all(torch.equal(expected[name], got[name]) for name in expected)


def test_tiny_overfit_relevant_outranks_random(tiny_encoder):
    assert_the_tiny_fit_overfits(*fit_tiny(tiny_encoder), factor=0.5)


def test_head_learning_rate_moves_the_new_layers_more_than_the_encoder(tiny_encoder):
    def moved(reranker, fresh):
        state = reranker.module.state_dict()
        change = {"encoder": 0.0, "head": 0.0}
        for name, value in fresh.items():
            change["encoder" if name.startswith("encoder.") else "head"] += float((state[name] - value).abs().sum())
        return change

    fresh = make("addax", tiny_encoder, seed=3, dropout=0.0).module.state_dict()
    fresh = {name: value.clone() for name, value in fresh.items()}
    same, _, _ = fit_tiny(tiny_encoder, epochs=1, learning_rate=1e-4)
    split, report, _ = fit_tiny(tiny_encoder, epochs=1, learning_rate=1e-4, head_learning_rate=1e-2)
    assert report.epochs[0].learning_rate == 1e-4                      # the encoder's group is reported
    same_change, split_change = moved(same, fresh), moved(split, fresh)
    assert split_change["head"] > 5 * same_change["head"]
    assert split_change["encoder"] < 5 * same_change["encoder"]


def test_training_is_deterministic_under_a_seed(tiny_encoder):
    first, _, train = fit_tiny(tiny_encoder, epochs=2)
    second, _, _ = fit_tiny(tiny_encoder, epochs=2)
    query = next(iter(train.queries.values()))
    docs = list(train.docs.values())[:6]
    assert first.score(query, docs) == second.score(query, docs)


def test_same_seed_same_scores_other_seed_other_scores(tiny_encoder):
    pairs_docs = DOCS[:3]
    a = make("addax", tiny_encoder, seed=5).score(QUERY, pairs_docs)
    b = make("addax", tiny_encoder, seed=5).score(QUERY, pairs_docs)
    c = make("addax", tiny_encoder, seed=6).score(QUERY, pairs_docs)
    assert a == b and a != c


def test_save_load_round_trip_gives_identical_scores(tiny_encoder, tmp_path):
    reranker = make("addax-no-hw", tiny_encoder, seed=2)
    with torch.no_grad():
        reranker.module.doc_mag.gate_bias.add_(0.3)               # weights that differ from a fresh build
    before = reranker.score(QUERY, DOCS)
    path = tmp_path / "model.pt"
    reranker.save(path)
    loaded = AddaxNoHighwayReranker.load(path)
    assert loaded.model_config == reranker.model_config and loaded.encoder_config == reranker.encoder_config
    assert loaded.train_config == reranker.train_config and len(loaded.doc_cache) == 0
    assert loaded.score(QUERY, DOCS) == before
    assert not [p for p in tmp_path.iterdir() if p.name != "model.pt"]  # atomic write leaves no temp file


def test_bad_checkpoints_are_checkpoint_errors_naming_the_file(tiny_encoder, tmp_path):
    assert_garbage_and_missing_checkpoints_fail(AddaxReranker, tmp_path)
    reranker = make("addax", tiny_encoder)
    path = tmp_path / "addax.pt"
    reranker.save(path)
    with pytest.raises(CheckpointError, match=r"addax\.pt.*'addax'.*not 'addax-no-hd'"):
        AddaxNoHashingReranker.load(path)
    payload = torch.load(path, weights_only=True)
    payload["state_dict"].pop(next(k for k in payload["state_dict"] if k.startswith("denoiser")))
    save_checkpoint(tmp_path / "truncated.pt", payload)
    with pytest.raises(CheckpointError, match="truncated.pt.*weights"):
        AddaxReranker.load(tmp_path / "truncated.pt")
    payload = torch.load(path, weights_only=True)
    payload["encoder_config"]["encoder"] = str(tmp_path / "no-such-encoder")
    save_checkpoint(tmp_path / "lost.pt", payload)
    with pytest.raises(CheckpointError, match="lost.pt.*no-such-encoder"):
        AddaxReranker.load(tmp_path / "lost.pt")
    payload = torch.load(path, weights_only=True)
    payload["model_config"]["no_such_option"] = 1
    save_checkpoint(tmp_path / "config.pt", payload)
    with pytest.raises(CheckpointError, match="config.pt"):
        AddaxReranker.load(tmp_path / "config.pt")


# ------------------------------------------------------------------------------------------- cache


def count_encoder_calls(reranker) -> list[int]:
    calls: list[int] = []
    reranker.module.encoder.register_forward_hook(lambda module, args, kwargs, output: calls.append(
        int(kwargs["input_ids"].shape[0])), with_kwargs=True)
    return calls


def test_document_cache_hits_skip_the_encoder_and_give_identical_scores(tiny_encoder):
    reranker = make("addax", tiny_encoder)
    calls = count_encoder_calls(reranker)
    first = reranker.score(QUERY, DOCS)
    assert calls == [1, 5] and len(reranker.doc_cache) == 5     # one query, five documents
    calls.clear()
    second = reranker.score(Query("q1", QUERY.text), list(reversed(DOCS)))
    assert calls == [1]                                          # documents come from the cache
    assert second == list(reversed(first))
    calls.clear()
    reranker.score(Query("q9", "another question"), DOCS[:2] + [Doc("d6", "a new document")])
    assert calls == [1, 1]                                       # only the new document is encoded
    uncached = make("addax", tiny_encoder, doc_cache_size=0)
    torch.testing.assert_close(torch.tensor(uncached.score(QUERY, DOCS)), torch.tensor(first), atol=1e-5, rtol=1e-5)
    assert len(uncached.doc_cache) == 0


def test_document_cache_is_bounded_and_cleared_when_weights_change(tiny_encoder):
    reranker = make("addax", tiny_encoder, doc_cache_size=2)
    reranker.score(QUERY, DOCS)
    assert len(reranker.doc_cache) == 2
    reranker.module.train()
    reranker.forward(reranker.encode([(QUERY, DOCS[0]), (QUERY, DOCS[1])]))
    assert len(reranker.doc_cache) == 0                          # a training forward invalidates it
    reranker.auxiliary_loss(2)
    reranker.score(QUERY, DOCS[:2])
    assert len(reranker.doc_cache) == 2


def test_fit_clears_the_cache(tiny_encoder):
    reranker, _, train = fit_tiny(tiny_encoder, epochs=1)
    assert len(reranker.doc_cache) == 0
    query = next(iter(train.queries.values()))
    reranker.score(query, list(train.docs.values())[:3])
    assert len(reranker.doc_cache) == 3


def test_errors_before_prepare():
    reranker = AddaxReranker()
    with pytest.raises(PipelineError, match="fit\\(\\) or load\\(\\)"):
        reranker.score(QUERY, DOCS)
    with pytest.raises(PipelineError, match="prepare"):
        reranker.fit(None)


# ----------------------------------------------------------------------------------- real encoder


def test_real_minilm_scores_two_pairs():
    started = time.perf_counter()
    reranker = AddaxReranker.from_options({"mags": "false", "hashing": "false"}, seed=0)  # MaxSim on MiniLM
    reranker.prepare()
    assert reranker.module.encoder.config.hidden_size == 384
    scores = reranker.score(QUERY, DOCS[:1] + DOCS[2:3])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    assert scores[0] > scores[1]                                  # untrained ColBERT-style MaxSim still sees it
    full = AddaxReranker.from_options({}, seed=0)
    full.prepare()
    assert all(math.isfinite(s) for s in full.score(QUERY, DOCS[:2]))
    assert time.perf_counter() - started < 60
