"""Scoring many queries at once (``score_many``): the same scores as query-by-query scoring for every
re-ranker that can be built small, k-fold dispatch, ADDAX's caches with a document under two queries,
``pipeline.run.rerank`` and the dev metric's ``rerank_candidates``, the unpacked LSTM used for scoring, the
``--batch-size``/``--int8``/``--bf16`` options, int8 scoring and bfloat16 scoring.

Word-level models are prepared (not trained) on a small synthetic collection whose queries, candidate lists
and documents all have different lengths, so that batches mixing queries are padded; transformer models
run on the tiny random BERT of ``test_addax``; the int8 rank test uses the packaged MiniLM.
"""
from __future__ import annotations

import random

import pytest
import torch

from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
from pipeline.engine.fitting import untrained_reranker
from pipeline.engine.protocols import PerQueryReranker
from rerankers.training.data import RankingData, rerank_candidates
from rerankers import available, reranker_class
from rerankers.blocks import MaskedBiLSTM
from tests.helpers import one_torch_thread  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_WORDS as WORDS, make_tiny_encoder
from tests.helpers import (  # noqa: F401
    BATCHING_TOLERANCE as TOLERANCE, TRANSFORMER_RERANKERS as TRANSFORMERS, batched, transformer_model, varied_dataset,
    word_model,
)

WORD_MODELS = sorted(set(available()) - TRANSFORMERS - {"none"})


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return varied_dataset()


@pytest.fixture(scope="module")
def items(dataset):
    store = dataset.doc_store()
    return [(dataset.queries[q], [store[h.doc_id] for h in hits]) for q, hits in dataset.first_stage.items()]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def assert_same_scores(expected, got):
    assert [len(scores) for scores in got] == [len(scores) for scores in expected]
    for want, have in zip(expected, got):
        if want:
            torch.testing.assert_close(torch.tensor(have), torch.tensor(want), atol=TOLERANCE, rtol=0)


def check_cross_query_batching(reranker, items):
    """``score_many`` (small batches that mix queries, and the default batch) gives per-query scores."""
    per_query = [reranker.score(query, docs) for query, docs in items]
    reranker = batched(reranker, items)
    assert_same_scores(per_query, reranker.score_many(items, batch_size=3))
    assert_same_scores(per_query, reranker.score_many(list(reversed(items)))[::-1])
    assert reranker.score_many([]) == []


# ------------------------------------------------------------------------------------ every re-ranker


def test_the_two_lists_cover_the_registry():
    assert set(WORD_MODELS) | TRANSFORMERS == set(available()) - {"none"}


@pytest.mark.parametrize("name", WORD_MODELS)
def test_word_models_score_many_equals_per_query_scoring(name, dataset, items):
    check_cross_query_batching(word_model(name, dataset), items)


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformer_models_score_many_equals_per_query_scoring(name, tiny_encoder, items):
    check_cross_query_batching(transformer_model(name, tiny_encoder), items)


@pytest.mark.parametrize("name", ["cross-encoder", "addax"])
def test_packaged_minilm_score_many_equals_per_query_scoring(name, items):
    reranker = reranker_class(name).from_options({}, seed=1)   # all-MiniLM-L6-v2, untrained head
    reranker.prepare()
    check_cross_query_batching(reranker, items[:4])


def test_per_query_reranker_groups_queries_by_model_and_calls_each_model_once(dataset, items):
    first, second = word_model("knrm", dataset, seed=1), word_model("knrm", dataset, seed=2)
    models = {query.query_id: (first if number % 2 else second) for number, (query, _) in enumerate(items)}
    dispatcher = PerQueryReranker("knrm", models)
    calls = []
    for model in (first, second):
        original = model.score_many
        model.score_many = lambda group, size=None, original=original: calls.append(len(group)) or original(group, size)
    got = dispatcher.score_many(items, batch_size=4)
    assert sorted(calls) == [3, 4]                               # one call per model, its queries together
    assert_same_scores([models[q.query_id].score(q, docs) for q, docs in items], got)
    assert_same_scores([got[1]], [dispatcher.score(*items[1])])
    with pytest.raises(PipelineError, match="no model was trained"):
        dispatcher.score_many([(Query("elsewhere", "x"), items[0][1])])


# ------------------------------------------------------------------------------------- ADDAX caches


def encoded_rows(reranker) -> list[int]:
    rows: list[int] = []
    reranker.module.encoder.register_forward_hook(
        lambda module, args, kwargs, output: rows.append(int(kwargs["input_ids"].shape[0])), with_kwargs=True)
    return rows


