"""One home for indexes, models and runs, whatever the current directory (pipeline.core.home)."""
from __future__ import annotations

from pathlib import Path

from pipeline.engine.config import RunConfig
from pipeline.core import home
from pipeline.engine.model_cache import model_dir
from indexes.codes import code_index_root
from indexes.lucene import index_root

REPO = Path(__file__).resolve().parents[3]


def test_without_variables_everything_lives_in_the_checkout_whatever_the_current_directory(tmp_path, monkeypatch):
    for name in ("PIPELINE_HOME", "PIPELINE_INDEX_DIR", "PIPELINE_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # a notebook in another folder
    assert home.home() == REPO
    assert index_root() == REPO / "indexes" / "cache" / "lucene"
    assert code_index_root() == REPO / "indexes" / "cache" / "codes"
    assert model_dir() == REPO / "models"
    assert RunConfig().run_dir == REPO / "runs"


def test_pipeline_home_moves_all_three_and_the_narrow_variables_still_win(tmp_path, monkeypatch):
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    monkeypatch.delenv("PIPELINE_MODEL_DIR", raising=False)
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    assert index_root() == tmp_path / "home" / "indexes" / "cache" / "lucene"
    assert model_dir() == tmp_path / "home" / "models"
    assert RunConfig().run_dir == tmp_path / "home" / "runs"
    assert RunConfig(output_dir=tmp_path / "mine").run_dir == tmp_path / "mine"
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("PIPELINE_INDEX_DIR", str(tmp_path / "indexes"))
    assert model_dir() == tmp_path / "models" and index_root() == tmp_path / "indexes"
    assert code_index_root() == tmp_path / "indexes"


def test_an_installed_copy_without_a_checkout_uses_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("PIPELINE_HOME", raising=False)
    monkeypatch.setattr(home, "SOURCE_ROOT", tmp_path / "site-packages")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert home.home() == tmp_path / "user" / ".cache" / "neural-rerank"
