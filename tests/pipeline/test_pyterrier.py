"""pipeline.pyterrier: the project's re-rankers and first stages as PyTerrier transformers.

A tiny KNRM trained on the synthetic collection of tests/helpers.py is checked against its own ``score``
inside ``pt.Experiment``; stub re-rankers pin down ranks, ties, batching and errors; one test composes the
real BM25 first stage, the text loader and a KNRM trained through the model cache on a dozen Cranfield
queries (``>>``). Skipped when PyTerrier (the ``pyterrier`` extra) is not installed.
"""
from __future__ import annotations

import math
import sys
from functools import partial

import pytest

pt = pytest.importorskip("pyterrier")
import pandas as pd  # noqa: E402 (PyTerrier's dependency: only once it is there)

from helpers import fit_on_tiny_dataset, one_torch_thread, tiny_dataset  # noqa: E402,F401 (autouse fixture)
from pipeline import pyterrier as ptx  # noqa: E402
from pipeline.core.errors import ConfigError, PipelineError  # noqa: E402
from pipeline.core.evaluation import evaluate  # noqa: E402
from pipeline.core.records import Query, ScoredDoc  # noqa: E402
from rerankers.knrm import KNRMReranker  # noqa: E402

WORDS = [f"w{n}" for n in range(30)]
SETTINGS = {"epochs": 2, "learning_rate": 1e-2, "negatives": 2, "max_doc_length": 16}
tiny = partial(tiny_dataset, WORDS)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A KNRM fitted on the tiny synthetic collection, and that collection."""
    reranker, _, _ = fit_on_tiny_dataset(KNRMReranker, tmp_path_factory.mktemp("knrm"), WORDS, SETTINGS)
    return reranker, tiny()


def result_frame(dataset, with_text: bool = True) -> pd.DataFrame:
    """The tiny dataset's first-stage run as a PyTerrier result frame (qid, query, docno, score, rank[, text])."""
    store = dataset.doc_store()
    rows = []
    for qid, hits in dataset.first_stage.items():
        for rank, hit in enumerate(sorted(hits, key=lambda h: -h.score)):
            row = {"qid": qid, "query": dataset.queries[qid].text, "docno": hit.doc_id, "score": hit.score,
                   "rank": rank}
            if with_text:
                row["text"] = store[hit.doc_id].text
            rows.append(row)
    return pd.DataFrame(rows)


def frames(dataset):
    return ptx.topics(dataset), ptx.qrels(dataset)


class ConstantReranker:
    """Scores every document alike (ties everywhere); counts its calls; ``score`` only (no batching)."""

    name = "constant"

    def __init__(self):
        self.calls = 0

    def score(self, query, docs):
        self.calls += 1
        return [1.0] * len(docs)


class BatchingReranker:
    """Scores a document by its text length; records each ``score_many`` call's queries."""

    name = "batching"

    def __init__(self):
        self.batches: list[list[str]] = []

    def score(self, query, docs):
        return self.score_many([(query, docs)])[0]

    def score_many(self, items, batch_size=None):
        self.batches.append([query.query_id for query, _ in items])
        return [[float(len(doc.text)) for doc in docs] for _, docs in items]


class NaNReranker(ConstantReranker):
    name = "nan"

    def score(self, query, docs):
        return [math.nan] * len(docs)


# ------------------------------------------------------------------------------ re-ranker transformer


def test_scores_are_the_rerankers_and_ranks_follow_them(trained):
    reranker, dataset = trained
    inp = result_frame(dataset)
    out = ptx.RerankerTransformer(reranker)(inp)
    assert isinstance(ptx.RerankerTransformer(reranker), pt.Transformer)
    assert len(out) == len(inp) and set(out.columns) == set(inp.columns)
    assert out["score"].dtype == "float64" and out["rank"].dtype == "int64"
    store = dataset.doc_store()
    for qid, group in out.groupby("qid", sort=False):
        expected = reranker.score(dataset.queries[qid], [store[d] for d in group["docno"]])
        assert group["score"].tolist() == pytest.approx([float(s) for s in expected], abs=1e-5)
        assert group["rank"].tolist() == list(range(len(group)))  # 0-based, rows sorted by rank
        assert group["score"].is_monotonic_decreasing
    # the scores changed the order of at least one query (the first stage's is random)
    assert any((out[out.qid == q]["docno"].tolist() != inp[inp.qid == q]["docno"].tolist()) for q in inp.qid.unique())


