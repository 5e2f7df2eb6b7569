"""Caches and exported models are checked by their content when opened, whatever their modification times say.

Issue 34 rows 1-5: a byte changed in a cached code index or Lucene index, or in an exported Hugging Face model,
with the file's modification time restored afterwards, gave other numbers with exit 0. Each test here changes
content, puts the mtime back, and expects an error naming the entry.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from indexes.lucene import BM25Retriever, LuceneOptions, build_index
from indexes.lucene_check import stamp_is_fresh
from pipeline.core import filecheck
from pipeline.core.errors import ConfigError, CorruptCacheError
from tests.helpers import tiny_lucene_dataset as tiny_dataset
from tests.helpers import change_in_place  # noqa: F401


# -- row 1: any entry described by filecheck (the code index records its files this way) -------------------

def entry(tmp_path: Path) -> tuple[Path, dict]:
    directory = tmp_path / "entry"
    directory.mkdir()
    (directory / "vectors.npy").write_bytes(bytes(range(256)) * 40)
    (directory / "doc_ids.json").write_text('["a", "b"]')
    return directory, filecheck.describe(directory, ["vectors.npy", "doc_ids.json"])


def test_a_byte_changed_with_its_mtime_restored_is_found_in_a_checked_entry(tmp_path):
    directory, recorded = entry(tmp_path)
    filecheck.check(directory, recorded, "stamp.json", "code index")
    assert filecheck.stamp_is_fresh(directory, recorded, "stamp.json")
    change_in_place(directory / "vectors.npy", offset=223)
    with pytest.raises(CorruptCacheError, match=r"code index .*entry is damaged \(vectors.npy does not match the "
                                                r"SHA-256.*rm -rf"):
        filecheck.check(directory, recorded, "stamp.json", "code index")


def test_an_entry_over_the_line_is_trusted_by_its_stamp_and_read_whole_on_request(tmp_path, monkeypatch):
    directory, recorded = entry(tmp_path)
    filecheck.check(directory, recorded, "stamp.json", "code index")
    monkeypatch.setenv(filecheck.LIMIT_VARIABLE, "100")       # this entry (10 kB) is now "large"
    filecheck.forget_verified()
    # a write changes the change time, which no tool can restore: the stamp no longer matches, the files are read
    change_in_place(directory / "vectors.npy")
    with pytest.raises(CorruptCacheError):
        filecheck.check(directory, recorded, "stamp.json", "code index")
    change_in_place(directory / "vectors.npy")                # back to the original bytes
    filecheck.check(directory, recorded, "stamp.json", "code index")
    # damage the stamp cannot see (a disk's own rot changes no time): simulated by restamping after a change
    change_in_place(directory / "vectors.npy")
    stamp = json.loads((directory / "stamp.json").read_text())
    stamp["vectors.npy"] = filecheck.stat_stamp(directory / "vectors.npy")
    (directory / "stamp.json").write_text(json.dumps(stamp))
    filecheck.forget_verified()
    filecheck.check(directory, recorded, "stamp.json", "code index")          # over the line: trusted
    with pytest.raises(CorruptCacheError, match="vectors.npy does not match"):
        filecheck.check(directory, recorded, "stamp.json", "code index", full=True)   # the verify command


def test_the_line_is_a_whole_number_of_bytes(monkeypatch):
    monkeypatch.setenv(filecheck.LIMIT_VARIABLE, "2G")
    with pytest.raises(ConfigError, match="PIPELINE_VERIFY_MAX_BYTES='2G': expected a whole number"):
        filecheck.full_check_limit()
    monkeypatch.setenv(filecheck.LIMIT_VARIABLE, "0")
    assert filecheck.full_check_limit() == 0


# -- rows 2 and 3: Lucene indexes -----------------------------------------------------------------------------

@pytest.fixture
def lucene_index(tmp_path):
    return build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path)


@pytest.mark.parametrize("pattern, where", [("*.doc", "data"), ("*.doc", "header"), ("*.nvd", "header")])
def test_a_lucene_byte_changed_with_its_mtime_restored_is_an_error(lucene_index, pattern, where):
    BM25Retriever(lucene_index).close()                     # verified and stamped once
    assert stamp_is_fresh(lucene_index)
    target = next((lucene_index / "lucene").glob(pattern))
    change_in_place(target, offset=None if where == "data" else 5)
    with pytest.raises(CorruptCacheError, match=r"Lucene index .* is damaged \(.*rm -rf"):
        BM25Retriever(lucene_index)


# -- rows 4 and 5, and the file modes: exported Hugging Face models ----------------------------------------------

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A cross-encoder (tiny random BERT) exported with save_pretrained, and its scores."""
    import torch

    from rerankers.cross_encoder import CrossEncoderReranker
    from tests.helpers import save_tiny_classifier as save_tiny_bert
    from tests.helpers import HF_DOCS as DOCS, HF_QUERY as QUERY

    torch.set_num_threads(1)
    bert = save_tiny_bert(tmp_path_factory.mktemp("bert"), num_labels=1)
    reranker = CrossEncoderReranker.from_pretrained(bert, {"max_query_length": 8, "max_doc_length": 16})
    folder = reranker.save_pretrained(tmp_path_factory.mktemp("export") / "ce")
    return folder, reranker.score(QUERY, DOCS)


