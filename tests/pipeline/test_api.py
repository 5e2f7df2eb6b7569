"""The plain-strings API (pipeline.api.Reranker, issue 35 item 2) over every registered re-ranker, zero-shot
Hugging Face models, exports and its errors; and run names that tell two ``--model`` s apart (item 4)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline import Reranker, Result
from pipeline.core.errors import CheckpointError, ConfigError
from pipeline.core.records import Doc, Query
from rerankers import available
from tests.helpers import one_torch_thread  # noqa: F401  (autouse fixture)
from tests.helpers import make_tiny_encoder
from tests.helpers import (
    BATCHING_TOLERANCE as TOLERANCE, TRANSFORMER_RERANKERS as TRANSFORMERS, transformer_model, varied_dataset,
    word_model,
)
from tests.helpers import hf_logits, save_tiny_classifier as save_tiny_bert, write_collection

NAMES = sorted(set(available()) - {"none"})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset():
    return varied_dataset()


@pytest.fixture(scope="module")
def item(dataset):
    """The query with the most candidates, and its candidates."""
    store = dataset.doc_store()
    query_id, hits = max(dataset.first_stage.items(), key=lambda entry: len(entry[1]))
    return dataset.queries[query_id], [store[h.doc_id] for h in hits]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("classifier") / "model", num_labels=1)


def close(expected, got) -> None:
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                               atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_reranker_scores_and_ranks_plain_strings(name, dataset, item, tiny_encoder, tmp_path):
    model = transformer_model(name, tiny_encoder) if name in TRANSFORMERS else word_model(name, dataset)
    query, docs = item
    expected = model.score(query, docs)
    path = tmp_path / f"{name}.pt"
    model.save(path)

    by_path = Reranker.load(path)                 # the checkpoint names its re-ranker
    by_name = Reranker.load(name, model=str(path))
    assert by_path.name == by_name.name == name
    texts = [doc.text for doc in docs]
    close(expected, by_path.score(query.text, texts))
    close(expected, by_name.score(query.text, [{"id": doc.doc_id, "text": doc.text} for doc in docs]))

    ranked = by_path.rank(query.text, [{"id": doc.doc_id, "text": doc.text} for doc in docs], top_k=3)
    assert len(ranked) == min(3, len(docs)) and all(isinstance(r, Result) for r in ranked)
    best = sorted(range(len(docs)), key=lambda i: -expected[i])[: len(ranked)]
    close([expected[i] for i in best], [r.score for r in ranked])
    assert [r.doc_id for r in ranked] == [docs[r.index].doc_id for r in ranked]
    assert [r.text for r in ranked] == [docs[r.index].text for r in ranked]
    assert by_path.score(query.text, []) == [] and by_path.rank(query.text, []) == []


def test_a_hugging_face_classifier_is_a_zero_shot_cross_encoder_without_any_dataset(classifier):
    query = "who founded the power station band"
    texts = ["power station band", "tigers in the forest", "the band"]
    expected = hf_logits(classifier, Query("q", query), [Doc(str(i), t) for i, t in enumerate(texts)])[:, 0]
    named = Reranker.load("cross-encoder", model=classifier)
    alone = Reranker.load(classifier)  # a classification head: read as a cross-encoder
    assert named.name == alone.name == "cross-encoder"
    for ranker in (named, alone):
        close(expected.tolist(), ranker.score(query, texts))
    assert [r.index for r in named.rank(query, texts)] == sorted(range(3), key=lambda i: -float(expected[i]))


def test_a_plain_encoder_directory_is_a_zero_shot_bi_encoder(tiny_encoder):
    alone = Reranker.load(tiny_encoder)
    named = Reranker.load("bi-encoder", model=tiny_encoder)
    assert alone.name == named.name == "bi-encoder"
    texts = ["power station band", "tigers"]
    assert alone.score("power station", texts) == named.score("power station", texts)


def test_the_bi_encoder_loads_with_its_default_packaged_encoder():
    ranker = Reranker.load("bi-encoder")  # all-MiniLM-L6-v2, packaged: no download, nothing trained
    ranked = ranker.rank("who founded the power station band",
                         ["tigers live in the forest", "the power station band was founded in 1984"])
    assert ranked[0].index == 1 and ranked[0].score > ranked[1].score


def test_an_export_directory_loads_alone(tiny_encoder, item, tmp_path):
    model = transformer_model("addax", tiny_encoder)
    query, docs = item
    directory = model.save_pretrained(tmp_path / "export")
    ranker = Reranker.load(directory)
    assert ranker.name == "addax"
    close(model.score(query, docs), ranker.score(query.text, [d.text for d in docs]))


def test_scoring_options(classifier):
    ranker = Reranker.load("cross-encoder", model=classifier, batch_size=1, threads=1)
    plain = Reranker.load("cross-encoder", model=classifier)
    texts = ["power station band", "tigers in the forest", "the band"]
    close(plain.score("power station", texts), ranker.score("power station", texts))  # batch size: speed only
    bf16 = Reranker.load("cross-encoder", model=classifier, bf16=True)
    assert bf16.model.bf16 and len(bf16.score("power station", texts)) == 3


def test_mistakes_are_clear_errors(dataset, tmp_path, classifier):
    with pytest.raises(ConfigError, match="unknown re-ranker 'knrn'; did you mean 'knrm'?"):
        Reranker.load("knrn")
    with pytest.raises(ConfigError, match="re-ranker 'knrm' needs model="):
        Reranker.load("knrm")
    path = tmp_path / "knrm.pt"
    word_model("knrm", dataset).save(path)
    with pytest.raises(CheckpointError, match="holds a 'knrm' model, not 'drmm'"):
        Reranker.load("drmm", model=str(path))
    with pytest.raises(ConfigError, match="unknown option"):
        Reranker.load(str(path), max_doc_length=5)
    with pytest.raises(CheckpointError, match="neither an export"):
        Reranker.load(tmp_path)
    ranker = Reranker.load(str(path))
    with pytest.raises(ConfigError, match="query: a non-empty string"):
        ranker.score("", ["a"])
    with pytest.raises(ConfigError, match=r"docs\[1\]: a dict needs its text"):
        ranker.score("q", ["a", {"id": "x"}])
    with pytest.raises(ConfigError, match=r"docs\[0\]: a string or a dict"):
        ranker.score("q", [3])
    with pytest.raises(ConfigError, match="top_k"):
        ranker.rank("q", ["a"], top_k=0)


def test_import_pipeline_stays_light():
    code = "import sys, pipeline; print('torch' in sys.modules); pipeline.Reranker; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.split() == ["False", "False"], result.stderr


# ------------------------------------------------------------------------------------------- run names


def test_two_models_never_write_the_same_run(tmp_path, classifier, monkeypatch, capsys):
    """``--model A`` and ``--model B`` (same folder name, different folders) write two runs, each named with
    its model; the same model again writes the same run (issue 35 item 4)."""
    from pipeline.run import main

    other = save_tiny_bert(tmp_path / "elsewhere" / "model", num_labels=1, seed=3)
    collection = write_collection(tmp_path / "collection")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    common = ["--dataset", str(collection), "--reranker", "cross-encoder", "--interpolate", "none", "--metrics", "AP",
              "--output-dir", str(tmp_path / "runs")]
    written = []
    for model in (classifier, other, classifier):
        assert main([*common, "--model", model]) == 0, capsys.readouterr().err
        written.append(capsys.readouterr().out.split("run: ")[1].split()[0])
    assert written[0] != written[1] and written[0] == written[2], written
    assert all("-model.model." in Path(path).name for path in written)
    assert len(list((tmp_path / "runs").glob("*.run"))) == 2


# ------------------------------------------------------------------------------------------- PyTerrier


def test_pyterrier_zero_shot_reranker_needs_no_dataset(classifier, caplog):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyterrier")
    from pipeline import pyterrier as ptx

    query = "who founded the power station band"
    texts = ["power station band", "tigers in the forest", "the band"]
    frame = pd.DataFrame({"qid": ["1"] * 3, "query": [query] * 3, "docno": ["a", "b", "c"], "text": texts})
    expected = Reranker.load("cross-encoder", model=classifier).score(query, texts)

    caplog.set_level("INFO", logger="pipeline.progress")  # off a terminal, progress is a log line
    quiet = ptx.reranker("cross-encoder", model=classifier, batch_size=2)
    assert quiet.batch_size == 2 and quiet.verbose is False
    scored = quiet.transform(frame)
    close(expected, [scored.set_index("docno").loc[d, "score"] for d in ("a", "b", "c")])
    assert "re-ranking with" not in caplog.text  # verbose=False: no progress

    loud = ptx.reranker("cross-encoder", model=classifier, verbose=True)
    (loud % 2).transform(frame)
    assert "re-ranking with cross-encoder: 100% 1/1 query" in caplog.text  # verbose=True: progress shown

    with pytest.raises(ptx.MissingColumnError, match="no 'text' column.*text_loader"):
        quiet.transform(frame.drop(columns=["text"]))
    with pytest.raises(ptx.MissingColumnError, match="no 'query' column"):
        quiet.transform(frame.drop(columns=["query"]))
    with pytest.raises(ConfigError, match="give dataset=.*or model="):
        ptx.reranker("knrm")
    with pytest.raises(ConfigError, match="folds need.* dataset="):
        ptx.reranker("cross-encoder", model=classifier, folds=3)
    with pytest.raises(ConfigError, match="did you mean 'cross-encoder'"):
        ptx.reranker("cross-encodr", model=classifier)