@pytest.mark.parametrize("cache_size", [4096, 1])
def test_addax_document_under_two_queries_encoded_once_and_scored_as_alone(tiny_encoder, cache_size):
    shared = Doc("shared", "power station is a band from taiwan")
    work = [(Query("q1", "who founded the band"), [Doc("a", "a band"), shared, Doc("b", "tigers live in forests")]),
            (Query("q2", "power station"), [shared, Doc("c", "a factory that burns coal to make electricity")])]
    reranker = transformer_model("addax", tiny_encoder, doc_cache_size=cache_size)
    alone = [transformer_model("addax", tiny_encoder, doc_cache_size=0).score(q, docs) for q, docs in work]
    rows = encoded_rows(reranker)
    together = reranker.score_many(work, batch_size=2)
    assert_same_scores(alone, together)
    if cache_size > 1:
        # four distinct documents and two queries: each text through the encoder once, whatever the batches
        assert sum(rows) == 6 and len(reranker.doc_cache) == 4
        rows.clear()
        assert_same_scores(alone, reranker.score_many(work, batch_size=2))
        assert sum(rows) == 2                                    # documents from the cache, queries anew
    else:
        assert len(reranker.doc_cache) == 1                      # evicted while scoring, and still right


# ------------------------------------------------------------------------------- rerank, dev metric


class ScoreOnly:
    """A re-ranker with only ``score`` (the protocol's minimum): ``rerank`` goes query by query."""

    name = "score-only"

    def __init__(self, model):
        self.model = model
        self.calls = 0

    def score(self, query, docs):
        self.calls += 1
        return self.model.score(query, docs)


def test_rerank_across_queries_equals_query_by_query(dataset, monkeypatch):
    from pipeline.engine import stages

    reranker = word_model("hcan", dataset)
    by_query = stages.rerank(reranker, dataset, dataset.first_stage, batch_queries=False)
    monkeypatch.setattr(stages, "RERANK_CHUNK_PAIRS", 7)   # several chunks of several queries
    for size in (None, 2):
        together = stages.rerank(reranker, dataset, dataset.first_stage, batch_size=size)
        assert set(together) == set(by_query) == set(dataset.first_stage)
        for query_id, hits in by_query.items():
            assert [h.doc_id for h in together[query_id]] == [h.doc_id for h in hits]
            assert [h.score for h in together[query_id]] == pytest.approx([h.score for h in hits], abs=TOLERANCE)
    plain = ScoreOnly(reranker)
    assert stages.rerank(plain, dataset, dataset.first_stage, batch_size=4) == \
        stages.rerank(reranker, dataset, dataset.first_stage, batch_queries=False)
    assert plain.calls == len(dataset.first_stage)
    with pytest.raises(PipelineError, match="at least 1"):
        stages.rerank(reranker, dataset, dataset.first_stage, batch_size=0)


def test_rerank_candidates_scores_all_dev_queries_in_one_call(dataset):
    reranker = word_model("knrm", dataset)
    data = RankingData.from_dataset(dataset, list(dataset.queries), dataset.first_stage)
    calls = []
    original = reranker.score_many
    reranker.score_many = lambda work, size=None: calls.append(len(work)) or original(work, size)
    run = rerank_candidates(reranker, data, depth=3)
    assert calls == [len(data.queries)]
    for query_id, hits in run.items():
        top = sorted(data.candidates[query_id], key=lambda h: (-h.score, h.doc_id))[:3]
        expected = ScoreOnly(reranker).score(data.queries[query_id], [data.docs[h.doc_id] for h in top])
        assert [h.doc_id for h in hits] == [h.doc_id for h in top]
        assert [h.score for h in hits] == pytest.approx(expected, abs=TOLERANCE)


# ---------------------------------------------------------------------------------- the scoring LSTM


def padded_batches():
    """A small MaskedBiLSTM and ``(x, mask)`` batches: one of mixed lengths (an empty row included), one
    without padding."""
    torch.manual_seed(0)
    lstm = MaskedBiLSTM(6, 4).eval()
    for lengths in ([9, 0, 3, 9, 1, 5], [7, 7, 7]):
        lengths = torch.tensor(lengths)
        mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
        yield lstm, torch.randn(*mask.shape, 6), mask


def test_masked_bilstm_scoring_path_equals_the_packed_path():
    for lstm, x, mask in padded_batches():
        with torch.enable_grad():
            packed = lstm(x, mask)                               # training keeps packing
        with torch.inference_mode():
            unpacked = lstm(x, mask)
            garbage = lstm(torch.where(mask[..., None], x, torch.tensor(float("nan"))), mask)
        for a, b, c in zip(packed, unpacked, garbage):
            torch.testing.assert_close(b, a.detach(), atol=1e-6, rtol=0)
            assert torch.equal(c, b)                             # padding never reaches a real position


