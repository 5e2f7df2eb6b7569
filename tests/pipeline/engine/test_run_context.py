"""One run builds its first stage once and retrieves each query once (pipeline.engine.context): a k-fold run with a
re-ranker to train and a combination weight to tune needs candidates for its test queries, its training and
dev queries, and each fold's dev queries again; all of them come from one :class:`FirstStageContext`."""
from __future__ import annotations

from collections import Counter

import pytest

import indexes
import rerankers
from pipeline.engine.context import FirstStageContext
from pipeline.core.plugins import Registry
from pipeline.core.records import ScoredDoc
from pipeline.run import parse_config, run_pipeline
from tests.helpers import NothingToLearn, tiny_dataset

WORDS = ("apple river mountain music doctor garden winter ocean teacher window city dog cat bread train forest "
         "paper summer energy market").split()


class WordShare(NothingToLearn):
    """A minimal plugin re-ranker (the share of the query's words a document holds)."""

    name = "word-share"

    def score(self, query, docs):
        words = set(query.text.split())
        return [len(words & set(doc.text.split())) / len(words) for doc in docs]


class Counting:
    """A plugin first stage that counts how often it is built and how often each query is searched."""

    builds = 0
    searched: Counter = Counter()

    def __init__(self, dataset):
        type(self).builds += 1
        self.name = "counting"
        self.docs = [doc.doc_id for doc in dataset.docs_iter()]

    def search(self, queries, k=1000):
        run = {}
        for query in queries:
            type(self).searched[query.query_id] += 1
            run[query.query_id] = [ScoredDoc(query.query_id, d, -float(r)) for r, d in enumerate(self.docs[:k])]
        return run


@pytest.fixture
def counting(monkeypatch, tmp_path):
    monkeypatch.setattr(rerankers, "REGISTRY", Registry("re-ranker", "neural_rerank.rerankers", rerankers.BUILTIN))
    monkeypatch.setattr(indexes.registry, "REGISTRY", Registry("first stage", "neural_rerank.first_stages"))
    rerankers.register("word-share", WordShare)
    indexes.registry.register("counting", lambda dataset, settings: Counting(dataset))
    Counting.builds, Counting.searched = 0, Counter()
    dataset = tiny_dataset(WORDS, num_queries=40)
    dataset.splits = {}  # no splits: k-fold cross-validation by query
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_MODEL_DIR", raising=False)
    return dataset


@pytest.mark.filterwarnings("ignore:Precision loss occurred")
def test_a_k_fold_run_builds_its_first_stage_once_and_retrieves_each_query_once(counting, tmp_path):
    result = run_pipeline(parse_config(["--dataset", "tiny", "--reranker", "word-share", "--first-stage", "counting",
                                        "--folds", "5", "--interpolate", "auto", "--k", "8", "--metrics", "AP",
                                        "--output-dir", str(tmp_path / "runs")]))
    assert len(result.run) == 40                        # every query is some fold's test query
    assert Counting.builds == 1                          # was 7 with 5 folds: test, training, one per fold's tuning
    assert set(Counting.searched) == set(counting.queries) and set(Counting.searched.values()) == {1}
    # a second run loads the cached models and tunes again: one build, every query once more
    Counting.builds, Counting.searched = 0, Counter()
    run_pipeline(parse_config(["--dataset", "tiny", "--reranker", "word-share", "--first-stage", "counting",
                               "--folds", "5", "--k", "8", "--metrics", "AP", "--output-dir", str(tmp_path / "runs")]))
    assert Counting.builds == 1 and set(Counting.searched.values()) == {1}


def test_the_context_answers_shallower_requests_from_deeper_ones_and_retrieves_deeper_ones_again(monkeypatch):
    monkeypatch.setattr(indexes.registry, "REGISTRY", Registry("first stage", "neural_rerank.first_stages"))
    indexes.registry.register("counting", lambda data, settings: Counting(data))
    dataset = tiny_dataset(WORDS)
    Counting.builds, Counting.searched = 0, Counter()
    context = FirstStageContext(dataset, "counting")
    queries = list(dataset.queries.values())
    deep = context.search(queries[:4], 10)
    shallow = context.search(queries[:4], 3)
    assert all(shallow[q] == deep[q][:3] for q in shallow)
    assert Counting.searched == Counter({q.query_id: 1 for q in queries[:4]})
    context.search(queries[2:6], 20)                      # deeper for two, new for two: all four searched
    assert [Counting.searched[q.query_id] for q in queries[:6]] == [1, 1, 2, 2, 1, 1]
    assert context.builds == Counting.builds == 1


def test_a_trained_models_cache_key_changes_with_the_first_stages_options_only_when_they_change():
    """The candidates a model trains on depend on the first stage's options (``--fs-set``, ``--k1``): a model
    trained on BM25 with k1 = 1.2 is not the cached model of k1 = 0.9; with the defaults the key is the
    first stage's name alone, as it was before options existed."""
    from pipeline.engine.model_cache import candidates_key, checkpoint_path, training_plan
    from pipeline.engine.protocols import Fold

    dataset = tiny_dataset(WORDS)
    fold = Fold("test", ["q1"], ["q2"], ["q3"])

    def key(*argv):
        plan = training_plan(parse_config(["--reranker", "knrm", "--first-stage", "bm25", *argv]), dataset,
                             folds=[fold], options={}, first_stage="bm25", k=10)
        return candidates_key(plan), checkpoint_path(dataset, "knrm", {}, fold, 1, candidates_key(plan), 10)

    default, default_path = key()
    assert default == "bm25"
    assert default_path == checkpoint_path(dataset, "knrm", {}, fold, 1, "bm25", 10)
    changed, changed_path = key("--fs-set", "k1=1.2")
    assert changed != default and changed_path != default_path
    assert key("--k1", "1.2") == (changed, changed_path)  # the alias flag is the same option
    assert key("--fs-set", "k1=0.9")[0] == default  # 0.9 is the default: nothing changed
