"""Interpolation of re-ranker and first-stage scores (pipeline.engine.fusion)."""
from __future__ import annotations

import pytest

from pipeline.engine import fusion
from pipeline.core.errors import PipelineError
from pipeline.core.records import Qrel, ScoredDoc
from pipeline.engine.stages import append_tail, head
from pipeline.engine.config import parse_weight


def run(query_id, scores):
    return {query_id: [ScoredDoc(query_id, d, s) for d, s in scores.items()]}


FIRST = run("q", {"a": 10.0, "b": 8.0, "c": 2.0})       # first stage: a > b > c
MODEL = run("q", {"a": -1.0, "b": 0.5, "c": 3.0})       # re-ranker:   c > b > a


def order(result):
    return [h.doc_id for h in result["q"]]


def test_minmax_rescales_and_handles_ties():
    assert fusion.minmax(FIRST["q"]) == {"a": 1.0, "b": 0.75, "c": 0.0}
    assert fusion.minmax(run("q", {"x": 3.0, "y": 3.0})["q"]) == {"x": 0.0, "y": 0.0}


def test_weights_zero_and_one_give_the_two_rankings():
    assert order(fusion.interpolate(FIRST, MODEL, 0.0)) == ["c", "b", "a"]
    assert order(fusion.interpolate(FIRST, MODEL, 1.0)) == ["a", "b", "c"]


def test_weight_one_keeps_the_first_runs_own_scores_so_float32_evaluation_sees_its_ranking():
    import ir_measures

    # two first-stage scores 1.6e-8 apart: distinct in float32 around 0.9, one float32 value once min-max
    # rescaled to 1.0 and 0.99999998 (trec_eval would then rank the tie by doc id, "b" first)
    first = run("q", {"a": 0.9146451145784997, "b": 0.914645098763007, "c": 0.1})
    kept = fusion.interpolate(first, run("q", {"a": 0.0, "b": 1.0, "c": 0.5}), 1.0)["q"]
    assert [(h.doc_id, h.score) for h in kept] == [(h.doc_id, h.score) for h in first["q"]]
    qrels = [ir_measures.Qrel("q", "a", 2), ir_measures.Qrel("q", "b", 1)]
    scored = [ir_measures.ScoredDoc("q", h.doc_id, h.score) for h in kept]
    assert ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, scored)[ir_measures.nDCG @ 10] == 1.0
    # a document only the re-ranker has: the formula, over the union
    extra = fusion.interpolate(first, run("q", {"a": 0.0, "z": 1.0}), 1.0)["q"]
    b = (0.914645098763007 - 0.1) / (0.9146451145784997 - 0.1)
    assert {h.doc_id: h.score for h in extra} == pytest.approx({"a": 1.0, "b": b, "c": 0.0, "z": 0.0})


def test_interpolated_score_is_the_weighted_sum_of_normalised_scores():
    result = {h.doc_id: h.score for h in fusion.interpolate(FIRST, MODEL, 0.3)["q"]}
    # model min-max: a 0, b 0.375, c 1; first: a 1, b .75, c 0
    assert result == pytest.approx({"a": 0.3, "b": 0.3 * 0.75 + 0.7 * 0.375, "c": 0.7})


def test_per_query_weights():
    first = {**FIRST, **run("r", {"x": 1.0, "y": 0.0})}
    model = {**MODEL, **run("r", {"x": 0.0, "y": 1.0})}
    result = fusion.interpolate(first, model, {"q": 1.0, "r": 0.0})
    assert order(result) == ["a", "b", "c"] and [h.doc_id for h in result["r"]] == ["y", "x"]


def test_different_candidates_are_fused_over_their_union_and_a_missing_query_is_an_error():
    # ranx's fuse: the union of the candidates, a document missing from a run scores 0 there after min-max
    fused = {h.doc_id: h.score for h in fusion.interpolate(FIRST, run("q", {"a": 1.0, "b": 2.0, "z": 0.0}), 0.5)["q"]}
    assert fused == pytest.approx({"a": 0.5 * 1.0 + 0.5 * 0.5, "b": 0.5 * 0.75 + 0.5 * 1.0, "c": 0.0, "z": 0.0})
    with pytest.raises(PipelineError, match="'r'"):
        fusion.interpolate(FIRST, run("r", {"a": 1.0}), 0.5)
    with pytest.raises(PipelineError, match="in \\[0, 1\\]"):
        fusion.interpolate(FIRST, MODEL, 1.5)


def test_tune_weight_finds_the_weight_that_ranks_the_relevant_document_first():
    # b is relevant: neither ranking alone puts it first, a mix of the two does
    qrels = [Qrel("q", "b", 1)]
    best, values = fusion.tune_weight(FIRST, MODEL, qrels, "AP")
    assert values[0.0] == pytest.approx(0.5) and values[1.0] == pytest.approx(0.5)
    assert values[best] == pytest.approx(1.0) and 0.0 < best < 1.0
    assert min(w for w, v in values.items() if v == 1.0) == best   # ties go to the smaller weight


def test_tune_weight_needs_judged_queries():
    with pytest.raises(PipelineError, match="no judged queries"):
        fusion.tune_weight(FIRST, MODEL, [Qrel("other", "a", 1)])


@pytest.mark.parametrize("text, message", [("x", "'auto', 'none' or a weight"), ("1.5", "in \\[0, 1\\]")])
def test_parse_weight_errors(text, message):
    with pytest.raises(PipelineError, match=message):
        parse_weight(text)
    assert parse_weight("0.25") == 0.25


def test_head_keeps_each_querys_top_depth_and_zero_keeps_all():
    first = {**run("q", {"a": 3.0, "b": 2.0, "c": 1.0}), **run("r", {"x": 1.0})}
    assert {q: [h.doc_id for h in hits] for q, hits in head(first, 2).items()} == {"q": ["a", "b"], "r": ["x"]}
    assert head(first, 0) is first


def test_append_tail_ranks_the_rest_below_the_head_in_first_stage_order():
    first = run("q", {"a": 10.0, "b": 8.0, "c": 2.0, "d": 1.0})
    reranked = run("q", {"a": -5.0, "b": 7.0})  # the head (top 2), re-scored: b above a
    result = append_tail(reranked, first)
    assert order(result) == ["b", "a", "c", "d"]
    scores = [h.score for h in result["q"]]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4
