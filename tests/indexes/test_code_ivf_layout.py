"""The IVF code index's storage layouts (``indexes/codes/ivf.py``): format 4 carries each row's list number in
the faiss ids of its tree, format 3 stores it apart, format 2 stores each row's position in list order. All must
give the same vectors and the same search results on the same lists; the merge must keep every list in row order."""
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


def test_formats_4_3_and_2_give_the_same_vectors_and_results(tiny_encoder, tmp_path, monkeypatch):
    """A default IVF build from an empty home (BM25 hard negatives, automatic list count) writes format 4;
    format-3 and format-2 copies of the same lists give identical vectors, search results and nDCG@10."""
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    defaults = CodeOptions()
    assert defaults.hard_negatives > 0 and defaults.ivf_nlist == 0
    options = dataclasses.replace(defaults, encoder=tiny_encoder, steps=3, dim=32, float_dim=32, progress=False,
                                  device="cpu", index_type="ivf")
    dataset = tiny_dataset(WORDS)
    path = build_code_index(dataset, options)
    meta = index_metadata(path)
    assert meta["format"] == 4 and sorted(set(meta["files"]) & set(ivf.FORMAT_3_FILES + ivf.FILES)) == sorted(ivf.FILES)
    lists = meta["ivf_lists"]
    assert lists == ivf.list_count(meta["vectors"]) > 1
    assert meta["vectors"] > 3 * ivf.TREE_ROWS  # several trees, every level of them used

    copies = {}
    for version in (3, 2):
        copies[version] = tmp_path / f"format-{version}"
        ivf.write_layout(path, copies[version], code_size=32 // 8, version=version)
        verify_code_index(copies[version])
        assert check_format(copies[version], index_metadata(copies[version])) == version
    assign = np.load(copies[3] / ivf.ASSIGN_FILE)
    assert assign.dtype == np.uint8 and len(assign) == meta["vectors"] and set(assign) == set(range(lists))
    retrievers = {4: CodeRetriever(path, nprobe=2), **{v: CodeRetriever(f, nprobe=2) for v, f in copies.items()}}
    new, three, two = (retrievers[v].vectors for v in (4, 3, 2))
    assert new.roots is not None and new.label_shift == 2 * ivf.list_bits(lists) and new.assign is None
    assert three.assign is not None and three.label_shift == 0 and two.ranks is not None
    # the roots are the list numbers of every 32nd row; every id carries its row and its children's lists
    assert np.array_equal(new.roots, assign[::ivf.TREE_ROWS])
    for number in range(lists):  # the merge kept each list in row order
        ids = list_ids(new, number)
        rows = ids >> new.label_shift
        assert len(ids) and np.all(ids[1:] > ids[:-1]) and np.all(assign[rows] == number)
        assert np.array_equal(ids, ivf.tree_ids(rows, assign, lists))
        assert np.array_equal(list_ids(three, number), rows)
    assert len(new) == len(three) == len(two) == meta["vectors"]
    everything = np.asarray(two)
    assert np.array_equal(np.asarray(new), everything) and np.array_equal(np.asarray(three), everything)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(new), size=(7, 5))
    assert np.array_equal(new[rows], three[rows]) and np.array_equal(new[rows], everything[rows])
    assert np.array_equal(new[3:40:3], everything[3:40:3]) and np.array_equal(new[[-1, 0]], everything[[-1, 0]])
    deep = np.array([ivf.TREE_ROWS - 1, 2 * ivf.TREE_ROWS - 1, ivf.TREE_ROWS - 1, 16])  # leaves, a repeat
    assert np.array_equal(new[deep], everything[deep])
    assert new[np.zeros(0, dtype=np.int64)].shape == (0, 32 // 8)
    with pytest.raises(IndexError):
        new[[len(new)]]
    # the kNN step's labels are format 4's packed ids; the retriever turns them into the same rows
    query_vectors = retrievers[4].encode_queries([dataset.queries[next(iter(dataset.queries))]])[0]
    assert np.array_equal(retrievers[4].neighbours(query_vectors)[0], retrievers[3].neighbours(query_vectors)[0])
    queries = list(dataset.queries.values())
    expected = retrievers[2].search(queries, 10)
    for version in (4, 3):
        got = retrievers[version].search(queries, 10)
        assert got.keys() == expected.keys()
        for query_id, hits in expected.items():
            assert [(h.doc_id, h.score) for h in got[query_id]] == [(h.doc_id, h.score) for h in hits]
        assert (evaluate(got, dataset.qrels, "nDCG@10").aggregate
                == evaluate(expected, dataset.qrels, "nDCG@10").aggregate)
    # the buckets only narrow the search: without them (each row searched in its whole list) the same vectors
    assert new.buckets is not None and new.buckets.shape == (lists, ((len(new) - 1) >> new.shift) + 2)
    for version, lookup, wrong_at in ((3, ivf.ASSIGN_FILE, 5), (4, ivf.ROOTS_FILE, 1)):
        source = copies[3] if version == 3 else path
        broken = tmp_path / f"broken-{version}"
        broken.mkdir()
        for name in (ivf.DATA_FILE, ivf.LISTS_FILE, lookup):
            (broken / name).write_bytes((source / name).read_bytes())
        unbucketed = ivf.ListVectors(broken, True, 32)
        assert unbucketed.buckets is None and np.array_equal(np.asarray(unbucketed), everything)
        # a list number that does not match the lists is a damaged index, named as such
        table = np.load(broken / lookup)
        table[wrong_at] = (table[wrong_at] + 1) % lists
        np.save(broken / lookup, table)
        row = 5 if version == 3 else ivf.TREE_ROWS  # format 4: the root of the second tree
        with pytest.raises(PipelineError, match=f"row {row} is not in inverted list"):
            ivf.ListVectors(broken, True, 32)[[4, 5, ivf.TREE_ROWS + 3]]
        (broken / ivf.BUCKETS_FILE).write_bytes((source / ivf.BUCKETS_FILE).read_bytes())
        with pytest.raises(PipelineError, match=f"row {row} is not in inverted list"):
            ivf.ListVectors(broken, True, 32)[[4, 5, ivf.TREE_ROWS + 3]]
    np.save(broken / ivf.ROOTS_FILE, np.load(path / ivf.ROOTS_FILE)[:-1])
    with pytest.raises(PipelineError, match="tree roots do not fit"):
        ivf.ListVectors(broken, True, 32)


@pytest.mark.parametrize("version", [4, 3])
def test_a_merge_of_blocks_out_of_row_order_sorts_the_lists(tmp_path, caplog, monkeypatch, version):
    """Blocks merged out of row order (what interleaved shards per torchrun rank gave) leave lists out of
    order; the merge sorts them, and the vectors read back are the ones added. Format 3 is what the merge
    writes where the row numbers and list numbers do not fit the faiss ids together."""
    if version == 3:
        monkeypatch.setattr(ivf, "tree_ids_fit", lambda total, lists: False)
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
        index, stored = ivf.open_index(folder, "faiss.index", True, nprobe=4, dim=64)
        distances, labels = index.search(expected[:50], 1)  # every list searched: each code finds itself
        rows = stored.rows_of(labels[:, 0])
        assert np.all(distances[:, 0] == 0) and np.array_equal(expected[rows], expected[:50])
        assert ivf.layout(folder)[0] == version


def test_the_ids_carry_rows_and_list_numbers_up_to_their_bounds(tmp_path):
    """``list_bits`` numbers every list; the rows fit beside two list numbers up to 2^(63 - 2b); a merge with
    many lists (9 bits each) reads every row back through its tree, in any order, repeats included."""
    assert [ivf.list_bits(n) for n in (1, 2, 3, 256, 257, 32_768)] == [1, 1, 2, 8, 9, 15]
    assert ivf.tree_ids_fit(2 ** 33, 32_768) and not ivf.tree_ids_fit(2 ** 33 + 1, 32_768)
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 256, size=(20_000, 8), dtype=np.uint8)
    shard = tmp_path / "shard.npz"
    np.savez(shard, vectors=codes, lengths=np.full(2_000, 10, dtype=np.int32))
    options = CodeOptions(kind="codes", dim=64, index_type="ivf", ivf_nlist=300)
    lists = ivf.assemble([shard], [len(codes)], options, tmp_path, "faiss.index")
    assert lists == 300 and ivf.layout(tmp_path)[0] == 4
    stored = ivf.ListVectors(tmp_path, True, 64)
    assert stored.label_shift == 18 and len(stored.roots) == 20_000 // ivf.TREE_ROWS
    rows = rng.integers(0, len(codes), size=5_000)
    assert np.array_equal(stored[rows], codes[rows]) and np.array_equal(np.asarray(stored), codes)
    ids = np.concatenate([list_ids(stored, number) for number in range(lists)])
    assert ids.min() >= 0 and np.array_equal(np.sort(ids >> stored.label_shift), np.arange(len(codes)))