def test_ties_are_ranked_by_docno_whatever_the_input_order(trained):
    _, dataset = trained
    inp = result_frame(dataset)
    shuffled = inp.sample(frac=1.0, random_state=3).reset_index(drop=True)
    for frame in (inp, shuffled):
        out = ptx.RerankerTransformer(ConstantReranker())(frame)
        for _, group in out.groupby("qid", sort=False):
            assert group["docno"].tolist() == sorted(group["docno"])
            assert group["rank"].tolist() == list(range(len(group)))
        # queries keep the order in which the input frame first names them
        assert list(dict.fromkeys(out["qid"])) == list(dict.fromkeys(frame["qid"]))


def test_score_many_batches_across_queries_and_score_alone_works(trained):
    _, dataset = trained
    inp = result_frame(dataset)
    batching = BatchingReranker()
    out = ptx.RerankerTransformer(batching, batch_size=8)(inp)
    assert len(batching.batches) == 1 and len(batching.batches[0]) == inp.qid.nunique()
    assert out["score"].tolist() == [float(len(t)) for t in out["text"]]
    # rows of many queries interleaved: each score still lands on its own row
    shuffled = ptx.RerankerTransformer(BatchingReranker())(inp.sample(frac=1.0, random_state=5))
    assert shuffled["score"].tolist() == [float(len(t)) for t in shuffled["text"]]
    constant = ConstantReranker()
    ptx.RerankerTransformer(constant)(inp)
    assert constant.calls == inp.qid.nunique()  # no score_many: query by query


@pytest.mark.filterwarnings("ignore:There are shared pipeline components")  # the linear plan, on purpose
def test_in_experiment_against_a_from_df_baseline(trained):
    reranker, dataset = trained
    topics, qrels = frames(dataset)
    baseline = pt.Transformer.from_df(result_frame(dataset).drop(columns=["query"]))
    table = pt.Experiment([baseline, baseline >> ptx.RerankerTransformer(reranker)], topics, qrels,
                          eval_metrics=["map", "ndcg_cut_10"], names=["first", "knrm"], baseline=0)
    assert table["name"].tolist() == ["first", "knrm"]
    # the same numbers as the project's own evaluation of the same runs
    store = dataset.doc_store()
    scored = {q: [ScoredDoc(q, h.doc_id, float(s)) for h, s in zip(hits, reranker.score(
        dataset.queries[q], [store[h.doc_id] for h in hits]))] for q, hits in dataset.first_stage.items()}
    for row, run in (("first", dataset.first_stage), ("knrm", scored)):
        ours = evaluate(run, dataset.qrels, "AP nDCG@10").aggregate
        got = table.set_index("name").loc[row]
        assert got["map"] == pytest.approx(ours["AP"], abs=1e-4)
        assert got["ndcg_cut_10"] == pytest.approx(ours["nDCG@10"], abs=1e-4)
    assert table.set_index("name").loc["knrm", "map"] != table.set_index("name").loc["first", "map"]


def test_empty_frame_gives_empty_scores_and_ranks(trained):
    reranker, dataset = trained
    out = ptx.RerankerTransformer(reranker)(result_frame(dataset).iloc[:0])
    assert len(out) == 0 and {"score", "rank"} <= set(out.columns)


@pytest.mark.parametrize("column", ["qid", "query", "docno", "text"])
def test_missing_column_is_named(trained, column):
    reranker, dataset = trained
    with pytest.raises(ptx.MissingColumnError, match=f"no '{column}' column") as caught:
        ptx.RerankerTransformer(reranker)(result_frame(dataset).drop(columns=[column]))
    assert caught.value.column == column and isinstance(caught.value, PipelineError)
    if column == "text":
        assert "text_loader" in str(caught.value)


def test_custom_text_field_and_inspection(trained):
    reranker, dataset = trained
    transformer = ptx.RerankerTransformer(reranker, text_field="body")
    inp = result_frame(dataset).rename(columns={"text": "body"})
    assert transformer(inp)["score"].notna().all()
    assert pt.inspect.transformer_outputs(transformer, list(inp.columns)) == list(inp.columns)
    with pytest.raises(pt.inspect.InspectError) as caught:
        pt.inspect.transformer_outputs(transformer, ["qid", "query", "docno", "text"])
    assert isinstance(caught.value.__cause__, ptx.MissingColumnError) and caught.value.__cause__.column == "body"


