"""Learned-code first stages (indexes.codes): bit packing, MaxSim, masking, contrastive training, faiss search
against brute force, the index cache, atomic and resumable builds, determinism and errors.

Everything runs on a tiny random BERT (2 layers, hidden 32) with MiniLM's tokenizer and a synthetic
collection, on one thread.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import write
from indexes import BM25Settings, available, make_first_stage
from indexes import codes
from indexes.codes import (
    BatchSampler, CodeOptions, CodeRetriever, TokenCodeEncoder, build_code_index, contrastive_loss, encoder_path,
    index_metadata, index_path, is_complete, maxsim, new_encoder, pack_codes, resolve_training, unpack_codes,
)
from pipeline.core.datasets import Dataset
from pipeline.core.errors import CheckpointError, CorruptCacheError, PipelineError
from pipeline.core.filecheck import stamp_is_fresh
from pipeline.core.records import Doc, Qrel, Query
from pipeline.core.runtime import seed_everything
from tests.helpers import one_faiss_thread, one_torch_thread, tiny_dataset, tiny_encoder  # noqa: F401 (fixtures)

WORDS = ("apple river mountain music doctor garden winter ocean teacher window city dog cat bread train forest "
         "paper summer energy market").split()


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return tiny_dataset(WORDS)  # 16 queries (all in a train split), 64 docs, one relevant doc per query


def small_options(encoder: str, **changes) -> CodeOptions:
    options = CodeOptions(kind="codes", encoder=encoder, dim=16, steps=20, batch_size=4, learning_rate=1e-3,
                          head_learning_rate=1e-2, hard_negatives=0, max_query_length=12, max_doc_length=24,
                          shard_size=16, encode_batch_size=16, progress=False, device="cpu")
    return dataclasses.replace(options, **changes)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("code-indexes")


@pytest.fixture(scope="module")
def built(tiny_encoder, dataset, root) -> dict[str, Path]:
    return {kind: build_code_index(dataset, small_options(tiny_encoder, kind=kind), root) for kind in ("codes", "colbert")}


# ------------------------------------------------------------------------------------ primitives


def test_bit_packing_round_trip_matches_faiss_hamming():
    rng = np.random.default_rng(0)
    values = rng.standard_normal((50, 24)).astype(np.float32)
    values[0, :5] = 0.0  # zero counts as +1
    packed = pack_codes(values)
    assert packed.shape == (50, 3) and packed.dtype == np.uint8
    signs = np.where(values >= 0, 1.0, -1.0)
    assert np.array_equal(unpack_codes(packed, 24), signs)
    assert np.array_equal(pack_codes(unpack_codes(packed, 24)), packed)
    index = faiss.IndexBinaryFlat(24)
    index.add(packed)
    distances, labels = index.search(packed[:5], 50)
    for row in range(5):
        expected = (signs[labels[row]] != signs[row]).sum(axis=1)
        assert np.array_equal(distances[row], expected)


def test_maxsim_against_a_hand_computation():
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])           # third token is padding
    q_mask = torch.tensor([[True, True, False]])
    d = torch.tensor([[[0.5, 0.2], [0.1, 0.7], [5.0, 5.0]],             # third token is padding
                      [[-1.0, -2.0], [0.0, 0.0], [0.0, 0.0]]])          # one real token
    d_mask = torch.tensor([[True, True, False], [True, False, False]])
    scores = maxsim(q, q_mask, d, d_mask)
    # doc 0: max(0.5, 0.1) + max(0.2, 0.7) = 1.2; doc 1: -1 + -2 = -3
    assert torch.allclose(scores, torch.tensor([[1.2, -3.0]]))
    empty = maxsim(q, q_mask, d[:1], torch.zeros(1, 3, dtype=torch.bool))
    assert torch.equal(empty, torch.zeros(1, 1))


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_padding_and_special_tokens_never_change_a_score(tiny_encoder, kind):
    seed_everything(1)
    tokenizer, model = new_encoder(small_options(tiny_encoder, kind=kind))
    model.eval()
    ids, att = codes.tokenize(tokenizer, ["river apple"], 12)
    assert model.token_mask(ids, att).tolist() == [[False, True, True, False]]  # [CLS] river apple [SEP]
    docs = ["garden dog", "winter ocean teacher window city dog cat bread train forest paper summer"]
    with torch.no_grad():
        q, q_mask = model.encode_queries(ids, att)
        alone_ids, alone_att = codes.tokenize(tokenizer, docs[:1], 24)
        padded_ids, padded_att = codes.tokenize(tokenizer, docs, 24)
        assert padded_ids.shape[1] > alone_ids.shape[1]
        alone = model.score(q, q_mask, *model.encode_docs(alone_ids, alone_att)[:2])
        padded = model.score(q, q_mask, *model.encode_docs(padded_ids, padded_att)[:2])
        # the query padded too (by a longer query in its batch)
        q2_ids, q2_att = codes.tokenize(tokenizer, ["river apple", "mountain music doctor garden winter"], 12)
        q2, q2_mask = model.encode_queries(q2_ids, q2_att)
        both = model.score(q2, q2_mask, *model.encode_docs(alone_ids, alone_att)[:2])
    assert torch.allclose(alone[0, 0], padded[0, 0], atol=1e-5)
    assert torch.allclose(alone[0, 0], both[0, 0], atol=1e-5)


def test_training_lowers_the_loss(tiny_encoder, dataset):
    options = small_options(tiny_encoder, steps=30)
    source = resolve_training(dataset)
    batch = BatchSampler(source, None, 8, 0, seed=5).sample()
    seed_everything(options.seed)
    tokenizer, initial = new_encoder(options)  # the same initialisation train_encoder starts from
    initial.eval()
    with torch.no_grad():
        before = float(contrastive_loss(initial, tokenizer, batch, options)[1])
    _, trained, report = codes.train_encoder(options, source)
    with torch.no_grad():
        after = float(contrastive_loss(trained, tokenizer, batch, options)[1])
    assert after < 0.7 * before, (before, after)
    assert len(report.losses) == 30 and report.queries == 16
    assert np.mean(report.losses[-5:]) < np.mean(report.losses[:5])


def test_straight_through_scores_the_sign_codes_and_still_trains(tiny_encoder, dataset):
    options = small_options(tiny_encoder, straight_through=True, quantization_weight=0.0)
    source = resolve_training(dataset)
    batch = BatchSampler(source, None, 4, 0, seed=3).sample()
    seed_everything(options.seed)
    tokenizer, model = new_encoder(options)
    model.eval()  # no dropout: the two forward passes below see the same vectors
    total, ce = contrastive_loss(model, tokenizer, batch, options)
    with torch.no_grad():  # the cross-entropy of the +-1 codes the index stores, computed directly
        q_ids, q_att = codes.tokenize(tokenizer, batch.queries, options.max_query_length)
        d_ids, d_att = codes.tokenize(tokenizer, batch.docs, options.max_doc_length)
        q, q_mask = model.encode_queries(q_ids, q_att)
        d, d_mask, _ = model.encode_docs(d_ids, d_att, hard=True)
        logits = model.score(q, q_mask, d, d_mask) / options.temperature
        logits = logits.masked_fill(torch.tensor(batch.excluded), float("-inf"))
        hard_ce = torch.nn.functional.cross_entropy(logits, torch.tensor(batch.targets))
        soft_ce = contrastive_loss(model, tokenizer, batch, dataclasses.replace(options, straight_through=False))[1]
    ce = float(ce.detach())
    assert ce == pytest.approx(float(hard_ce), abs=1e-5) and ce != pytest.approx(float(soft_ce))
    total.backward()
    head_grad = sum(float(p.grad.abs().sum()) for p in model.project.parameters())
    assert head_grad > 0  # the gradient reaches the hashing MLP through tanh(alpha x)


def test_straight_through_is_in_the_key_of_binary_codes_only(tiny_encoder, dataset, root):
    source = resolve_training(dataset)
    base = small_options(tiny_encoder)
    switched = dataclasses.replace(base, straight_through=True)
    assert "straight_through" not in base.key_fields() and "straight_through" not in base.training_fields()
    assert index_path(dataset, switched, source, root) != index_path(dataset, base, source, root)
    assert encoder_path(switched, source, root) != encoder_path(base, source, root)
    float_base = dataclasses.replace(base, kind="colbert")
    assert encoder_path(dataclasses.replace(float_base, straight_through=True), source, root) == \
        encoder_path(float_base, source, root)


def test_random_hyperplanes_are_orthogonal_blocks_and_seeded():
    planes = codes.random_hyperplanes(40, 16, seed=3)
    assert planes.shape == (40, 16)
    for start in (0, 16):  # two full blocks of orthonormal normals, then 8 rows of a third
        block = planes[start : start + 16]
        assert torch.allclose(block @ block.T, torch.eye(16), atol=1e-5)
    assert torch.allclose(planes[32:].norm(dim=1), torch.ones(8), atol=1e-5)
    assert torch.equal(planes, codes.random_hyperplanes(40, 16, seed=3))
    assert not torch.equal(planes, codes.random_hyperplanes(40, 16, seed=4))


def test_hashed_encoder_signs_the_float_vectors_and_estimates_their_cosines(tiny_encoder, dataset):
    float_options = small_options(tiny_encoder, kind="colbert")
    seed_everything(0)
    tokenizer, float_model = new_encoder(float_options)
    float_model.eval()
    hashed = codes.hashed_from_float(float_model, 2048, 5.0, seed=1)
    assert hashed.binary and hashed.head == "linear" and hashed.transformer is float_model.transformer
    docs = [d.text for d in list(dataset.docs_iter())[:12]]
    queries = [q.text for q in list(dataset.queries.values())[:6]]
    with torch.no_grad():
        d_ids, d_att = codes.tokenize(tokenizer, docs, 24)
        q_ids, q_att = codes.tokenize(tokenizer, queries, 12)
        float_docs, d_mask, _ = float_model.encode_docs(d_ids, d_att)
        codes_, hashed_mask, _ = hashed.encode_docs(d_ids, d_att, hard=True)
        planes = codes.random_hyperplanes(2048, float_options.dim, seed=1)
        # the stored code of a token is the sign pattern of its float vector against the hyperplanes
        expected = torch.where(float_docs @ planes.T >= 0, 1.0, -1.0) * d_mask[..., None]
        assert torch.equal(hashed_mask, d_mask) and torch.equal(codes_, expected)
        float_scores = float_model.score(*float_model.encode_queries(q_ids, q_att), float_docs, d_mask)
        hashed_scores = hashed.score(*hashed.encode_queries(q_ids, q_att), codes_, d_mask)
    # asymmetric sign random projections: q . sign(R d) / sqrt(bits) is about sqrt(2 / pi) cos(q, d) per token
    correlation = np.corrcoef(float_scores.flatten().numpy(), hashed_scores.flatten().numpy())[0, 1]
    assert correlation > 0.95, correlation


def test_lsh_codes_start_from_the_cached_float_encoder(tiny_encoder, dataset, tmp_path):
    source = resolve_training(dataset)
    float_options = small_options(tiny_encoder, kind="colbert")
    float_checkpoint, _ = codes.obtain_encoder(float_options, source, tmp_path)
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16)
    assert lsh.float_options().training_fields() == float_options.training_fields()
    path = build_code_index(dataset, lsh, tmp_path)
    meta = index_metadata(path)
    assert meta["options"]["hash_head"] == "lsh" and meta["train"]["report"]["hash_steps"] == 0
    retriever = CodeRetriever(path, k_prime=meta["vectors"])
    _, float_model, _ = codes.load_encoder_checkpoint(float_checkpoint)
    assert retriever.binary and retriever.dim == 64 and isinstance(retriever.model.project, torch.nn.Linear)
    planes = codes.random_hyperplanes(64, 16, lsh.seed)
    assert torch.allclose(retriever.model.project.weight, planes @ float_model.project.weight, atol=1e-6)
    for name, value in float_model.transformer.state_dict().items():  # no training after the hashing
        assert torch.equal(retriever.model.transformer.state_dict()[name], value)
    assert len(retriever.search(list(dataset.queries.values()), k=5)) == 16
    # fine-tuning the hashed encoder is a different encoder and index, trained on top of the same start
    tuned = dataclasses.replace(lsh, hash_steps=5)
    tuned_path = build_code_index(dataset, tuned, tmp_path)
    report = index_metadata(tuned_path)["train"]["report"]
    assert tuned_path != path and report["hash_steps"] == 5 and report["hash_last_loss"] is not None
    tuned_model = CodeRetriever(tuned_path).model
    assert not torch.allclose(tuned_model.project.weight, retriever.model.project.weight)
    # another hyperplane draw over the same float encoder (no fine-tuning): sign(R' W h), a different index
    redrawn_path = build_code_index(dataset, dataclasses.replace(lsh, hash_seed=7), tmp_path)
    assert redrawn_path not in (path, tuned_path)
    redrawn = CodeRetriever(redrawn_path).model
    assert torch.allclose(redrawn.project.weight, codes.random_hyperplanes(64, 16, 7) @ float_model.project.weight,
                          atol=1e-6)


def test_draw_seeds_start_from_the_single_draw_and_do_not_overlap():
    assert codes.draw_seeds(42, 1) == [42]
    pool = codes.draw_seeds(42, 4)
    assert pool[0] == 42 and len(set(pool)) == 4 and pool == codes.draw_seeds(42, 4)
    assert not set(pool) & set(codes.draw_seeds(1, 4))        # pools from other seeds are other draws


def test_kendall_tau_hand_examples():
    scores = torch.tensor([3.0, 1.0, 2.0, 0.0])
    assert codes.kendall_tau(scores, scores) == 1.0
    assert codes.kendall_tau(scores, -scores) == -1.0
    # one discordant pair (items 1 and 2) of 6: (5 - 1) / 6
    assert codes.kendall_tau(scores, torch.tensor([3.0, 2.0, 1.0, 0.0])) == pytest.approx(4 / 6)
    assert codes.kendall_tau(torch.tensor([1.0]), torch.tensor([2.0])) == 1.0


def test_hyperplane_agreement_grows_with_bits_and_picks_the_draw(tiny_encoder, dataset, tmp_path):
    source = resolve_training(dataset)
    float_options = small_options(tiny_encoder, kind="colbert")
    float_checkpoint, _ = codes.obtain_encoder(float_options, source, tmp_path)
    tokenizer, float_model, _ = codes.load_encoder_checkpoint(float_checkpoint)
    negatives = codes.bm25_negatives(dataset, source.query_ids, 20, tmp_path)
    sample = codes.agreement_sample(source, negatives, seed=0, queries=5, docs=8)
    assert len(sample) == 5 and all(2 <= len(docs) <= 8 for _, docs in sample)
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16)
    few = codes.hyperplane_agreement(float_model, tokenizer, sample, 8, [1, 2, 3], lsh)
    many = codes.hyperplane_agreement(float_model, tokenizer, sample, 2048, [1, 2, 3], lsh)
    assert all(-1 <= t <= 1 for t in few + many)
    assert min(many) > max(few) and min(many) > 0.8              # more bits, closer to the float ranking
    assert codes.hyperplane_agreement(float_model, tokenizer, sample, 8, [1, 2, 3], lsh) == few
    # hash_draws: the index keeps the draw of highest agreement, and says so
    drawn = dataclasses.replace(lsh, hash_draws=3)
    path = build_code_index(dataset, drawn, tmp_path)
    report = index_metadata(path)["train"]["report"]["hash_draws"]
    assert report["seeds"] == codes.draw_seeds(lsh.seed, 3) and len(report["kendall_tau"]) == 3
    assert report["chosen"] == report["seeds"][int(np.argmax(report["kendall_tau"]))]
    model = CodeRetriever(path).model
    expected = codes.random_hyperplanes(64, 16, report["chosen"]) @ float_model.project.weight
    assert torch.allclose(model.project.weight, expected, atol=1e-6)
    assert path != build_code_index(dataset, lsh, tmp_path)


def test_hash_head_options_and_keys(tiny_encoder, dataset, root):
    source = resolve_training(dataset)
    base = small_options(tiny_encoder)
    assert not {"hash_head", "float_dim", "hash_steps"} & (set(base.key_fields()) | set(base.training_fields()))
    lsh = dataclasses.replace(base, hash_head="lsh")
    keys = {encoder_path(o, source, root) for o in (base, lsh, dataclasses.replace(lsh, hash_steps=3),
                                                    dataclasses.replace(lsh, float_dim=32))}
    assert len(keys) == 4
    # the fields of an mlp head change nothing
    assert encoder_path(dataclasses.replace(base, float_dim=32, hash_steps=3), source, root) == \
        encoder_path(base, source, root)
    with pytest.raises(PipelineError, match="unknown hash head 'pca'"):
        small_options(tiny_encoder, hash_head="pca")
    with pytest.raises(PipelineError, match="for binary codes"):
        small_options(tiny_encoder, kind="colbert", hash_head="lsh")
    with pytest.raises(PipelineError, match="hash_steps >= 0"):
        small_options(tiny_encoder, hash_head="lsh", hash_steps=-1)
    # hash_seed: in the key only when it draws other hyperplanes than the default (the training seed)
    assert "hash_seed" not in lsh.training_fields()
    assert encoder_path(dataclasses.replace(lsh, hash_seed=lsh.seed), source, root) == encoder_path(lsh, source, root)
    assert encoder_path(dataclasses.replace(lsh, hash_seed=1), source, root) not in keys
    assert dataclasses.replace(lsh, hash_seed=1).float_options().training_fields() == lsh.float_options().training_fields()
    with pytest.raises(PipelineError, match="hash_seed draws the hyperplanes"):
        small_options(tiny_encoder, hash_seed=3)
    # hash_draws: in the key only above 1; the float encoder is the same
    assert encoder_path(dataclasses.replace(lsh, hash_draws=1), source, root) == encoder_path(lsh, source, root)
    assert encoder_path(dataclasses.replace(lsh, hash_draws=4), source, root) not in keys
    assert dataclasses.replace(lsh, hash_draws=4).float_options() == lsh.float_options()
    with pytest.raises(PipelineError, match="hash_draws chooses among hyperplane draws"):
        small_options(tiny_encoder, hash_draws=2)
    with pytest.raises(PipelineError, match="hash_draws must be at least 1"):
        small_options(tiny_encoder, hash_head="lsh", hash_draws=0)


def test_batches_exclude_other_relevant_docs_from_a_querys_softmax(dataset):
    source = resolve_training(dataset)
    negatives = {q: [f"{q}-d1", f"{q}-d2"] for q in dataset.queries}
    batch = BatchSampler(source, negatives, 4, 2, seed=0).sample()
    assert len(batch.queries) == 4 and len(batch.docs) == 4 + 4 * 2
    assert batch.targets == [0, 1, 2, 3]
    assert not any(any(row) for row in batch.excluded)  # each query's only relevant doc is its target
    # two queries sharing a relevant document: it never counts as a negative of either
    docs = {d: Doc(d, d) for d in ("a", "b")}
    shared = Dataset("shared", {"x": Query("x", "x"), "y": Query("y", "y")},
                     [Qrel("x", "a", 1), Qrel("x", "b", 1), Qrel("y", "b", 1)], lambda: docs.values(), "shared",
                     {"train": ["x", "y"]}, _store=docs)
    sampler = BatchSampler(resolve_training(shared), None, 2, 0, seed=0)
    for _ in range(10):
        batch = sampler.sample()
        targets = dict(zip(batch.queries, batch.targets))
        for row, query in enumerate(batch.queries):
            relevant = {"x": {"a", "b"}, "y": {"b"}}[query]
            for column, text in enumerate(batch.docs):
                assert batch.excluded[row][column] == (text in relevant and column != targets[query])


# --------------------------------------------------------------------------------------- search


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_search_agrees_with_brute_force_maxsim(built, dataset, kind):
    path = built[kind]
    meta = index_metadata(path)
    assert meta["kind"] == kind and meta["documents"] == 64 and meta["vectors"] == 64 * 6
    retriever = CodeRetriever(path, k_prime=meta["vectors"])
    assert retriever.name == kind and retriever.index_bytes == os.path.getsize(path / codes.FAISS_FILE) > 0
    queries = list(dataset.queries.values())
    run = retriever.search(queries, k=10)
    # brute force, by hand: every document's stored vectors against the query vectors
    docs = np.array(list(codes.DocIds.open(path, meta)))
    token_docs = np.repeat(np.arange(len(docs)), np.diff(np.load(path / codes.DOC_OFFSETS_FILE)))
    stored = retriever.vectors
    vectors = unpack_codes(stored, 16) / 4.0 if kind == "codes" else np.array(stored)  # 1/sqrt(16)
    for query, q in zip(queries, retriever.encode_queries([q.text for q in queries])):
        sims = q @ vectors.T
        scores = np.array([sims[:, token_docs == d].max(axis=1).sum() for d in range(len(docs))])
        order = sorted(range(len(docs)), key=lambda d: (-scores[d], docs[d]))[:10]
        assert [h.doc_id for h in run[query.query_id]] == docs[order].tolist()
        assert np.allclose([h.score for h in run[query.query_id]], scores[order], atol=1e-5)
    assert run == retriever.search(queries, k=10, exhaustive=True)
    q = retriever.encode_queries([queries[0].text])[0]
    everything = np.arange(len(docs))
    assert np.allclose(retriever.maxsim_scores(q, everything, chunk=5), retriever.maxsim_scores(q, everything))
    # a small k' gives a subset of the candidates with the same exact scores
    small = CodeRetriever(path, k_prime=2).search(queries, k=64)
    full = retriever.search(queries, k=64)
    for qid, hits in small.items():
        exact = {h.doc_id: h.score for h in full[qid]}
        assert hits and all(abs(exact[h.doc_id] - h.score) < 1e-5 for h in hits)


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_pruned_search_keeps_candidates_only_and_is_exact_when_deep_enough(built, dataset, kind):
    queries = list(dataset.queries.values())
    exact = CodeRetriever(built[kind], k_prime=8, rescore_depth=0)
    assert CodeRetriever(built[kind], k_prime=8, rescore_depth=64).search(queries, 10) == exact.search(queries, 10)
    for vectors in exact.encode_queries([q.text for q in queries]):
        candidates = exact.candidates(vectors)
        assert 8 < len(candidates) < 64                                      # something to prune
        assert np.array_equal(exact.pruned_candidates(vectors, 0), candidates)
        kept_before = set()
        for depth in (1, 2, 4, 8, len(candidates), len(candidates) + 5):
            kept = exact.pruned_candidates(vectors, depth)
            assert len(kept) == min(depth, len(candidates)) and set(kept) <= set(candidates.tolist())
            assert kept_before <= set(kept.tolist())                          # a deeper cut keeps the shallower one
            kept_before = set(kept.tolist())
    # a cut shallower than k: the depth best by estimate are scored exactly and come first, the rest of the top k
    # (the same documents as with depth k) follow below them in estimated order
    shallow = CodeRetriever(built[kind], k_prime=8, rescore_depth=2).search(queries, 4)
    as_deep_as_k = CodeRetriever(built[kind], k_prime=8, rescore_depth=4).search(queries, 4)
    full = exact.search(queries, 64)
    for query, vectors in zip(queries, exact.encode_queries([q.text for q in queries])):
        hits = shallow[query.query_id]
        scores = {h.doc_id: h.score for h in full[query.query_id]}
        assert len(hits) == 4 and all(abs(scores[h.doc_id] - h.score) < 1e-5 for h in hits[:2])
        assert {h.doc_id for h in hits} == {h.doc_id for h in as_deep_as_k[query.query_id]}
        found, estimates = exact.approximate_scores(*exact.neighbours(vectors))
        by_estimate = [exact.doc_id(int(d)) for d in found[np.lexsort((found, -estimates))]]
        assert {h.doc_id for h in hits[:2]} == set(by_estimate[:2])
        assert [h.doc_id for h in hits[2:]] == by_estimate[2:4]
        assert hits[1].score > hits[2].score > hits[3].score or by_estimate[2:4] == sorted(by_estimate[2:4])
    with pytest.raises(PipelineError, match="unknown query_precision"):
        CodeRetriever(built[kind], query_precision="int4")
    with pytest.raises(PipelineError, match="unknown query_precision"):
        CodeOptions(query_precision="bf16")
    with pytest.raises(PipelineError, match="rescore_depth must be >= 0"):
        CodeRetriever(built[kind], rescore_depth=-1)
    with pytest.raises(PipelineError, match="rescore_depth must be >= 0"):
        CodeOptions(rescore_depth=-1)


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_int8_query_encoder_is_quantized_and_close_to_float(built, dataset, kind):
    queries = list(dataset.queries.values())
    plain = CodeRetriever(built[kind], k_prime=8)
    int8 = CodeRetriever(built[kind], k_prime=8, query_precision="int8")
    assert plain.query_precision == "float32" and int8.query_precision == "int8"
    linear = [type(m).__module__ for m in int8.model.transformer.modules() if "Linear" in type(m).__name__]
    assert linear and all("quantized" in name for name in linear)                  # every Linear is int8
    assert not any("quantized" in type(m).__module__ for m in plain.model.modules())
    assert "quantized" not in type(int8.model.project).__module__                    # the projection stays float
    texts = [q.text for q in queries]
    for a, b in zip(plain.encode_queries(texts), int8.encode_queries(texts)):
        assert a.shape == b.shape and not np.array_equal(a, b)
        assert np.min(np.sum(a * b, axis=1)) > 0.9                                   # unit vectors, nearly the same
    alone = [int8.encode_queries([text])[0] for text in texts]                      # no other query changes one's
    assert all(np.array_equal(a, b) for a, b in zip(alone, int8.encode_queries(texts)))
    plain_run, int8_run = plain.search(queries, 5), int8.search(queries, 5)
    overlap = np.mean([len({h.doc_id for h in plain_run[q]} & {h.doc_id for h in int8_run[q]}) / 5 for q in plain_run])
    assert overlap >= 0.6


def test_approximate_scores_by_hand(built):
    retriever = CodeRetriever(built["codes"])  # 6 vectors per document: rows 0-5 are document 0, 6-11 document 1
    labels = np.array([[0, 6, 13, 1], [7, 1, -1, -1]])
    sims = np.array([[.9, .5, .4, .3], [.8, .7, 0, 0]], dtype=np.float32)
    docs, scores = retriever.approximate_scores(labels, sims)
    # token 0's floor is .3 (its k'-th neighbour), token 1's .7 (its last valid one); document 2 was not
    # retrieved by token 1 and gets that floor; document 0's two rows for token 0 count once, the best
    assert docs.tolist() == [0, 1, 2]
    assert np.allclose(scores, [.9 + .7, .5 + .8, .4 + .7])
    assert [len(x) for x in retriever.approximate_scores(np.full((2, 3), -1), np.zeros((2, 3)))] == [0, 0]
    # the binary kNN similarity is the cosine of the query's sign pattern and the code
    q = retriever.encode_queries(["apple river"])[0]
    labels, sims = retriever.neighbours(q)
    signs = np.where(q >= 0, 1.0, -1.0)
    stored = unpack_codes(retriever.vectors[labels[0]], 16)
    assert np.allclose(sims[0], stored @ signs[0] / 16)


def test_storage_layout_each_code_once_and_ids_memory_mapped(built, dataset):
    path = built["codes"]
    meta = index_metadata(path)
    assert meta["format"] == codes.INDEX_FORMAT and sorted(meta["files"]) == sorted(codes.VERIFIED_FILES)
    size = {name: (path / name).stat().st_size for name in meta["files"]}
    ids = [d.doc_id for d in dataset.docs_iter()]

    def npy_header(name):  # the bytes of an .npy file beyond its array
        return size[name] - np.load(path / name, mmap_mode="r").nbytes

    assert np.load(path / codes.DOC_OFFSETS_FILE).tolist() == list(range(0, 6 * 65, 6))
    assert size[codes.DOC_OFFSETS_FILE] - npy_header(codes.DOC_OFFSETS_FILE) == 8 * 65
    assert size[codes.DOC_ID_BYTES_FILE] - npy_header(codes.DOC_ID_BYTES_FILE) == sum(len(i.encode()) for i in ids)
    assert all(npy_header(name) <= 128 for name in meta["files"] if name.endswith(".npy"))
    assert 0 < size[codes.FAISS_FILE] - meta["vectors"] * 16 // 8 < 100   # the codes (2 bytes each) and a header
    assert codes.storage_bytes(path) == sum(size.values())
    retriever = CodeRetriever(path)
    assert isinstance(retriever.doc_ids.data, np.memmap) and isinstance(retriever.doc_ids.offsets, np.memmap)
    assert list(retriever.doc_ids) == ids and retriever.doc_ids[-1] == ids[-1] and retriever.doc_ids[2:4] == ids[2:4]
    with pytest.raises(IndexError):
        retriever.doc_ids[64]
    assert retriever.docs_of(np.array([0, 5, 6, 383])).tolist() == [0, 0, 1, 63]


def test_format_1_indexes_are_still_read_and_newer_formats_refused(built, dataset, tmp_path):
    from pipeline.core.filecheck import describe

    old = tmp_path / "format-1"
    shutil.copytree(built["codes"], old)
    meta = json.loads((old / codes.META_FILE).read_text())
    ids = list(codes.DocIds.open(old, meta))
    offsets = np.load(old / codes.DOC_OFFSETS_FILE)
    np.save(old / codes.TOKEN_DOCS_FILE, np.repeat(np.arange(len(ids), dtype=np.int32), np.diff(offsets)))
    (old / codes.DOC_IDS_FILE).write_text(json.dumps(ids))
    for name in codes.VERIFIED_FILES[1:]:
        (old / name).unlink()
    (old / codes.VERIFIED_STAMP).unlink(missing_ok=True)
    del meta["format"]
    meta["files"] = describe(old, codes.directory.FORMAT_1_FILES)
    (old / codes.META_FILE).write_text(json.dumps(meta))
    queries = list(dataset.queries.values())
    assert CodeRetriever(old).search(queries, 5) == CodeRetriever(built["codes"]).search(queries, 5)
    assert codes.storage_bytes(old) == sum((old / name).stat().st_size for name in codes.directory.FORMAT_1_FILES)
    meta["format"] = 99
    (old / codes.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(PipelineError, match="format 99, this version reads formats 1, 2, 3, 4; rebuild"):
        CodeRetriever(old)


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_index_holds_the_models_document_vectors(built, dataset, kind):
    retriever = CodeRetriever(built[kind])
    docs = list(dataset.docs_iter())[:5]
    ids, att = codes.tokenize(retriever.tokenizer, [d.text for d in docs], 24)
    with torch.no_grad():
        vectors, mask, _ = retriever.model.encode_docs(ids, att, hard=True)
    expected = vectors[mask].numpy()
    stored = retriever.vectors[: len(expected)]
    if kind == "codes":
        assert np.array_equal(pack_codes(expected), stored)
    else:
        assert np.allclose(expected, stored, atol=1e-5)


def test_binary_index_is_much_smaller_than_float(built):
    binary, dense = (index_metadata(built[k])["index_bytes"] for k in ("codes", "colbert"))
    assert binary * 8 < dense  # 2 bytes against 64 bytes per token vector, plus headers


def test_trained_retriever_finds_the_relevant_documents(built, dataset):
    from pipeline.core.evaluation import evaluate

    for kind in ("codes", "colbert"):
        run = CodeRetriever(built[kind]).search(dataset.queries.values(), 10)
        assert evaluate(run, dataset.qrels, "R@10").aggregate["R@10"] > 0.3, kind


# ------------------------------------------------------------------------------------ the cache


def test_second_build_uses_the_cache(built, tiny_encoder, dataset, root, monkeypatch):
    before = os.stat(built["codes"] / codes.META_FILE).st_mtime_ns

    def no_docs():
        raise AssertionError("documents iterated again")

    def no_encoder(*args, **kwargs):
        raise AssertionError("encoder loaded or trained again")

    monkeypatch.setattr(codes.encoders, "train_encoder", no_encoder)
    monkeypatch.setattr(codes.build, "load_encoder_checkpoint", no_encoder)
    again = dataclasses.replace(dataset, docs_factory=no_docs, _store=None)
    assert build_code_index(again, small_options(tiny_encoder), root) == built["codes"]
    assert os.stat(built["codes"] / codes.META_FILE).st_mtime_ns == before
    assert sorted(set(os.listdir(built["codes"])) - {codes.VERIFIED_STAMP}) == sorted(  # stamp: once searched
        [codes.META_FILE, *codes.VERIFIED_FILES, codes.ENCODER_FILE])
    assert not [p for p in os.listdir(root) if p.endswith(".shards") or p.endswith(".tmp")]


def test_cache_key_follows_options_and_data(tiny_encoder, dataset, root):
    source = resolve_training(dataset)
    base = small_options(tiny_encoder)
    paths = {
        index_path(dataset, base, source, root),
        index_path(dataset, dataclasses.replace(base, kind="colbert"), source, root),
        index_path(dataset, dataclasses.replace(base, dim=32), source, root),
        index_path(dataset, dataclasses.replace(base, steps=21), source, root),
        index_path(dataset, dataclasses.replace(base, seed=1), source, root),
        index_path(dataset, dataclasses.replace(base, index_type="hnsw"), source, root),
        index_path(dataclasses.replace(dataset, fingerprint="tiny-v2"), base, source, root),
    }
    assert len(paths) == 7
    # search-time and speed options are not part of the key
    same = dataclasses.replace(base, k_prime=7, shard_size=3, encode_batch_size=2, threads=1, progress=True)
    assert index_path(dataset, same, source, root) == index_path(dataset, base, source, root)
    assert encoder_path(dataclasses.replace(base, index_type="hnsw"), source, root) == encoder_path(base, source, root)


def test_make_first_stage_codes_and_colbert(built, tiny_encoder, dataset, root):
    assert "codes" in available() and "colbert" in available()
    for kind in ("codes", "colbert"):
        retriever = make_first_stage(kind, dataset, BM25Settings(index_root=root, codes=small_options(tiny_encoder)))
        assert isinstance(retriever, CodeRetriever) and retriever.path == built[kind] and retriever.name == kind
        # without options: the cached index of that kind
        assert make_first_stage(kind, dataset, BM25Settings(index_root=root)).path == built[kind]
        hits = retriever.search([dataset.queries["q0"]], 3)["q0"]
        assert len(hits) == 3 and hits[0].score >= hits[-1].score
    # binary-codes options (an lsh hash head) do not stop the same settings from serving colbert
    lsh = BM25Settings(index_root=root, codes=small_options(tiny_encoder, hash_head="lsh", hash_seed=3))
    assert make_first_stage("colbert", dataset, lsh).path == built["colbert"]


def test_hnsw_index_type(tiny_encoder, dataset, tmp_path):
    for kind in ("codes", "colbert"):
        path = build_code_index(dataset, small_options(tiny_encoder, kind=kind, index_type="hnsw", hnsw_m=8), tmp_path)
        retriever = CodeRetriever(path, k_prime=64)
        queries = list(dataset.queries.values())[:4]
        run = retriever.search(queries, 5)
        assert run == retriever.search(queries, 5, exhaustive=True)


# ---------------------------------------------------------------------------- atomic and resumable


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("exception", [Interrupted("disk gone"), KeyboardInterrupt()])
def test_interrupted_build_resumes_from_the_last_finished_shard(tiny_encoder, dataset, tmp_path, monkeypatch, exception):
    options = small_options(tiny_encoder)  # 64 docs, 16 per shard: 4 shards
    docs = list(dataset.docs_iter())

    def breaking_docs():
        yield from docs[:40]  # shards 0 and 1 finish, shard 2 is being filled
        raise exception

    broken = dataclasses.replace(dataset, docs_factory=breaking_docs)
    with pytest.raises(type(exception)):
        build_code_index(broken, options, tmp_path)
    path = index_path(dataset, options, resolve_training(dataset), tmp_path)
    assert not path.exists() and not is_complete(path)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    shards = tmp_path / f".{path.name}.shards"
    assert sorted(p.name for p in shards.glob("shard-*.npz")) == ["shard-00000.npz", "shard-00001.npz"]

    calls = []
    original = TokenCodeEncoder.encode_docs

    def counting(self, input_ids, attention_mask, hard=False):
        if hard:
            calls.append(input_ids.shape[0])
        return original(self, input_ids, attention_mask, hard)

    def no_training(*args, **kwargs):
        raise AssertionError("the cached encoder should be reused")

    monkeypatch.setattr(TokenCodeEncoder, "encode_docs", counting)
    monkeypatch.setattr(codes.encoders, "train_encoder", no_training)
    assert build_code_index(dataset, options, tmp_path) == path
    assert calls == [16, 16]  # only shards 2 and 3
    assert is_complete(path) and not shards.exists()
    # the resumed index is the one an uninterrupted build makes
    monkeypatch.undo()
    fresh = build_code_index(dataset, options, tmp_path / "fresh")
    assert (fresh / codes.FAISS_FILE).read_bytes() == (path / codes.FAISS_FILE).read_bytes()
    for name in codes.VERIFIED_FILES[1:]:
        assert (fresh / name).read_bytes() == (path / name).read_bytes(), name


def test_failed_assembly_leaves_no_index(tiny_encoder, dataset, tmp_path, monkeypatch):
    def broken_index(options):
        raise Interrupted("faiss failed")

    monkeypatch.setattr(codes.build, "_new_faiss_index", broken_index)
    with pytest.raises(Interrupted):
        build_code_index(dataset, small_options(tiny_encoder), tmp_path)
    path = index_path(dataset, small_options(tiny_encoder), resolve_training(dataset), tmp_path)
    assert not path.exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize("damage, message", [
    ("flip a byte of faiss.index", "faiss.index does not match the SHA-256"),
    ("truncate doc_offsets.npy", "doc_offsets.npy has"),
    ("delete doc_ids.utf8.npy", "doc_ids.utf8.npy is missing"),
    ("garble code-index.json", "code-index.json is unreadable"),
    ("flip a byte of encoder.pt", "encoder.pt: .*damaged|encoder.pt: not a readable"),
])
def test_a_damaged_code_index_is_an_error_never_another_ranking(built, dataset, tmp_path, damage, message):
    copy = tmp_path / "index"
    shutil.copytree(built["codes"], copy)
    queries = list(dataset.queries.values())[:4]
    intact = CodeRetriever(copy).search(queries, 5)
    assert stamp_is_fresh(copy, codes.VERIFIED_FILES, codes.VERIFIED_STAMP)  # verified once, then trusted
    target = copy / damage.split()[-1]
    raw = bytearray(target.read_bytes())
    if damage.startswith("flip"):
        raw[len(raw) // 2] ^= 0x01
        target.write_bytes(bytes(raw))
    elif damage.startswith("truncate"):
        target.write_bytes(bytes(raw[:-8]))
    elif damage.startswith("delete"):
        target.unlink()
    else:
        target.write_text("{\"kind\": ")
    with pytest.raises((CorruptCacheError, CheckpointError), match=message):
        CodeRetriever(copy).search(queries, 5)
    assert CodeRetriever(built["codes"]).search(queries, 5) == intact


def test_two_processes_needing_one_code_index_build_it_once(tiny_encoder, dataset, tmp_path, monkeypatch):
    builds = []
    real_build = codes.build._build

    def counted(*args, **kwargs):
        builds.append(1)
        time.sleep(0.5)  # keep the first builder busy while the second arrives
        return real_build(*args, **kwargs)

    monkeypatch.setattr(codes.build, "_build", counted)
    options = small_options(tiny_encoder)
    with ThreadPoolExecutor(2) as pool:  # flock conflicts between two open descriptions, as between processes
        paths = list(pool.map(lambda _: build_code_index(dataset, options, tmp_path), range(2)))
    assert paths[0] == paths[1] and is_complete(paths[0])
    assert len(builds) == 1


def test_same_seed_gives_identical_indexes_and_runs(tiny_encoder, dataset, built, tmp_path):
    again = build_code_index(dataset, small_options(tiny_encoder, kind="colbert"), tmp_path)
    assert (again / codes.FAISS_FILE).read_bytes() == (built["colbert"] / codes.FAISS_FILE).read_bytes()
    queries = list(dataset.queries.values())
    assert CodeRetriever(again).search(queries, 10) == CodeRetriever(built["colbert"]).search(queries, 10)
    other = build_code_index(dataset, small_options(tiny_encoder, kind="colbert", seed=7), tmp_path)
    assert (other / codes.FAISS_FILE).read_bytes() != (again / codes.FAISS_FILE).read_bytes()


# --------------------------------------------------------------------------- training data, errors


def no_split_dataset() -> Dataset:
    """A dataset without a train split (like vaswani-npl)."""
    docs = [Doc(f"n{i}", text) for i, text in enumerate(["apple river", "dog cat bread", "ocean summer energy"])]
    return Dataset("nosplit", {"1": Query("1", "dog bread")}, [Qrel("1", "n1", 1)], lambda: list(docs), "nosplit-v1")


def test_dataset_without_training_queries_needs_a_train_dataset(tiny_encoder, dataset, root, monkeypatch):
    target = no_split_dataset()
    with pytest.raises(PipelineError, match="no training queries.*--train-dataset"):
        build_code_index(target, small_options(tiny_encoder), root)
    with pytest.raises(PipelineError, match="no training queries"):
        make_first_stage("codes", target, BM25Settings(index_root=root, codes=small_options(tiny_encoder)))

    def no_training(*args, **kwargs):
        raise AssertionError("the encoder trained for the tiny dataset should be reused")

    monkeypatch.setattr(codes.encoders, "train_encoder", no_training)
    path = build_code_index(target, small_options(tiny_encoder), root, train_dataset=dataset)
    meta = index_metadata(path)
    assert meta["documents"] == 3 and meta["train"]["dataset"] == "tiny" and meta["train"]["queries"] == 16
    assert CodeRetriever(path).search(target.queries.values(), 2)["1"]


def test_training_source_rules(dataset):
    assert resolve_training(dataset).query_ids == dataset.splits["train"]
    other = no_split_dataset()
    assert resolve_training(dataset, other).query_ids == ["1"]  # another dataset: all its judged queries
    assert resolve_training(other, dataset).dataset is dataset
    with pytest.raises(PipelineError, match="no training queries"):
        resolve_training(other, "nosplit")  # its own name is itself


def test_unknown_options_are_clear_errors(dataset):
    with pytest.raises(PipelineError, match="unknown code index kind 'lsh'"):
        CodeOptions(kind="lsh")
    with pytest.raises(PipelineError, match="multiple of 8"):
        CodeOptions(kind="codes", dim=12)
    assert CodeOptions(kind="colbert", dim=12).dim == 12
    with pytest.raises(PipelineError, match="unknown index type"):
        CodeOptions(index_type="ivfpq")
    with pytest.raises(PipelineError, match="unknown first stage 'codez'"):
        make_first_stage("codez", dataset)


def test_retriever_refuses_an_unfinished_index(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / codes.FAISS_FILE).write_bytes(b"")
    with pytest.raises(PipelineError, match="not a finished code index"):
        CodeRetriever(tmp_path / "half")


def test_index_cli(tmp_path, tiny_encoder, capsys, monkeypatch):
    from pipeline import index as index_cli

    assert index_cli.main(["--kind", "lsh"]) == 2  # one error line, no argparse exit
    assert "argument --kind: invalid choice: 'lsh'" in capsys.readouterr().err
    folder = tmp_path / "collection"
    write(folder / "topics.tsv", "1\tdog bread\n")
    write(folder / "qrels.txt", "1 0 n1 1\n")
    write(folder / "docs.tsv", "n0\tapple river\nn1\tdog cat bread\n")
    write(folder / "dataset.json", json.dumps({"format": "trec", "topics": "topics.tsv", "qrels": "qrels.txt",
                                              "docs": "docs.tsv"}))
    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path / "indexes"))
    code = index_cli.main(["--dataset", str(folder), "--kind", "codes", "--encoder", tiny_encoder, "--steps", "2"])
    assert code == 2
    assert "no training queries" in capsys.readouterr().err
    code = index_cli.main(["--dataset", str(folder), "--kind", "colbert", "--hash-head", "lsh"])
    assert code == 2
    assert "hash_head 'lsh' is for binary codes" in capsys.readouterr().err
    code = index_cli.main(["--dataset", str(folder), "--kind", "codes", "--hash-center"])
    assert code == 2
    assert "hash_center centres the hyperplanes of hash_head 'lsh'" in capsys.readouterr().err
    code = index_cli.main(["--dataset", str(folder), "--kind", "codes", "--hash-head", "lsh", "--hash-center",
                           "--hash-steps", "5"])
    assert code == 2
    assert "hash_center codes are not fine-tuned" in capsys.readouterr().err


def test_bm25_hard_negatives(tiny_encoder, dataset, tmp_path):
    """Hard negatives come from the Lucene first stage: BM25's non-relevant documents, in rank order."""
    source = resolve_training(dataset)
    negatives = codes.bm25_negatives(dataset, source.query_ids, 3, tmp_path)
    qrels = dataset.qrels_dict()
    assert set(negatives) == set(source.query_ids)
    assert all(len(docs) <= 3 and all(qrels[q].get(d, 0) <= 0 for d in docs) for q, docs in negatives.items())
    assert sum(map(len, negatives.values())) > 0
    path = build_code_index(dataset, small_options(tiny_encoder, hard_negatives=2, negative_depth=3, steps=3), tmp_path)
    assert index_metadata(path)["options"]["hard_negatives"] == 2


