"""The in-memory BM25 first stage (indexes/bm25s.py): built from an empty PIPELINE_HOME with its defaults, it
agrees with the Lucene first stage on a small collection (top-10 overlap, AP), its analysis is Lucene's,
its cache is reused, and a damaged cache is a clear error."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from indexes import BM25Settings, make_first_stage
from indexes import bm25s as fast
from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError, CorruptCacheError
from pipeline.core.evaluation import evaluate
from pipeline.core.records import Doc, Qrel, Query

TOPICS = 12


def synthetic_collection(seed: int = 0, docs: int = 360) -> Dataset:
    """Documents drawn from topic word lists plus common English (stopwords, possessives, punctuation,
    numbers), lengths 3-220 terms so that Lucene's length rounding matters; a query's relevant documents are
    those of its topic."""
    rng = random.Random(seed)
    common = ("the of and a to in is it that for on with as was at by this are be or not an their "
              "also however which would could many other more some time").split()
    topics = [[f"{stem}{suffix}" for stem in rng.sample(STEMS, 6) for suffix in ("", "s", "ing", "ed")]
              for _ in range(TOPICS)]
    documents, qrels = [], []
    for n in range(docs):
        topic = n % TOPICS
        length = rng.choice([3, 8, 15, 23, 24, 30, 47, 60, 99, 150, 220])
        words = []
        for _ in range(length):
            pick = rng.random()
            if pick < 0.45:
                words.append(rng.choice(common))
            elif pick < 0.8:
                words.append(rng.choice(topics[topic]))
            else:
                words.append(rng.choice(topics[rng.randrange(TOPICS)]))
            if rng.random() < 0.05:
                words[-1] = rng.choice(["John's", "U.S.", "3.14", "e-mail", "1,000", "don't", "(x)"]) + " " + words[-1]
        documents.append(Doc(f"d{n}", " ".join(words).capitalize() + "."))
    queries = {}
    for topic in range(TOPICS):
        for k in range(2):
            qid = f"{topic}-{k}"
            queries[qid] = Query(qid, " ".join(rng.sample(topics[topic], 3)) + " the effect")
            qrels += [Qrel(qid, f"d{n}", 1) for n in range(topic, docs, TOPICS)]
    return Dataset("synthetic", queries, qrels, lambda: list(documents), f"synthetic-{seed}-{docs}")


STEMS = ("connect gener relat condit rational valenc digit formal sensit oper adjust depend analog communic "
         "measur reson flow wing pressur heat transfer boundari layer shock veloc turbul plate cylind nozzl "
         "stream vortex jet mach fluid").split()


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    """A new user's PIPELINE_HOME: nothing built, no PIPELINE_INDEX_DIR."""
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    return tmp_path / "home"


def top10_overlap(a, b) -> float:
    shares = [len({h.doc_id for h in a[q][:10]} & {h.doc_id for h in b.get(q, [])[:10]}) / len(a[q][:10])
              for q in a if a[q]]
    return sum(shares) / len(shares)


def test_built_from_an_empty_home_agrees_with_lucene(empty_home):
    dataset = synthetic_collection()
    retriever = make_first_stage("bm25s", dataset)  # the defaults: porter, stopwords removed, k1 .9, b .4
    assert retriever.name == "bm25s"
    entries = list((empty_home / "indexes" / "cache" / "bm25s").iterdir())
    assert len(entries) == 1 and (entries[0] / fast.META_FILE).is_file()
    queries = list(dataset.queries.values())
    ours = retriever.search(queries, 1000)
    lucene = make_first_stage("bm25", dataset).search(queries, 1000)
    assert top10_overlap(lucene, ours) >= 0.97
    measures = "AP nDCG@10"
    theirs_ap = evaluate(lucene, dataset.qrels, measures).aggregate
    ours_ap = evaluate(ours, dataset.qrels, measures).aggregate
    assert abs(ours_ap["AP"] - theirs_ap["AP"]) <= 0.005
    assert ours_ap["AP"] > 0.3  # the topics are findable: the comparison is not between two empty runs
    # the same documents match (Lucene returns only documents sharing a term with the query)
    for qid in lucene:
        assert {h.doc_id for h in ours[qid]} == {h.doc_id for h in lucene[qid]}
        assert [h.score for h in ours[qid]] == sorted((h.score for h in ours[qid]), reverse=True)
        lucene_scores = {h.doc_id: h.score for h in lucene[qid]}
        for hit in ours[qid][:10]:
            assert hit.score == pytest.approx(lucene_scores[hit.doc_id], rel=1e-4, abs=1e-4)