def test_bad_rows_and_scores_are_errors(trained):
    _, dataset = trained
    inp = result_frame(dataset)
    with pytest.raises(PipelineError, match="gave a non-finite score"):
        ptx.RerankerTransformer(NaNReranker())(inp)
    holed = inp.copy()
    holed.loc[2, "text"] = None
    with pytest.raises(PipelineError, match=f"document '{holed.loc[2, 'docno']}' .* no text in column 'text'"):
        ptx.RerankerTransformer(ConstantReranker())(holed)
    with pytest.raises(ConfigError, match="batch_size"):
        ptx.RerankerTransformer(ConstantReranker(), batch_size=0)
    with pytest.raises(ConfigError, match="score"):
        ptx.RerankerTransformer(object())


# ------------------------------------------------------------------------- first stage, text loader


class FixedRetriever:
    """Each query's documents from a fixed run (top k by score); records the queries it was asked."""

    name = "fixed"

    def __init__(self, run):
        self.run = run
        self.asked: list[Query] = []

    def search(self, queries, k=1000):
        queries = list(queries)
        self.asked += queries
        return {q.query_id: sorted(self.run.get(q.query_id, []), key=lambda h: -h.score)[:k] for q in queries}


def test_first_stage_transformer_returns_top_k_with_query_columns(trained):
    _, dataset = trained
    retriever = FixedRetriever(dataset.first_stage)
    topics = ptx.topics(dataset).head(3).assign(query_0="original")
    out = ptx.FirstStageTransformer(retriever, k=2)(topics)
    assert [q.query_id for q in retriever.asked] == topics["qid"].tolist()
    assert list(out.columns) == ["qid", "query", "query_0", "docno", "score", "rank"]
    assert len(out) == 6 and (out["query_0"] == "original").all()
    for qid, group in out.groupby("qid", sort=False):
        top = sorted(dataset.first_stage[qid], key=lambda h: -h.score)[:2]
        assert group["docno"].tolist() == [h.doc_id for h in top] and group["rank"].tolist() == [0, 1]
    with pytest.raises(ptx.MissingColumnError, match="no 'query' column"):
        ptx.FirstStageTransformer(retriever)(topics.drop(columns=["query"]))
    with pytest.raises(ConfigError, match="k must be"):
        ptx.FirstStageTransformer(retriever, k=0)


def test_text_loader_adds_text_and_names_unknown_docnos(trained):
    _, dataset = trained
    loader = ptx.text_loader(dataset)
    inp = result_frame(dataset, with_text=False)
    out = loader(inp)
    store = dataset.doc_store()
    assert out["text"].tolist() == [store[d].text for d in inp["docno"]]
    with pytest.raises(PipelineError, match="1 docno.* not in dataset 'tiny': 'nowhere'"):
        loader(pd.concat([inp, inp.head(1).assign(docno="nowhere")]))
    with pytest.raises(ptx.MissingColumnError, match="no 'docno' column"):
        loader(inp.drop(columns=["docno"]))


def test_topics_and_qrels_frames(trained):
    _, dataset = trained
    topics, qrels = frames(dataset)
    assert topics["qid"].tolist() == list(dataset.queries) and topics["query"].iloc[0] == dataset.queries["q0"].text
    assert len(qrels) == len(dataset.qrels) and set(qrels.columns) == {"qid", "docno", "label"}
    assert qrels["label"].sum() == sum(q.relevance for q in dataset.qrels)


def test_missing_pyterrier_is_a_clear_error_before_any_work(monkeypatch, trained):
    _, dataset = trained
    monkeypatch.setitem(sys.modules, "pyterrier", None)  # ``import pyterrier`` now raises ImportError
    with pytest.raises(ptx.PyTerrierMissing, match=r"pip install 'neural-rerank-pipeline\[pyterrier\]'"):
        ptx.reranker("knrm", dataset=dataset)
    with pytest.raises(ImportError, match="PyTerrier is not installed"):
        ptx.text_loader(dataset)