def test_lsh_draws_benchmark_rebuilds_the_lsh_index_from_the_float_one(tiny_encoder, dataset, tmp_path):
    """benchmarks/lsh_draws.py hashes a float index's stored vectors instead of re-encoding the documents;
    with the shipped hyperplanes and seed it must give the very run of the lsh index."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import lsh_draws

    float_path = build_code_index(dataset, small_options(tiny_encoder, kind="colbert", seed=7), tmp_path)
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16, seed=7)
    expected = CodeRetriever(build_code_index(dataset, lsh, tmp_path), k_prime=8).search(dataset.queries.values(), 10)
    retriever = CodeRetriever(float_path, k_prime=8)
    queries = list(dataset.queries.values())
    planes = lsh_draws.hyperplanes("orthogonal", 64, 16, seed=7)
    run = lsh_draws.hashed_search(retriever, np.array(retriever.vectors),
                                  retriever.encode_queries([q.text for q in queries]), queries, planes, 10)
    assert run.keys() == expected.keys()
    for qid, hits in expected.items():
        assert [h.doc_id for h in run[qid]] == [h.doc_id for h in hits]
        assert np.allclose([h.score for h in run[qid]], [h.score for h in hits], atol=1e-4)
    assert lsh_draws.hyperplanes("gaussian", 64, 16, seed=7).shape == (64, 16)


def test_code_benchmark_arguments_build_the_options_they_describe():
    """benchmarks/code_first_stage.py's shared arguments: --hash-seed reaches the lsh options and the header."""
    import argparse
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import code_first_stage

    parser = argparse.ArgumentParser()
    code_first_stage.add_code_arguments(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--k-prime", type=int, default=256)
    parser.add_argument("--quiet", action="store_true")
    default = parser.parse_args(["--hash-head", "lsh", "--bits", "512"])
    assert code_first_stage.code_options("codes", default).hyperplane_seed == CodeOptions.seed
    assert f"seed {CodeOptions.seed})" in code_first_stage.describe_codes(default)
    redrawn = parser.parse_args(["--hash-head", "lsh", "--bits", "512", "--hash-seed", "3", "--hash-steps", "100"])
    options = code_first_stage.code_options("codes", redrawn)
    assert (options.hash_seed, options.hash_steps, options.dim) == (3, 100, 512)
    assert "seed 3)" in code_first_stage.describe_codes(redrawn)
    assert code_first_stage.code_options("colbert", redrawn).hash_seed is None  # floats have no hyperplanes
    drawn = parser.parse_args(["--hash-head", "lsh", "--bits", "512", "--hash-seed", "3", "--hash-draws", "4"])
    assert code_first_stage.code_options("codes", drawn).hash_draws == 4
    assert "the best of 4 draws from seed 3" in code_first_stage.describe_codes(drawn)
    assert code_first_stage.code_options("colbert", drawn).hash_draws == 1
    centred = parser.parse_args(["--hash-head", "lsh", "--bits", "256", "--hash-center"])
    assert code_first_stage.code_options("codes", centred).hash_center
    assert "minus the mean token vector of the indexed collection" in code_first_stage.describe_codes(centred)
    assert not code_first_stage.code_options("colbert", centred).hash_center


def test_lsh_draws_benchmark_selects_the_draw_the_index_keeps(tiny_encoder, dataset, tmp_path, monkeypatch):
    """lsh_draws.py --select K picks, from each pool, the draw that CodeOptions(hash_draws=K) indexes."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import lsh_draws

    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path))
    float_options = small_options(tiny_encoder, kind="colbert", seed=7)
    retriever = CodeRetriever(build_code_index(dataset, float_options, tmp_path), k_prime=8)
    pool = codes.draw_seeds(7, 3)
    agreement = lsh_draws.agreements(retriever, dataset, float_options, pool, 64)
    drawn = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16, seed=7, hash_draws=3)
    report = index_metadata(build_code_index(dataset, drawn, tmp_path))["train"]["report"]["hash_draws"]
    assert report["kendall_tau"] == [round(agreement[seed], 5) for seed in pool]
    assert report["chosen"] == max(pool, key=agreement.get)


def cone(count: int, dim: int, spread: float, seed: int) -> torch.Tensor:
    """Unit vectors in a narrow cone around one direction, like a trained encoder's token vectors."""
    generator = torch.Generator().manual_seed(seed)
    axis = F.normalize(torch.randn(dim, generator=generator), dim=0)
    return F.normalize(axis + spread * torch.randn(count, dim, generator=generator), dim=-1)


def test_centred_similarity_estimates_cosines_inside_a_cone_better_than_plain_hashing():
    """Unit vectors sharing a dominant direction (mean norm .93, as MiniLM's projected token vectors on
    NFCorpus): hyperplanes through the origin put most vectors on the same side, centred ones split them
    evenly; the decoded score must rank each query's documents more like the true cosines."""
    docs = cone(400, 16, 0.1, seed=1)
    queries = F.normalize(docs[:20] + 0.05 * torch.randn(20, 16, generator=torch.Generator().manual_seed(2)), dim=-1)
    truth = docs @ queries.T
    planes = codes.random_hyperplanes(256, 16, seed=3)
    center = docs.mean(dim=0)
    assert float(center.norm()) > 0.9
    centred_codes = torch.where((docs - center) @ planes.T >= 0, 1.0, -1.0)
    decode_norm = (centred_codes @ planes).norm(dim=1).mean()
    centred = codes.centred_similarity(centred_codes, queries, planes, center, decode_norm)
    plain_codes = torch.where(docs @ planes.T >= 0, 1.0, -1.0)
    plain = plain_codes @ F.normalize(queries @ planes.T, dim=-1).T
    imbalance = lambda b: float((b > 0).float().mean(dim=0).sub(0.5).abs().mean())  # noqa: E731
    assert imbalance(plain_codes) > 0.3 and imbalance(centred_codes) < 0.05
    tau = lambda scores: np.mean([codes.kendall_tau(scores[:, j], truth[:, j]) for j in range(20)])  # noqa: E731
    assert tau(centred) > tau(plain) + 0.02, (tau(centred), tau(plain))
    # not only the order: the decoded value is the cosine itself (the unit norm recovered from the center)
    assert float((centred - truth).abs().mean()) < 0.02
    # a code with no direction (all zeros) leaves only the center's own cosines
    assert torch.allclose(codes.centred_similarity(torch.zeros(1, 256), queries, planes, center, decode_norm),
                          (queries @ center)[None], atol=1e-6)


def test_hash_center_options_and_keys(tiny_encoder, dataset, root):
    source = resolve_training(dataset)
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16)
    centred = dataclasses.replace(lsh, hash_center=True)
    assert "hash_center" not in lsh.training_fields() and centred.training_fields()["hash_center"] is True
    assert encoder_path(centred, source, root) != encoder_path(lsh, source, root)
    assert centred.float_options() == lsh.float_options()
    with pytest.raises(PipelineError, match="hash_center centres the hyperplanes of hash_head 'lsh'"):
        small_options(tiny_encoder, hash_center=True)
    with pytest.raises(PipelineError, match="hash_center codes are not fine-tuned"):
        dataclasses.replace(centred, hash_steps=10)