def test_analysis_is_lucenes_english_analyzer(empty_home):
    from indexes.jvm import anserini_class

    analyzer = anserini_class("io.anserini.analysis.DefaultEnglishAnalyzer").fromArguments("porter", False, None)
    utils = anserini_class("io.anserini.analysis.AnalyzerUtils")
    ours = fast.EnglishAnalyzer()
    texts = ["The Cat's hats, e.g. 3.14 of them", "U.S. e-mail 1,000 don't JOHN'S", "Running generalizations;"
             " boundary-layer flows (at Mach 2.5) were measured", "connected connecting connection relational",
             # Lucene's Porter is Martin Porter's reference implementation: short words kept, -logi, -bli
             "US vs. es: anthropology, technology and the Hubble assembly", "__init__ _ a_b"]
    for text in texts:
        assert ours.terms(text) == list(utils.analyze(analyzer, text).toArray()), text
    assert fast.EnglishAnalyzer("none").terms("Running dogs") == ["running", "dogs"]
    assert fast.EnglishAnalyzer("none", keep_stopwords=True).terms("the dog") == ["the", "dog"]


def test_lucene_length_is_smallfloat_byte4():
    def java(length: int) -> int:  # SmallFloat.byte4ToInt(SmallFloat.intToByte4(length)), written as in Lucene
        if length < 24:
            return length
        rest = length - 24
        bits = rest.bit_length()
        if bits < 4:
            return 24 + rest
        shift = bits - 4
        return 24 + (((rest >> shift) & 0x07 | 0x08) << shift)

    lengths = np.array([0, 1, 23, 24, 25, 31, 32, 39, 40, 41, 100, 1000, 123456])
    assert fast.lucene_length(lengths).tolist() == [java(int(n)) for n in lengths]


def test_cache_is_reused_and_keyed_by_options(empty_home, monkeypatch):
    dataset = synthetic_collection(docs=60)
    first = make_first_stage("bm25s", dataset).search(list(dataset.queries.values()), 10)

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached matrix was rebuilt")

    monkeypatch.setattr(fast, "_build", no_rebuild)
    assert make_first_stage("bm25s", dataset).search(list(dataset.queries.values()), 10) == first
    with pytest.raises(AssertionError, match="rebuilt"):  # other options are another entry
        make_first_stage("bm25s", dataset, BM25Settings(k1=1.2))
    with pytest.raises(ConfigError, match="krovetz"):
        make_first_stage("bm25s", dataset, BM25Settings(stemmer="krovetz"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "metadata"])
def test_a_damaged_cache_is_a_clear_error(empty_home, damage):
    dataset = synthetic_collection(docs=60)
    path = fast.build_index(dataset)
    arrays = path / fast.ARRAYS_FILE
    if damage == "flip":
        data = bytearray(arrays.read_bytes())
        data[len(data) // 2] ^= 0xFF
        arrays.write_bytes(bytes(data))
    elif damage == "truncate":
        arrays.write_bytes(arrays.read_bytes()[:-100])
    else:
        meta = json.loads((path / fast.META_FILE).read_text())
        del meta["files"]
        (path / fast.META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CorruptCacheError, match=r"bm25s index .* is damaged .*rm -rf"):
        make_first_stage("bm25s", dataset)


def test_queries_without_index_terms_get_nothing(empty_home):
    dataset = synthetic_collection(docs=60)
    retriever = make_first_stage("bm25s", dataset)
    run = retriever.search([Query("a", "the of and"), Query("b", "zzzunknown"), Query("c", "")], 10)
    assert run == {"a": [], "b": [], "c": []}
    assert len(retriever.search([Query("d", STEMS[0] + " " + STEMS[1])], 1000)["d"]) <= 60


def test_search_threads_follow_the_settings_and_change_nothing(empty_home):
    from indexes import FirstStageSettings

    dataset = synthetic_collection()
    queries = list(dataset.queries.values())
    default = make_first_stage("bm25s", dataset)
    one = make_first_stage("bm25s", dataset, FirstStageSettings(threads=1))
    assert (default.threads, one.threads) == (2, 1)     # Lucene's default, so the two compare on equal terms
    assert default.search(queries, 1000) == one.search(queries, 1000)