def test_masked_bilstm_bf16_projection_path_keeps_padding_out_and_stays_close():
    for lstm, x, mask in padded_batches():
        with torch.inference_mode():
            float32 = lstm(x, mask)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert lstm._bf16_projection(x)
                bf16 = lstm(x, mask)
                garbage = lstm(torch.where(mask[..., None], x, torch.tensor(float("nan"))), mask)
        for a, b, c in zip(float32, bf16, garbage):
            assert b.dtype == torch.float32                      # the recurrence stays float32
            torch.testing.assert_close(b, a, atol=2e-2, rtol=0)
            assert not torch.equal(b, a)                         # the projection did run in bfloat16
            assert torch.equal(c, b)                             # padding never reaches a real position


# ---------------------------------------------------------------------------------------- bfloat16


def check_bf16_scoring(reranker, items, changes: bool = True):
    """bfloat16 scores are finite, close to float32 ones (relative to their size), float32 numbers
    themselves, and (``changes``) not equal to them; switching back gives the float32 scores exactly."""
    float32 = reranker.score_many(items)
    assert reranker.score_in_bf16() is reranker and reranker.bf16
    bf16 = reranker.score_many(items)
    assert [len(s) for s in bf16] == [len(s) for s in float32]
    flat32 = torch.tensor([x for scores in float32 for x in scores])
    flat16 = torch.tensor([x for scores in bf16 for x in scores])
    assert torch.isfinite(flat16).all()
    scale = max(1.0, float(flat32.abs().max()))
    assert float((flat16 - flat32).abs().max()) <= 3e-2 * scale
    assert torch.equal(flat16, flat32) != changes
    # the scores themselves are float32: bfloat16's 8 significant bits would tie close documents
    assert not torch.equal(flat16.bfloat16().float(), flat16)
    reranker.score_in_bf16(False)
    assert reranker.score_many(items) == float32


@pytest.mark.parametrize("name", WORD_MODELS)
def test_word_models_score_in_bf16_close_to_float32(name, dataset, items):
    reranker = word_model(name, dataset)
    if not hasattr(reranker, "score_in_bf16"):  # a plugin need not offer bf16: it is scored in float32
        from pipeline.core.runtime import resolve_precision

        assert resolve_precision("auto", False, False, False) == "float32"
        return
    # K-NRM has no product outside its similarity matrix and score head, which stay float32
    check_bf16_scoring(reranker, items, changes=name != "knrm")


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformer_models_score_in_bf16_close_to_float32(name, tiny_encoder, items):
    check_bf16_scoring(transformer_model(name, tiny_encoder), items)


def test_a_transformer_scores_bf16_with_a_copy_remade_when_its_weights_change(tiny_encoder, items):
    import torch

    reranker = transformer_model("cross-encoder", tiny_encoder).score_in_bf16()
    before = reranker.score_many(items)
    copy = reranker._bf16_copy[1]
    assert copy is not reranker.module and next(copy.encoder.parameters()).dtype == torch.bfloat16
    assert reranker.module.head.weight.dtype == torch.float32          # the float32 module is untouched
    assert copy.head.weight.dtype == torch.float32 and copy.head.forward.__closure__[0].cell_contents is copy.head
    assert reranker.score_many(items) == before and reranker._bf16_copy[1] is copy     # reused
    with torch.no_grad():
        reranker.module.head.bias.add_(1.0)                            # as training changes weights in place
    after = reranker.score_many(items)
    assert reranker._bf16_copy[1] is not copy
    for old, new in zip(before, after):
        assert new == pytest.approx([value + 1.0 for value in old], abs=1e-4)


def test_bf16_and_int8_exclude_each_other(tiny_encoder):
    reranker = transformer_model("cross-encoder", tiny_encoder).score_in_bf16()
    with pytest.raises(PipelineError, match="bfloat16"):
        reranker.quantize_int8()
    quantized = transformer_model("cross-encoder", tiny_encoder).quantize_int8()
    with pytest.raises(PipelineError, match="int8"):
        quantized.score_in_bf16()


# ------------------------------------------------------------------------------------- int8 and CLI


def test_int8_scoring_runs_refuses_training_and_saving_and_moves_to_cpu(tiny_encoder, items, tmp_path):
    reranker = transformer_model("cross-encoder", tiny_encoder)
    before = reranker.score_many(items)
    assert reranker.quantize_int8() is reranker and reranker.quantize_int8() is reranker
    after = reranker.score_many(items)
    assert [len(s) for s in after] == [len(s) for s in before]
    assert all(torch.isfinite(torch.tensor(s)).all() for s in after if s)
    assert any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in reranker.module.modules())
    with pytest.raises(PipelineError, match="int8"):
        reranker.save(tmp_path / "model.pt")
    with pytest.raises(PipelineError, match="int8"):
        reranker.fit(None)
    elsewhere = transformer_model("addax", tiny_encoder)
    elsewhere.device = torch.device("cuda")      # as after training on a GPU: int8 scoring moves it back
    elsewhere.quantize_int8()
    assert elsewhere.device == torch.device("cpu") and elsewhere.quantized
    assert all(p.device.type == "cpu" for p in elsewhere.module.parameters())
    assert all(torch.isfinite(torch.tensor(s)).all() for s in elsewhere.score_many(items) if s)