def test_centred_lsh_index_stores_the_signs_of_centred_float_vectors(tiny_encoder, dataset, tmp_path):
    source = resolve_training(dataset)
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16, hash_center=True)
    path = build_code_index(dataset, lsh, tmp_path)
    centring = index_metadata(path)["hash_center"]
    float_checkpoint, _ = codes.obtain_encoder(lsh.float_options(), source, tmp_path)
    tokenizer, float_model, _ = codes.load_encoder_checkpoint(float_checkpoint)
    sample, documents = codes.center_sample(float_model, tokenizer, dataset, lsh)
    assert documents == 64 and centring["documents"] == 64 and centring["tokens"] == len(sample)
    # a collection larger than the sample: a seeded uniform sample, not its first documents
    few, count = codes.center_sample(float_model, tokenizer, dataset, lsh, documents=8)
    first, _ = codes.center_sample(float_model, tokenizer, dataclasses.replace(
        dataset, docs_factory=lambda: list(dataset.docs_iter())[:8], _store=None), lsh)
    assert count == 8 and torch.equal(few, codes.center_sample(float_model, tokenizer, dataset, lsh, documents=8)[0])
    assert few.shape != first.shape or not torch.equal(few, first)
    retriever = CodeRetriever(path, k_prime=index_metadata(path)["vectors"])
    model = retriever.model
    assert model.centred and retriever.binary and retriever.dim == 64
    assert torch.allclose(model.center, sample.mean(dim=0), atol=1e-5)
    assert torch.equal(model.hyperplanes, codes.random_hyperplanes(64, 16, lsh.seed))
    assert centring["decode_norm"] == pytest.approx(float(model.decode_norm), abs=1e-4)
    # the stored codes are sign(R (v - mu)) of the float encoder's unit token vectors
    texts = [d.text for d in dataset.docs_iter()][:5]
    with torch.no_grad():
        ids, att = codes.tokenize(tokenizer, texts, lsh.max_doc_length)
        unit, mask, _ = float_model.encode_docs(ids, att)
    expected = pack_codes(((unit[mask] - model.center) @ model.hyperplanes.T).numpy())
    assert np.array_equal(np.asarray(retriever.vectors[: len(expected)]), expected)
    # search: every document a candidate, so the kNN ranking equals brute-force MaxSim over the decoded scores
    queries = list(dataset.queries.values())
    run, exhaustive = retriever.search(queries, 10), retriever.search(queries, 10, exhaustive=True)
    for qid in run:
        assert [h.doc_id for h in run[qid]] == [h.doc_id for h in exhaustive[qid]]
    top = run[queries[0].query_id][0]
    with torch.no_grad():  # the retriever's scores are the model's training-time MaxSim of the same codes
        q, q_mask = model.encode_queries(*codes.tokenize(tokenizer, [queries[0].text], lsh.max_query_length))
        d, d_mask, _ = model.encode_docs(*codes.tokenize(tokenizer, [dataset.doc_store()[top.doc_id].text],
                                                         lsh.max_doc_length), hard=True)
    assert float(model.score(q, q_mask, d, d_mask)) == pytest.approx(top.score, abs=1e-4)
    # another collection hashed with the same encoder gets its own center (its tokens, not the training ones)
    other = dataclasses.replace(tiny_dataset(WORDS[::-1][:12] + ["zebra", "violin", "glacier", "harbor"], seed=5),
                                name="tiny-other", fingerprint="tiny-other")
    other_path = build_code_index(other, lsh, tmp_path, train_dataset=dataset)
    other_model = CodeRetriever(other_path).model
    other_sample, _ = codes.center_sample(float_model, tokenizer, other, lsh)
    assert torch.allclose(other_model.center, other_sample.mean(dim=0), atol=1e-5)
    assert not torch.allclose(other_model.center, model.center, atol=1e-3)
    assert torch.equal(other_model.hyperplanes, model.hyperplanes)


