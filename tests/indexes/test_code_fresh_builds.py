"""Code indexes built the way a new user builds them: from an empty ``PIPELINE_HOME``, with the default
options that decide which cache entries a build needs (BM25 hard negatives on, so the training set's Lucene
index is built inside the first code-index build; the encoder's own dropout), for every variant (mlp and lsh
heads, flat / HNSW / IVF, binary and float, one process and two under torchrun, the command line).

The tests in ``test_codes.py`` take the shortcut ``hard_negatives=0`` (no Lucene index needed) to stay fast;
these are their twins without it. A build that waits on a lock it holds itself (the bug these tests were
written for) fails here within :data:`HANG_SECONDS` instead of hanging the suite.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from indexes.codes import CodeOptions, CodeRetriever, build_code_index, index_metadata, is_complete
from pipeline.core.datasets import load_local
from pipeline.core.errors import PipelineError
from pipeline.core.locks import exclusive, lock_path
from tests.helpers import one_faiss_thread, one_torch_thread, save_tiny_bert, tiny_dataset  # noqa: F401 (autouse fixtures)
from tests.helpers import TOPICS, write_pairs

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("apple river mountain music doctor garden winter ocean teacher window city dog cat bread train forest "
         "paper summer energy market").split()
#: a build of these tiny indexes takes seconds; one still running after this long waits on something
HANG_SECONDS = 240


class Hung(Exception):
    """Raised by the alarm of :func:`no_hang`."""


@pytest.fixture(autouse=True)
def no_hang():
    """Fail a test that runs past :data:`HANG_SECONDS` (``flock`` waits are interrupted by the alarm)."""
    def alarm(signum, frame):
        raise Hung(f"still running after {HANG_SECONDS} s: a build waiting on a lock?")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    """A random 2-layer BERT (hidden 32, BERT's default dropout 0.1) with MiniLM's tokenizer."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture()
def empty_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("PIPELINE_HOME", str(home))
    monkeypatch.delenv("PIPELINE_INDEX_DIR", raising=False)
    return home


def user_options(encoder: str, **changes) -> CodeOptions:
    """The defaults, except the encoder (a tiny one), the step count and the sizes a tiny collection needs."""
    defaults = CodeOptions()
    assert defaults.hard_negatives > 0  # the twin of test_codes.py's hard_negatives=0 shortcut
    return dataclasses.replace(defaults, encoder=encoder, steps=3, dim=32, float_dim=32, progress=False,
                               device="cpu", **changes)


VARIANTS = {
    "codes-mlp-flat": {"kind": "codes"},
    "codes-mlp-hnsw": {"kind": "codes", "index_type": "hnsw"},
    "codes-mlp-ivf": {"kind": "codes", "index_type": "ivf"},
    "codes-lsh-flat": {"kind": "codes", "hash_head": "lsh"},
    "codes-lsh-ivf-draws": {"kind": "codes", "hash_head": "lsh", "hash_steps": 2, "hash_draws": 2, "index_type": "ivf"},
    "colbert-flat": {"kind": "colbert"},
    "colbert-hnsw": {"kind": "colbert", "index_type": "hnsw"},
    "colbert-ivf": {"kind": "colbert", "index_type": "ivf"},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_builds_from_an_empty_home_with_hard_negatives(variant, tiny_encoder, empty_home):
    dataset = tiny_dataset(WORDS)
    options = user_options(tiny_encoder, **VARIANTS[variant])
    path = build_code_index(dataset, options)
    assert is_complete(path) and path.is_relative_to(empty_home)
    meta = index_metadata(path)
    assert meta["options"]["hard_negatives"] == CodeOptions().hard_negatives
    lucene = [p for p in path.parent.iterdir() if p.name.startswith("tiny-") and p.name != path.name
              and not p.name.startswith(".")]
    assert lucene, "the hard negatives' Lucene index was built in the same home"
    run = CodeRetriever(path, threads=1).search(list(dataset.queries.values())[:3], 5)
    assert all(len(hits) == 5 for hits in run.values())
    # the search-time options at their defaults (rescore_depth 256, float32 queries), and int8 queries
    assert (options.rescore_depth, options.query_precision) == (256, "float32")
    int8 = CodeRetriever(path, threads=1, query_precision="int8").search(list(dataset.queries.values())[:3], 5)
    assert int8.keys() == run.keys() and all(len(hits) == 5 for hits in int8.values())
    assert build_code_index(dataset, options) == path  # found in the cache, no second build


def test_the_index_command_builds_from_an_empty_home(tiny_encoder, tmp_path):
    """``pipeline.index --kind codes`` as a new user runs it (a tiny encoder and 3 steps, every other default)."""
    folder = tmp_path / "collection"
    write_pairs(folder / "train", 1, TOPICS[:8])
    write_pairs(folder / "test", 3, TOPICS[8:])
    env = {**os.environ, "PIPELINE_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    env.pop("PIPELINE_INDEX_DIR", None)
    done = subprocess.run([sys.executable, "-m", "pipeline.index", "--dataset", str(folder), "--kind", "codes",
                           "--encoder", tiny_encoder, "--steps", "3"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=HANG_SECONDS - 20)
    assert done.returncode == 0, done.stderr[-3000:]
    built = [p for p in (tmp_path / "home" / "indexes" / "cache" / "codes").iterdir() if is_complete(p)]
    assert len(built) == 1 and index_metadata(built[0])["options"]["hard_negatives"] == 1


BUILD = """
import sys, faiss, torch
from pathlib import Path
from pipeline.core.datasets import load_local
from indexes.codes import CodeOptions, build_code_index
from infra import distributed

distributed.init_from_environment()
torch.set_num_threads(1)
faiss.omp_set_num_threads(1)
options = CodeOptions(kind="codes", encoder=sys.argv[2], dim=16, steps=3, progress=False, device="cpu")
path = build_code_index(load_local(sys.argv[1]), options)
if distributed.is_main():
    print(path)
distributed.shutdown()
"""


def test_two_ranks_build_from_an_empty_home_with_hard_negatives(tiny_encoder, tmp_path):
    """The torchrun twin of ``test_distributed``'s shortcut: rank 0 trains with BM25 negatives (building the
    Lucene index) while rank 1 waits, then both encode their shards."""
    from tests.helpers import free_port

    folder = tmp_path / "collection"
    write_pairs(folder / "train", 1, TOPICS[:8])
    write_pairs(folder / "test", 3, TOPICS[8:])
    script = tmp_path / "build.py"
    script.write_text(BUILD)
    env = {**os.environ, "PIPELINE_HOME": str(tmp_path / "home"), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
           "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    env.pop("PIPELINE_INDEX_DIR", None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), str(script), str(folder), tiny_encoder], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=HANG_SECONDS - 20)
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert is_complete(path) and index_metadata(path)["documents"] == len(load_local(folder).doc_store())


# ------------------------------------------------------------------------------------------ the lock itself


def test_a_lock_is_per_entry_and_never_waits_on_itself(tmp_path):
    first, second = tmp_path / "cache" / "a", tmp_path / "cache" / "b"
    with exclusive(first):
        with exclusive(second):  # another entry of the same directory: no wait
            pass
        with pytest.raises(PipelineError, match="already building it"):
            with exclusive(first):
                pass
    with exclusive(first):  # released: taken again
        assert lock_path(first).is_file() and lock_path(first).name == ".a.lock"
    assert not list((tmp_path / "cache").iterdir())  # no lock file stays behind


def test_another_process_waits_for_the_same_entry_only(tmp_path):
    entry, other = tmp_path / "cache" / "a", tmp_path / "cache" / "b"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from pipeline.core.locks import exclusive\n"
        f"with exclusive({str(entry)!r}):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        probe = ("import fcntl, os, sys\n"
                 "from pipeline.core.locks import lock_path\n"
                 "fd = os.open(lock_path(sys.argv[1]), os.O_RDWR | os.O_CREAT)\n"
                 "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n")
        assert subprocess.run([sys.executable, "-c", probe, str(entry)], cwd=ROOT).returncode == 3
        assert subprocess.run([sys.executable, "-c", probe, str(other)], cwd=ROOT).returncode == 0
    finally:
        holder.kill()
        holder.wait()