def test_bad_options_are_config_errors(trained):
    _, dataset = trained
    with pytest.raises(ConfigError, match="unknown run option.*epochz"):
        ptx.reranker("knrm", dataset=dataset, epochz=3)
    with pytest.raises(ConfigError, match="unknown re-ranker 'nope'"):
        ptx.reranker("nope", dataset=dataset)
    with pytest.raises(ConfigError, match="'none' is no re-ranker"):
        ptx.reranker("none", dataset=dataset)
    with pytest.raises(ConfigError, match="first_stage: first stage 'bm25': unknown option 'depth'; known: k1, b, "
                                          "stemmer, keep_stopwords"):
        ptx.first_stage("bm25", dataset=dataset, depth=3)
    # the chosen first stage's options, checked as --fs-set checks them
    with pytest.raises(ConfigError, match="first_stage: first stage 'bm25': unknown option 'fb_terms'"):
        ptx.first_stage("bm25", dataset=dataset, fb_terms=20)  # RM3's option: bm25 has none
    with pytest.raises(ConfigError, match=r"b must be in \[0, 1\]"):
        ptx.first_stage("bm25", dataset=dataset, b=2)
    with pytest.raises(ConfigError, match="did you mean 'index_type'"):
        ptx.first_stage("dense", dataset=dataset, index_typ="hnsw")


# ----------------------------------------------------------------- >> on a real collection (Cranfield)


@pytest.fixture(scope="module")
def cranfield(data_root):
    from pipeline.core.datasets import load_dataset

    dataset = load_dataset("cranfield")
    return dataset.subset(sorted(dataset.queries, key=int)[:12], name="cranfield-12")


def test_bm25_text_loader_knrm_pipeline_on_cranfield(cranfield, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    options = dict(k=20, folds=2, seed=1, threads=1,
                   overrides={"embeddings": "random", "embedding_dim": 8, "epochs": 1,
                              "max_examples_per_epoch": 32, "patience": 1})
    bm25 = ptx.first_stage("bm25", dataset=cranfield, k=20)
    knrm = ptx.reranker("knrm", dataset=cranfield, **options)
    pipe = bm25 >> ptx.text_loader(cranfield) >> knrm
    topics, qrels = ptx.topics(cranfield), ptx.qrels(cranfield)

    first = bm25(topics)
    direct = bm25.retriever.search(list(cranfield.queries.values()), 20)
    for qid, group in first.groupby("qid", sort=False):
        assert group["docno"].tolist() == [h.doc_id for h in sorted(direct[qid], key=lambda h: (-h.score, h.doc_id))]
        assert group["rank"].tolist() == list(range(len(group)))

    table = pt.Experiment([bm25, pipe], topics, qrels, eval_metrics=["map", "ndcg_cut_10"],
                          names=["bm25", "bm25>>knrm"], baseline=0, plan="tree", verbose=False)
    assert table["name"].tolist() == ["bm25", "bm25>>knrm"]
    assert table["map"].between(0, 1).all() and table["map"].iloc[0] > 0.1

    reranked = pipe(topics)
    assert set(zip(reranked.qid, reranked.docno)) == set(zip(first.qid, first.docno))
    store = cranfield.doc_store()
    model = knrm.reranker  # a PerQueryReranker: each query scored by the fold model that did not see it
    for qid in topics["qid"].head(3):
        group = reranked[reranked.qid == qid]
        expected = model.score(cranfield.queries[qid], [store[d] for d in group["docno"]])
        assert group["score"].tolist() == pytest.approx([float(s) for s in expected], abs=1e-5)

    # the second time both fold models come from the cache: no training, the same scores
    assert len(list((tmp_path / "models").rglob("*.pt"))) == 2

    def no_training(*args, **kwargs):
        raise AssertionError("trained again although the models are cached")

    monkeypatch.setattr("pipeline.engine.model_cache.train_fold", no_training)
    again = ptx.reranker("knrm", dataset=cranfield, **options)
    assert (bm25 >> ptx.text_loader(cranfield) >> again)(topics)["score"].tolist() == pytest.approx(
        reranked["score"].tolist(), abs=1e-6)


# ------------------------------------------------------------------------------ the README example script


def test_example_script_prints_the_experiment_table(data_root, capsys):
    from helpers import load_benchmark

    example = load_benchmark("pyterrier_example")
    assert example.main(["--dataset", "cranfield", "--queries", "3", "--k", "10", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "cranfield: 3 queries, bm25 top 10, re-ranker bi-encoder (all-MiniLM-L6-v2)"
    assert lines[1].startswith("| name | map | ndcg_cut_10 | map + | map - | map p-value |")
    assert [line.split(" | ")[0] for line in lines[3:5]] == ["| bm25", "| bm25 >> bi-encoder"]
    assert lines[5].startswith("wall time: ")
    assert example.main(["--dataset", "cranfield", "--reranker", "nope"]) == 2
    assert "error: --reranker: unknown re-ranker 'nope'" in capsys.readouterr().err