def test_lsh_draws_benchmark_reproduces_the_centred_index(tiny_encoder, dataset, tmp_path, monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import lsh_draws

    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path))
    float_options = small_options(tiny_encoder, kind="colbert", seed=7)
    centred = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16, seed=7, hash_center=True)
    expected = CodeRetriever(build_code_index(dataset, centred, tmp_path), k_prime=8).search(dataset.queries.values(), 10)
    retriever = CodeRetriever(build_code_index(dataset, float_options, tmp_path), k_prime=8)
    queries = list(dataset.queries.values())
    vectors = retriever.encode_queries([q.text for q in queries])
    float_vectors = np.array(retriever.vectors)
    model = lsh_draws.centred_encoder(retriever, dataset, float_options, 64, 7)
    run = lsh_draws.hashed_search(retriever, float_vectors, vectors, queries,
                                  lsh_draws.hyperplanes("centred", 64, 16, 7), 10, model)
    for qid, hits in expected.items():
        assert [h.doc_id for h in run[qid]] == [h.doc_id for h in hits]
        assert np.allclose([h.score for h in run[qid]], [h.score for h in hits], atol=1e-4)
    # back to plain hashing: the retriever scores with the float model's rule again, not the centred one
    lsh = small_options(tiny_encoder, hash_head="lsh", dim=64, float_dim=16, seed=7)
    expected = CodeRetriever(build_code_index(dataset, lsh, tmp_path), k_prime=8).search(queries, 10)
    plain = lsh_draws.hashed_search(retriever, float_vectors, vectors, queries,
                                    lsh_draws.hyperplanes("orthogonal", 64, 16, 7), 10)
    assert not retriever.model.centred
    assert all([h.doc_id for h in plain[qid]] == [h.doc_id for h in hits] for qid, hits in expected.items())


