"""Caches that are damaged, half-written or built twice at once never give silently different numbers.

Lucene indexes: a flipped bit in a postings or norms file, a build that ends without a segments file (what a
full disk leaves: Anserini logs the IOException and returns), garbled metadata, and two processes building
the same index at the same moment.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from indexes import lucene, lucene_build
from indexes.lucene import BM25Retriever, LuceneOptions, build_index, is_complete
from indexes.lucene_check import stamp_is_fresh
from pipeline.core.errors import CorruptCacheError, PipelineError
from tests.helpers import tiny_lucene_dataset as tiny_dataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_index(tmp_path):
    return build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path)


def flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(data)


def test_a_built_index_is_verified_and_stamped(fresh_index):
    assert stamp_is_fresh(fresh_index)
    BM25Retriever(fresh_index)                   # opens without re-reading: the stamp matches


@pytest.mark.parametrize("pattern", ["*.doc", "*.nvd", "*.tim", "*.fdt"])
def test_one_flipped_bit_is_an_error_naming_the_index_and_how_to_rebuild(fresh_index, pattern):
    flip_one_bit(next((fresh_index / "lucene").glob(pattern)))
    with pytest.raises(CorruptCacheError, match=r"is damaged \(.*checksum failed.*rm -rf"):
        BM25Retriever(fresh_index)


def test_a_missing_segments_file_is_an_error(fresh_index):
    for segments in (fresh_index / "lucene").glob("segments_*"):
        segments.unlink()
    with pytest.raises(CorruptCacheError, match="no segments file"):
        BM25Retriever(fresh_index)


def test_garbled_metadata_is_an_error(fresh_index):
    (fresh_index / lucene.META_FILE).write_text('{"dataset": "tiny", "options": ')
    with pytest.raises(CorruptCacheError, match=r"Lucene index .* is damaged \(pipeline-index.json is unreadable.*rm -rf"):
        BM25Retriever(fresh_index)


def test_a_build_that_loses_its_segments_caches_nothing(tmp_path, monkeypatch):
    real = lucene_build.anserini_class

    class FullDiskIndexer:        # Anserini on a full disk: it writes part of the index, logs, returns
        @staticmethod
        def main(args):
            real("io.anserini.index.IndexCollection").main(args)
            target = Path(args[args.index("-index") + 1])
            for segments in target.glob("segments_*"):
                segments.unlink()

    monkeypatch.setattr(lucene_build, "anserini_class",
                        lambda name: FullDiskIndexer if name.endswith("IndexCollection") else real(name))
    with pytest.raises(PipelineError, match="did not write a whole index.*nothing was cached"):
        build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path)
    assert list(tmp_path.iterdir()) == []                                     # no index, no temp dir
    monkeypatch.setattr(lucene_build, "anserini_class", real)
    assert is_complete(build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path))   # space again: builds


BUILDER = """
import json, logging, sys, time
logging.basicConfig(level=logging.INFO)
from indexes.lucene import LuceneOptions, build_index
from tests.helpers import tiny_lucene_dataset as tiny_dataset
started = time.time()
path = build_index(tiny_dataset(), LuceneOptions("porter"), root=__import__("pathlib").Path(sys.argv[1]))
print(json.dumps({"path": str(path), "started": started}))
"""


def test_two_processes_building_the_same_index_build_it_once(tmp_path):
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin", "TQDM_DISABLE": "1"}
    children = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(BUILDER), str(tmp_path)], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [child.communicate(timeout=300) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err for _, err in results]
    paths = {json.loads(out)["path"] for out, _ in results}
    assert len(paths) == 1
    index = Path(paths.pop())
    assert stamp_is_fresh(index) and BM25Retriever(index)
    assert [p.name for p in tmp_path.iterdir()] == [index.name]                # no temp dir, no lock file
    assert sum(err.count("indexing ") for _, err in results) == 1           # one of them built it
    built = json.loads((index / lucene.META_FILE).read_text())
    assert built["documents"] == len(list(tiny_dataset().docs_iter()))


def test_empty_documents_are_counted_out_of_the_expected_size(tmp_path):
    from pipeline.core.datasets import Dataset
    from pipeline.core.records import Doc

    base = tiny_dataset()
    docs = [*base.docs_iter(), Doc("blank", "   "), Doc("empty", "")]      # Anserini indexes neither
    dataset = Dataset("tiny-blanks", base.queries, [], lambda: list(docs), "tiny-blanks-v1")
    path = build_index(dataset, LuceneOptions("porter"), root=tmp_path)
    metadata = lucene.index_metadata(path)
    assert metadata["documents"] == len(docs) and metadata["indexed"] == len(docs) - 2
    BM25Retriever(path)
