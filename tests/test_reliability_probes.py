"""Issue 34's probes outside the caches' contents: a builder killed with SIGKILL, a symlink out of a dataset
folder, an empty qrels file, an infinite label, a full disk while Lucene indexes, a duplicate docno given to the
PyTerrier transformer. Each test fails without its fix."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import write_files
from pipeline.core import atomic
from pipeline.core.datasets.local import load_local
from pipeline.core.datasets.pair_format import read_pair_folder
from pipeline.core.errors import DataFormatError
from pipeline.core.formats import read_qrels

ROOT = Path(__file__).resolve().parent.parent

KILLED_WRITER = """
import os, signal, sys
from pipeline.core.atomic import atomic_directory
with atomic_directory(sys.argv[1]) as temp:
    (temp / "half-written").write_bytes(b"x" * 4096)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer(target: Path) -> Path:
    """Run a process that starts writing ``target`` through atomic_directory and is killed with SIGKILL;
    return the temporary directory it left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(target)], env=env, cwd=ROOT)
    assert child.returncode == -signal.SIGKILL
    left = [p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and p.name.endswith(".tmp")]
    assert len(left) == 1 and (left[0] / "half-written").is_file()
    return left[0]


# -- row 7: SIGKILL during a build ------------------------------------------------------------------------

def test_a_temp_dir_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "entry"
    left = killed_writer(target)
    assert ".pid" in left.name                                  # the owner is in the name
    with atomic.atomic_directory(target) as temp:
        (temp / "whole").write_text("done")
    assert not left.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_a_temp_dir_of_a_live_writer_or_another_entry_is_kept(tmp_path):
    target = tmp_path / "entry"
    live = tmp_path / f".entry.pid{os.getpid()}@{atomic._host_tag()}.abcd1234.tmp"   # this process: alive
    other = tmp_path / ".entry.more.pid1@x.abcd1234.tmp"                            # another entry's name
    recent_legacy = tmp_path / ".entry.abcd1234.tmp"                                # old naming, fresh
    old_legacy = tmp_path / ".entry.wxyz9876.tmp"                                   # old naming, 2 days old
    for folder in (live, other, recent_legacy, old_legacy):
        folder.mkdir()
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old_legacy, (two_days_ago, two_days_ago))
    assert atomic.remove_stale_temps(target) == [old_legacy]
    assert live.exists() and other.exists() and recent_legacy.exists()


def test_a_lucene_build_killed_with_sigkill_leaves_nothing_after_the_next_run(tmp_path):
    from indexes.lucene import LuceneOptions, build_index, index_path
    from tests.helpers import tiny_lucene_dataset as tiny_dataset

    target = index_path(tiny_dataset(), LuceneOptions("porter"), tmp_path)
    left = killed_writer(target)
    path = build_index(tiny_dataset(), LuceneOptions("porter"), root=tmp_path)
    assert not left.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]
    assert path == target


# -- row 8: a symlink out of a dataset folder read without a manifest --------------------------------------------

def test_a_symlink_out_of_a_dataset_folder_is_refused_and_never_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("THE-SECRET-FIRST-LINE\n")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "topics.tsv").symlink_to(secret)
    (folder / "qrels.txt").write_text("1 0 d1 1\n")
    (folder / "docs.tsv").write_text("d1\tcats and dogs\n")
    with pytest.raises(DataFormatError) as raised:
        load_local(folder)
    message = str(raised.value)
    assert "topics.tsv: a symbolic link out of the dataset directory" in message
    assert "THE-SECRET" not in message and "secret.txt" not in message


def test_a_symlink_inside_a_dataset_folder_is_fine(tmp_path):
    folder = write_files(tmp_path / "mine", {"real.tsv": "1\tcats\n", "qrels.txt": "1 0 d1 1\n",
                                             "docs.tsv": "d1\tcats and dogs\n"})
    (folder / "topics.tsv").symlink_to("real.tsv")
    assert list(load_local(folder).queries) == ["1"]


# -- row 9: an empty qrels file -----------------------------------------------------------------------------------

@pytest.mark.parametrize("content", ["", "\n\n", "query-id\tcorpus-id\tscore\n"])
def test_an_empty_qrels_file_is_an_error_naming_it(tmp_path, content):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text(content)
    with pytest.raises(DataFormatError, match=r"qrels.txt: no judgments in the file"):
        read_qrels(qrels)


def test_pipeline_run_with_an_empty_qrels_file_exits_2_without_a_run(tmp_path, capsys):
    from pipeline import run

    folder = write_files(tmp_path / "mine", {"topics.tsv": "1\tcats\n", "qrels.txt": "", "docs.tsv": "d1\tcats and dogs\n"})
    status = run.main(["--dataset", str(folder), "--first-stage", "bm25", "--output-dir", str(tmp_path / "runs")])
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qrels.txt: no judgments" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


# -- row 10: a label 'inf' ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("label", ["inf", "-inf", "1e999", "nan"])
def test_a_non_finite_label_in_sim_txt_is_an_error_naming_the_line(tmp_path, label):
    folder = write_files(tmp_path / "train", {"a.toks": "q one\nq one\n", "b.toks": "d one\nd two\n",
                                              "id.txt": "q1\nq1\n", "sim.txt": f"1\n{label}\n"})
    with pytest.raises(DataFormatError, match=rf"sim.txt:2: label '{label}' is not a number"):
        read_pair_folder(folder)


def test_pipeline_classify_with_an_infinite_label_exits_2(tmp_path, capsys):
    from pipeline import classify

    for split in ("train", "dev", "test"):
        write_files(tmp_path / "pairs" / split, {"a.toks": "q one\nq one\n", "b.toks": "d one\nd two\n",
                                                 "id.txt": "q1\nq1\n", "sim.txt": "1\ninf\n"})
    assert classify.main(["--dataset", str(tmp_path / "pairs"), "--reranker", "knrm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sim.txt:2: label 'inf'" in err


# -- a full disk while Anserini writes the index: a fault of the machine, exit 1 ------------------------------

FULL_DISK = """
import collections, sys
from pathlib import Path
from indexes import lucene_build
from pipeline import index