@pytest.mark.parametrize("kind", ["codes", "colbert"])
def test_an_ivf_index_probing_every_list_finds_what_the_flat_index_finds(built, tiny_encoder, dataset, tmp_path, kind):
    from indexes.codes import ivf

    options = small_options(tiny_encoder, kind=kind, index_type="ivf", ivf_nlist=4, ivf_nprobe=4)
    path = build_code_index(dataset, options, tmp_path)
    meta = index_metadata(path)
    assert meta["ivf_lists"] == 4 and set(ivf.FILES) <= set(meta["files"]) and ivf.VECTORS_FILE not in meta["files"]
    assert not (path / ".blocks").exists()
    queries = list(dataset.queries.values())
    flat = CodeRetriever(built[kind]).search(queries, 5)
    probed_all = CodeRetriever(path, nprobe=4)
    assert isinstance(probed_all.vectors.data, np.memmap)                # read from the lists on disk, not loaded
    assert probed_all.vectors.roots is not None and probed_all.vectors.assign is None  # format 4
    flat_retriever = CodeRetriever(built[kind])  # kept: its vectors are a view into its faiss index
    assert np.array_equal(np.asarray(probed_all.vectors), flat_retriever.vectors)
    rows = np.array([5, 0, 383, 17])
    assert np.array_equal(probed_all.vectors[rows], flat_retriever.vectors[rows])
    # each vector stored once: the lists hold its code and its faiss id (8 bytes, which carries the list
    # numbers the lookup needs); apart from them, one list number per tree of 32 rows
    width = 16 // 8 if kind == "codes" else 16 * 4
    assert (path / ivf.DATA_FILE).stat().st_size == meta["vectors"] * (width + 8)
    roots = np.load(path / ivf.ROOTS_FILE)
    assert meta["format"] == 4 and not (path / ivf.ASSIGN_FILE).exists()
    assert roots.dtype == ivf.list_dtype(4) == np.uint8 and len(roots) == -(-meta["vectors"] // ivf.TREE_ROWS)
    assert probed_all.index_bytes == meta["index_bytes"] == sum((path / n).stat().st_size
                                                                for n in (codes.FAISS_FILE, ivf.DATA_FILE))
    for query_id, hits in flat.items():
        got = probed_all.search([dataset.queries[query_id]], 5)[query_id]
        assert [h.doc_id for h in got] == [h.doc_id for h in hits]
        assert [h.score for h in got] == pytest.approx([h.score for h in hits], abs=1e-5)
    one_list = CodeRetriever(path, nprobe=1).search(queries, 5)           # fewer candidates, still a ranking
    assert set(one_list) == set(flat) and all(len(h) <= 5 for h in one_list.values())
    assert index_path(dataset, options, resolve_training(dataset), tmp_path) != index_path(
        dataset, small_options(tiny_encoder, kind=kind), resolve_training(dataset), tmp_path)


IVF_BUILD = """
import logging, sys, faiss, torch
from pipeline.core.datasets import load_local
from indexes.codes import CodeOptions, build_code_index
from infra import distributed

distributed.init_from_environment()
logging.basicConfig(level=logging.INFO)  # the merge says so when a list was out of row order
torch.set_num_threads(1)
faiss.omp_set_num_threads(1)
options = CodeOptions(kind="codes", encoder=sys.argv[2], dim=16, steps=3, progress=False, device="cpu",
                      index_type="ivf", ivf_nlist=4, shard_size=8)
path = build_code_index(load_local(sys.argv[1]), options)
if distributed.is_main():
    print(path)
distributed.shutdown()
"""


def test_two_ranks_add_their_own_shards_to_one_ivf_index_merged_on_disk(tiny_encoder, tmp_path, monkeypatch):
    """Under torchrun each rank adds its shards to the quantizer rank 0 trained; rank 0 merges the blocks'
    lists on disk. The merged index holds every vector once, in the right place: probing every list finds what
    the flat index of the same encoder finds."""
    import subprocess
    import sys

    from indexes.codes import ivf
    from pipeline.core.datasets import load_local
    from tests.helpers import free_port
    from tests.helpers import TOPICS, write_pairs

    folder = tmp_path / "collection"
    write_pairs(folder / "train", 1, TOPICS[:8])
    write_pairs(folder / "test", 3, TOPICS[8:])
    script = tmp_path / "build.py"
    script.write_text(IVF_BUILD)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PIPELINE_HOME": str(tmp_path / "home"), "PYTHONPATH": f"{root}:{root / 'tests'}",
           "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    env.pop("PIPELINE_INDEX_DIR", None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), str(script), str(folder), tiny_encoder], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert is_complete(path) and not [p for p in path.parent.iterdir() if p.name.endswith(".shards")]
    meta = index_metadata(path)
    assert meta["ivf_lists"] == 4 and (path / ivf.DATA_FILE).stat().st_size == meta["vectors"] * (2 + 8)
    # each rank added a run of consecutive shards, so the blocks merged in name order were in row order
    # already: no list needed sorting (interleaved shards per rank left every list out of order)
    assert "out of row order" not in done.stderr
    stored = ivf.ListVectors(path, True, 16)
    for number in range(4):
        size = int(stored.list_sizes[number])
        ids = stored._ids_at(np.full(size, number), np.arange(size))
        assert np.all(ids[1:] > ids[:-1])
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    dataset = load_local(folder)
    options = CodeOptions(kind="codes", encoder=tiny_encoder, dim=16, steps=3, progress=False, device="cpu",
                          shard_size=8)
    flat = CodeRetriever(build_code_index(dataset, options), k_prime=64)  # the encoder rank 0 trained, cached
    merged = CodeRetriever(path, k_prime=64, nprobe=4)
    assert np.array_equal(np.asarray(merged.vectors), flat.vectors)
    queries = list(dataset.queries.values())
    expected, got = flat.search(queries, 5), merged.search(queries, 5)
    for query_id, hits in expected.items():
        assert [h.score for h in got[query_id]] == pytest.approx([h.score for h in hits], abs=1e-5)


def test_the_code_first_stage_never_builds_the_document_dict(tiny_encoder, dataset, tmp_path, monkeypatch):
    """Encoding a collection streams its documents (``docs_iter``) and searching reads only the index: neither
    holds the collection in a per-process dict (``Dataset.doc_store``; training the encoder does, for its
    positives and negatives, and is done first here)."""
    def no_dict(self):
        raise AssertionError("the collection was loaded into a dict")

    build_code_index(dataset, small_options(tiny_encoder, seed=5), tmp_path)  # trains and caches the encoder
    monkeypatch.setattr(Dataset, "doc_store", no_dict)
    streamed = dataclasses.replace(dataset, _store=None)
    path = build_code_index(streamed, small_options(tiny_encoder, seed=5, index_type="hnsw"), tmp_path)
    run = CodeRetriever(path).search(list(streamed.queries.values())[:4], 5)
    assert all(len(hits) == 5 for hits in run.values())