def ranks(values) -> torch.Tensor:
    return torch.tensor(values).argsort().argsort().double()


def test_int8_minilm_ranks_like_fp32():
    from rerankers.bi_encoder import BiEncoderReranker

    query = Query("q", "how do airplane wings produce lift")
    texts = ["the wing deflects air downwards and the pressure difference lifts the aircraft",
             "lift on an aerofoil depends on the angle of attack and the airspeed",
             "bernoulli's principle relates pressure and velocity of a moving fluid",
             "a jet engine burns kerosene to produce thrust",
             "the boundary layer on a flat plate grows along the chord",
             "stalling happens when the flow separates from the upper surface of the wing",
             "birds flap their wings to fly", "the recipe needs two eggs and a cup of flour",
             "the stock market fell sharply on monday", "football is played by two teams of eleven",
             "paris is the capital of france", "a guitar has six strings"]
    reranker = BiEncoderReranker.load("all-MiniLM-L6-v2")       # the packaged encoder, zero-shot
    docs = [Doc(f"d{i}", text) for i, text in enumerate(texts)]
    fp32 = reranker.score(query, docs)
    int8 = reranker.quantize_int8().score(query, docs)
    a, b = ranks(fp32), ranks(int8)
    spearman = float(((a - a.mean()) * (b - b.mean())).sum() / (a.std() * b.std() * (len(a) - 1)))
    assert spearman > 0.9 and fp32 != int8


def test_cli_scoring_options(tmp_path, monkeypatch):
    from pipeline.run import build_parser, run_pipeline

    args = build_parser().parse_args(["--batch-size", "8", "--int8"])
    assert args.batch_size == 8 and args.int8
    defaults = build_parser().parse_args([])
    assert defaults.batch_size is None and not defaults.int8
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: varied_dataset())
    with pytest.raises(PipelineError, match="--int8 applies to the transformer"):
        run_pipeline(build_parser().parse_args(["--reranker", "hcan", "--int8", "--output-dir", str(tmp_path)]))
    with pytest.raises(PipelineError, match="exclude each other"):
        run_pipeline(build_parser().parse_args(["--reranker", "cross-encoder", "--int8", "--bf16",
                                                "--output-dir", str(tmp_path)]))
    with pytest.raises(PipelineError, match="--bf16 applies to the neural"):
        run_pipeline(build_parser().parse_args(["--bf16", "--output-dir", str(tmp_path)]))
    with pytest.raises(PipelineError, match="exclude each other"):
        run_pipeline(build_parser().parse_args(["--reranker", "hcan", "--precision", "float32", "--bf16",
                                                "--output-dir", str(tmp_path)]))
    assert defaults.precision == "auto" and build_parser().parse_args(["--precision", "bf16"]).precision == "bf16"


def test_int8_and_bf16_runs_keep_the_float_run(tiny_encoder, tmp_path, monkeypatch):
    from pipeline.run import build_parser, run_pipeline

    dataset = varied_dataset()
    for qid, hits in dataset.first_stage.items():   # a run file lists each document once per query
        dataset.first_stage[qid] = list({hit.doc_id: hit for hit in reversed(hits)}.values())[::-1]
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    checkpoint = tmp_path / "cross.pt"
    transformer_model("cross-encoder", tiny_encoder).save(checkpoint)
    common = ["--reranker", "cross-encoder", "--model", str(checkpoint), "--interpolate", "none",
              "--output-dir", str(tmp_path / "runs")]
    fp32 = run_pipeline(build_parser().parse_args(common))
    int8 = run_pipeline(build_parser().parse_args(common + ["--int8"]))
    bf16 = run_pipeline(build_parser().parse_args(common + ["--bf16"]))
    assert "int8" in int8.run_path.name and "int8" not in fp32.run_path.name
    assert bf16.run_path.name.endswith("-bf16-alone.run") and "bf16" not in fp32.run_path.name
    assert fp32.run_path.exists() and int8.run_path.exists() and bf16.run_path.exists()
    assert fp32.run_path.read_text() != int8.run_path.read_text()
    assert fp32.run_path.read_text() != bf16.run_path.read_text()