real = lucene_build.anserini_class

class FullDiskIndexer:        # Anserini on a full disk: it writes part of the index, logs, returns
    @staticmethod
    def main(args):
        real("io.anserini.index.IndexCollection").main(args)
        for segments in Path(args[args.index("-index") + 1]).glob("segments_*"):
            segments.unlink()

usage = collections.namedtuple("usage", "total used free")
lucene_build.anserini_class = lambda name: FullDiskIndexer if name.endswith("IndexCollection") else real(name)
lucene_build.shutil.disk_usage = lambda path: usage(1 << 30, (1 << 30) - 4096, 4096)
sys.exit(index.main(["--dataset", sys.argv[1]]))
"""


def test_a_full_disk_while_lucene_indexes_exits_1_with_one_line(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "topics.tsv").write_text("1\tcats\n")
    (folder / "docs.tsv").write_text("d1\tcats and dogs\nd2\tbirds\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PIPELINE_INDEX_DIR": str(tmp_path / "indexes"),
           "TQDM_DISABLE": "1"}
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(FULL_DISK), str(folder)], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    errors = [line for line in child.stderr.splitlines() if line.startswith("error") or "Traceback" in line]
    assert child.returncode == 1, child.stderr
    assert len(errors) == 1 and errors[0].startswith("error: cannot write ") and "no space left" in errors[0]
    assert "Traceback" not in child.stderr
    assert not [p for p in (tmp_path / "indexes").iterdir() if not p.name.endswith(".lock")]


# -- PyTerrier: a docno twice in one query ------------------------------------------------------------------------

def test_the_pyterrier_transformer_scores_a_repeated_docno_once_and_warns(caplog):
    pytest.importorskip("pyterrier")
    import pandas as pd

    from pipeline import pyterrier as ptx

    class Counting:
        name = "counting"
        scored: list[str] = []

        def score(self, query, docs):
            self.scored.extend(doc.doc_id for doc in docs)
            return [float(len(doc.text)) for doc in docs]

    reranker = Counting()
    frame = pd.DataFrame({"qid": ["1", "1", "1", "2"], "query": ["cats"] * 3 + ["dogs"],
                          "docno": ["a", "b", "a", "a"], "text": ["aa", "bbb", "aa", "aa"]})
    with caplog.at_level(logging.WARNING, logger="pipeline.pyterrier"):
        out = ptx._RerankerTransformer(reranker).transform(frame)
    assert sorted(reranker.scored) == ["a", "a", "b"]               # query 1's 'a' once, query 2's 'a' once
    assert list(zip(out["qid"], out["docno"])) == [("1", "b"), ("1", "a"), ("2", "a")]
    assert "1 rows repeat a docno" in caplog.text and "query '1', docno 'a'" in caplog.text
