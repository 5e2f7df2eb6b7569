"""python -m pipeline.verify: every cached entry (or the paths given) read whole, whatever its size."""
from __future__ import annotations

import json

import pytest

from indexes.lucene import LuceneOptions, build_index
from pipeline import verify
from pipeline.core import filecheck
from tests.helpers import change_in_place
from tests.helpers import tiny_lucene_dataset as tiny_dataset


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty home with a Lucene index, a fake code index (its recorded files) and a checkpoint."""
    import torch

    from infra.checkpoints import save_checkpoint

    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    monkeypatch.delenv("PIPELINE_MODEL_DIR", raising=False)
    lucene = build_index(tiny_dataset(), LuceneOptions("porter"))
    codes = tmp_path / "indexes" / "cache" / "codes" / "tiny-codes-abc"
    codes.mkdir(parents=True)
    (codes / "faiss.index").write_bytes(bytes(range(256)) * 8)
    (codes / verify.CODE_META).write_text(json.dumps({"files": filecheck.describe(codes, ["faiss.index"])}))
    checkpoint = tmp_path / "models" / "tiny" / "knrm-seed1-abc.pt"
    checkpoint.parent.mkdir(parents=True)
    save_checkpoint(checkpoint, {"reranker": "knrm", "weights": torch.arange(64, dtype=torch.float32)})
    return {"lucene": lucene, "codes": codes, "checkpoint": checkpoint}


def test_verify_reads_every_cached_entry(home, capsys):
    assert verify.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == ["ok"] * 3
    assert out[-1].startswith("3 of 3 entries whole")


def test_verify_finds_damage_that_opening_an_entry_over_the_line_trusts(home, capsys, monkeypatch):
    from indexes.lucene_check import STAMP_FILE, _files, check_index

    monkeypatch.setenv(filecheck.LIMIT_VARIABLE, "0")            # every entry is over the line
    target = next((home["lucene"] / "lucene").glob("*.doc"))
    change_in_place(target)
    # the stamp cannot see a disk's own rot (no time changes): simulated by restamping after the change
    (home["lucene"] / STAMP_FILE).write_text(json.dumps(_files(home["lucene"] / "lucene")))
    filecheck.forget_verified()
    check_index(home["lucene"])                               # opened on the stamp's word
    change_in_place(home["codes"] / "faiss.index")
    change_in_place(home["checkpoint"], offset=home["checkpoint"].stat().st_size // 2)
    assert verify.main([]) == 2
    out = capsys.readouterr().out.splitlines()
    damaged = [line for line in out if line.startswith("DAMAGED")]
    assert len(damaged) == 3, out
    assert any("Lucene index" in line and "rm -rf" in line for line in damaged)
    assert any("faiss.index does not match the SHA-256" in line for line in damaged)
    assert out[-1].endswith("3 damaged")


def test_verify_names_a_path_that_is_no_entry(tmp_path, capsys):
    assert verify.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a Lucene or code index" in err
    assert verify.main([str(tmp_path / "missing")]) == 2
