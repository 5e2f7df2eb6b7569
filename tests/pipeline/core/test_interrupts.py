"""Ctrl-C and kill with the JVM and torch in the same process: a clean line, exit 130/143, no JVM crash log.

The child starts Anserini's JVM (as every BM25 run does), then multiplies torch matrices inside
:func:`pipeline.core.interrupts.exit_cleanly`; the test sends it a real signal.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.core.interrupts import EXIT_SIGINT, EXIT_SIGTERM
from tests.helpers import ctrl_c_as_at_a_terminal

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import sys, torch
from indexes.jvm import anserini_class
from pipeline.core.interrupts import exit_cleanly

anserini_class("io.anserini.search.SimpleSearcher")      # the JVM runs, as in every BM25 run
torch.set_num_threads(1)
with exit_cleanly("nothing to keep in this test; run it again"):
    a = torch.randn(256, 256)
    print("ready", flush=True)
    while True:
        a = torch.tanh(a @ a)
"""


@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, EXIT_SIGINT, "interrupted"),
                                                  (signal.SIGTERM, EXIT_SIGTERM, "terminated")])
def test_a_signal_during_torch_work_with_the_jvm_running_exits_cleanly(tmp_path, signum, status, word):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)

    def ready():
        assert child.stdout.readline().strip() == "ready"

    _, stderr = interrupt(child, signum, ready, pause=0.5)
    assert child.returncode == status, stderr
    assert f"{word}: nothing to keep in this test; run it again" in stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob("hs_err_pid*.log"))              # no JVM crash report


def start(args, tmp_path, **env):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", **env}
    return subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)


def interrupt(child, signum, ready=lambda: None, pause: float = 0.0) -> tuple[str, str]:
    """Once ``ready()`` returns, wait ``pause`` seconds, send ``signum`` to ``child`` and wait for it to end;
    its stdout and stderr. A child still running when this fails (``ready`` raised, a timeout) is killed."""
    try:
        ready()
        time.sleep(pause)
        child.send_signal(signum)
        return child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()


def wait_for(child, needle: str, limit: float = 120) -> None:
    """Read the child's stderr until a line holds ``needle``."""
    deadline = time.time() + limit
    while time.time() < deadline:
        line = child.stderr.readline()
        if needle in line:
            return
        if not line and child.poll() is not None:
            raise AssertionError(f"the child ended (status {child.returncode}) before printing {needle!r}")
    raise AssertionError(f"no {needle!r} within {limit} s")


@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, EXIT_SIGINT, "interrupted"),
                                                  (signal.SIGTERM, EXIT_SIGTERM, "terminated")])
def test_pipeline_run_interrupted_while_training_says_what_it_kept(tmp_path, signum, status, word):
    from tests.helpers import write_tiny_pairs

    data = write_tiny_pairs(tmp_path / "pairs")
    child = start(["-m", "pipeline.run", "--dataset", str(data), "--reranker", "hcan", "--threads", "1",
                   "--set", "embeddings=random", "--set", "embedding_dim=8", "--set", "epochs=100000",
                   "--set", "patience=100000", "--output-dir", str(tmp_path / "runs")], tmp_path,
                  PIPELINE_MODEL_DIR=str(tmp_path / "models"))
    _, stderr = interrupt(child, signum, lambda: wait_for(child, "training hcan"), pause=2)
    assert child.returncode == status, stderr
    assert f"{word}: trained models and finished training epochs are kept" in stderr
    assert "Traceback" not in stderr and not list(tmp_path.glob("hs_err_pid*.log"))
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*.run"))


INDEX_BUILD = """
import sys
from pipeline.core.datasets import Dataset
from pipeline.core.interrupts import exit_cleanly
from pipeline.core.records import Doc, Query
from indexes.lucene import LuceneOptions, build_index

def docs():
    for number in range(10**9):                 # long enough to be interrupted while exporting
        if number == 1000:
            print("exporting", file=sys.stderr, flush=True)
        yield Doc(f"d{number}", f"word{number % 97} text{number % 13}")

dataset = Dataset("endless", {"1": Query("1", "word1")}, [], docs, "endless-v1")
with exit_cleanly("nothing was cached; run the same command to build the index again"):
    build_index(dataset, LuceneOptions(), root=__import__("pathlib").Path(sys.argv[1]))
"""


def test_an_interrupted_index_build_leaves_no_temp_directory(tmp_path):
    root = tmp_path / "indexes"
    child = start(["-c", INDEX_BUILD, str(root)], tmp_path)
    _, stderr = interrupt(child, signal.SIGTERM, lambda: wait_for(child, "exporting"))
    assert child.returncode == EXIT_SIGTERM, stderr
    assert "terminated: nothing was cached" in stderr and "Traceback" not in stderr
    assert list(root.iterdir()) == []            # no index, no hidden temp directory


@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, EXIT_SIGINT, "interrupted")])
def test_pipeline_index_interrupted_says_what_it_kept_and_leaves_no_index(tmp_path, signum, status, word):
    import json

    data = tmp_path / "big"
    data.mkdir()
    (data / "topics.tsv").write_text("1\tword1 text2\n", encoding="utf-8")
    with open(data / "docs.jsonl", "w", encoding="utf-8") as handle:  # long enough to be interrupted
        for number in range(400_000):
            handle.write(json.dumps({"id": f"d{number}", "contents": f"word{number % 97} text{number % 13}"}) + "\n")
    (data / "dataset.json").write_text(json.dumps({"name": "big", "format": "trec", "topics": "topics.tsv",
                                                   "docs": "docs.jsonl"}), encoding="utf-8")
    root = tmp_path / "indexes"
    child = start(["-m", "pipeline.index", "--dataset", str(data), "--threads", "1"], tmp_path,
                  PIPELINE_INDEX_DIR=str(root))
    # after 4 s the JVM is up and the documents are being exported or indexed
    stdout, stderr = interrupt(child, signum, pause=4)
    assert child.returncode == status, stderr
    assert f"{word}: no half-built index was left" in stderr and "Traceback" not in stderr
    assert stdout == ""
    assert not root.exists() or list(root.iterdir()) == []   # no index, no hidden temp directory


def test_a_kill_during_a_checkpoint_write_waits_until_the_file_is_in_place(tmp_path, monkeypatch):
    """torch.save's zip writer turns an exception raised inside it into a RuntimeError of its own (the
    traceback this test was written after); held back, the kill exits cleanly with a whole checkpoint."""
    import torch

    from pipeline.core.interrupts import exit_cleanly
    from infra.checkpoints import load_checkpoint, save_checkpoint

    real_save = torch.save
    handler_before = signal.getsignal(signal.SIGTERM)

    def save_and_get_killed(obj, handle):
        os.kill(os.getpid(), signal.SIGTERM)     # arrives while the file is being written
        time.sleep(0.05)
        return real_save(obj, handle)

    monkeypatch.setattr(torch, "save", save_and_get_killed)
    with pytest.raises(SystemExit) as stopped:
        with exit_cleanly("the checkpoint is kept"):
            save_checkpoint(tmp_path / "model.pt", {"weights": torch.arange(4.0)})
    assert stopped.value.code == EXIT_SIGTERM
    assert load_checkpoint(tmp_path / "model.pt")["weights"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not [p for p in tmp_path.iterdir() if p.name != "model.pt"]   # no temporary file left
    assert signal.getsignal(signal.SIGTERM) == handler_before
