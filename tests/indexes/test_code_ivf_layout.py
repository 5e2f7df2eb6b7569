"""The IVF code index's storage layouts (``indexes/codes/ivf.py``): format 3 finds a row through its list
number and a binary search of its list's ids, format 2 through its position in list order. Both must give the
same vectors and the same search results on the same lists; the merge must keep every list in row order."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from indexes.codes import CodeOptions, CodeRetriever, build_code_index, index_metadata, ivf, verify_code_index
from indexes.codes.directory import check_format
from pipeline.core.errors import PipelineError
from pipeline.core.evaluation import evaluate
from tests.helpers import one_faiss_thread, one_torch_thread, save_tiny_bert, tiny_dataset  # noqa: F401 (autouse fixtures)

WORDS = ("apple river mountain music doctor garden winter ocean teacher window city dog cat bread train forest "
         "paper summer energy market").split()


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def list_ids(vectors: ivf.ListVectors, number: int) -> np.ndarray:
    size = int(vectors.list_sizes[number])
    return vectors._ids_at(np.full(size, number), np.arange(size))


def test_format_3_and_format_2_give_the_same_vectors_and_results(tiny_encoder, tmp_path, monkeypatch):
    """A default IVF build from an empty home (BM25 hard negatives, automatic list count), and a format-2
    copy of the same lists: every row's vector, the search results and nDCG@10 are identical."""
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    defaults = CodeOptions()
    assert defaults.hard_negatives > 0 and defaults.ivf_nlist == 0
    options = dataclasses.replace(defaults, encoder=tiny_encoder, steps=3, dim=32, float_dim=32, progress=False,
                                  device="cpu", index_type="ivf")
    dataset = tiny_dataset(WORDS)
    path = build_code_index(dataset, options)
    meta = index_metadata(path)
    assert meta["format"] == 3 and ivf.RANKS_FILE not in meta["files"]
    assert {ivf.ASSIGN_FILE, ivf.BUCKETS_FILE} <= set(meta["files"])
    lists = meta["ivf_lists"]
    assert lists == ivf.list_count(meta["vectors"]) > 1
    assign = np.load(path / ivf.ASSIGN_FILE)
    assert assign.dtype == np.uint8 and len(assign) == meta["vectors"] and set(assign) == set(range(lists))

    old = tmp_path / "format-2"
    ivf.write_format_2(path, old, code_size=32 // 8)
    verify_code_index(old)
    assert check_format(old, index_metadata(old)) == 2 and not (old / ivf.ASSIGN_FILE).exists()
    new_retriever, old_retriever = CodeRetriever(path, nprobe=2), CodeRetriever(old, nprobe=2)
    new, previous = new_retriever.vectors, old_retriever.vectors
    assert new.assign is not None and previous.ranks is not None and previous.assign is None
    for number in range(lists):  # the merge kept each list in row order
        ids = list_ids(new, number)
        assert len(ids) and np.all(ids[1:] > ids[:-1]) and np.all(assign[ids] == number)
    assert len(new) == len(previous) == meta["vectors"]
    everything = np.asarray(previous)
    assert np.array_equal(np.asarray(new), everything)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(new), size=(7, 5))
    assert np.array_equal(new[rows], previous[rows]) and np.array_equal(new[rows], everything[rows])
    assert np.array_equal(new[3:40:3], everything[3:40:3]) and np.array_equal(new[[-1, 0]], everything[[-1, 0]])
    assert new[np.zeros(0, dtype=np.int64)].shape == (0, 32 // 8)
    with pytest.raises(IndexError):
        new[[len(new)]]
    queries = list(dataset.queries.values())
    got, expected = new_retriever.search(queries, 10), old_retriever.search(queries, 10)
    assert got.keys() == expected.keys()
    for query_id, hits in expected.items():
        assert [(h.doc_id, h.score) for h in got[query_id]] == [(h.doc_id, h.score) for h in hits]
    assert evaluate(got, dataset.qrels, "nDCG@10").aggregate == evaluate(expected, dataset.qrels, "nDCG@10").aggregate
    # the buckets only narrow the search: without them (each row searched in its whole list) the same vectors
    assert new.buckets is not None and new.buckets.shape == (lists, ((len(new) - 1) >> new.shift) + 2)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in (ivf.DATA_FILE, ivf.LISTS_FILE):
        (broken / name).write_bytes((path / name).read_bytes())
    np.save(broken / ivf.ASSIGN_FILE, assign)
    unbucketed = ivf.ListVectors(broken, True, 32)
    assert unbucketed.buckets is None and np.array_equal(np.asarray(unbucketed), everything)
    # a list number that does not match the lists is a damaged index, named as such
    wrong = assign.copy()
    wrong[5] = (wrong[5] + 1) % lists
    np.save(broken / ivf.ASSIGN_FILE, wrong)
    with pytest.raises(PipelineError, match="row 5 is not in inverted list"):
        ivf.ListVectors(broken, True, 32)[[4, 5]]
    (broken / ivf.BUCKETS_FILE).write_bytes((path / ivf.BUCKETS_FILE).read_bytes())
    with pytest.raises(PipelineError, match="row 5 is not in inverted list"):
        ivf.ListVectors(broken, True, 32)[[4, 5]]


def test_a_merge_of_blocks_out_of_row_order_sorts_the_lists(tmp_path, caplog):
    """Blocks merged out of row order (what interleaved shards per torchrun rank gave) leave lists out of
    order; the merge sorts them, and the vectors read back are the ones added."""
    rng = np.random.default_rng(1)
    shards, vectors = [], []
    for number in range(4):
        codes = rng.integers(0, 256, size=(300, 8), dtype=np.uint8)
        vectors.append(codes)
        shards.append(tmp_path / f"shard-{number}.npz")
        np.savez(shards[-1], vectors=codes, lengths=np.full(30, 10, dtype=np.int32))
    options = CodeOptions(kind="codes", dim=64, index_type="ivf", ivf_nlist=4)
    counts = ivf.shard_counts(shards)
    index, lists = ivf.train(shards, counts, options)
    trained = tmp_path / ivf.TRAINED_FILE
    ivf._write(index, True, trained)
    blocks = ivf.add_blocks(trained, shards, [0, 300, 600, 900], True, tmp_path, block_vectors=300)
    assert len(blocks) == 4
    expected = np.concatenate(vectors)
    for name, order in (("in-order", blocks), ("reversed", blocks[::-1])):
        folder = tmp_path / name
        folder.mkdir()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="indexes.codes.ivf"):
            assert ivf.merge(trained, order, True, folder, "faiss.index") == 1200
        out_of_order = [r.message for r in caplog.records if "out of row order" in r.message]
        assert bool(out_of_order) == (name == "reversed")
        stored = ivf.ListVectors(folder, True, 64)
        for number in range(lists):
            ids = list_ids(stored, number)
            assert np.all(ids[1:] > ids[:-1])
        assert np.array_equal(np.asarray(stored), expected)
        index, _ = ivf.open_index(folder, "faiss.index", True, nprobe=4, dim=64)
        distances, labels = index.search(expected[:50], 1)  # every list searched: each code finds itself
        assert np.all(distances[:, 0] == 0) and np.array_equal(expected[labels[:, 0]], expected[:50])