def export_copy(exported, tmp_path) -> Path:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(exported[0], copy)
    return copy


def test_an_export_records_its_files_and_reads_back_checked(exported, tmp_path):
    from rerankers.cross_encoder import CrossEncoderReranker
    from rerankers.hf_export import CHECKSUM_FILE
    from tests.helpers import HF_DOCS as DOCS, HF_QUERY as QUERY

    copy = export_copy(exported, tmp_path)
    recorded = json.loads((copy / CHECKSUM_FILE).read_text())["files"]
    assert {"config.json", "model.safetensors", "neural_rerank.json"} <= set(recorded)
    assert CrossEncoderReranker.load(copy).score(QUERY, DOCS) == exported[1]


def test_one_weight_changed_in_an_exported_model_is_an_error(exported, tmp_path):
    from safetensors import safe_open

    from pipeline.core.errors import CheckpointError
    from rerankers.cross_encoder import CrossEncoderReranker

    copy = export_copy(exported, tmp_path)
    weights = copy / "model.safetensors"
    with safe_open(str(weights), "pt") as handle:   # safetensors reads such a file without complaint
        assert handle.keys()
    change_in_place(weights, offset=weights.stat().st_size - 7)          # inside the last tensor's data
    with pytest.raises(CheckpointError, match=r"exported model is damaged \(model.safetensors does not match "
                                              r"the SHA-256.*export it again"):
        CrossEncoderReranker.load(copy)


def test_a_config_value_edited_in_an_exported_model_is_an_error(exported, tmp_path):
    from pipeline.core.errors import CheckpointError
    from rerankers.hf_export import load_pretrained

    copy = export_copy(exported, tmp_path)
    config = copy / "config.json"
    before = config.stat()
    text = config.read_text()
    assert '"num_hidden_layers": 2' in text
    config.write_text(text.replace('"num_hidden_layers": 2', '"num_hidden_layers": 1'))   # same size
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(CheckpointError, match=r"config.json does not match the SHA-256"):
        load_pretrained(copy)


def test_every_exported_file_gets_the_umask_s_mode(exported):
    mask = os.umask(0o022)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in exported[0].iterdir()}
    assert set(modes.values()) == {0o666 & ~mask}, modes     # model.safetensors was 0600, the others 0644


def test_an_edited_lucene_metadata_value_is_an_error(lucene_index):
    from indexes.lucene import META_FILE

    meta = lucene_index / META_FILE
    before = meta.stat()
    text = meta.read_text()
    assert '"stemmer": "porter"' in text
    meta.write_text(text.replace('"stemmer": "porter"', '"stemmer": "kporte"'))   # same size, other analysis
    os.utime(meta, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(CorruptCacheError, match=r"pipeline-index.json does not match the SHA-256"):
        BM25Retriever(lucene_index)
