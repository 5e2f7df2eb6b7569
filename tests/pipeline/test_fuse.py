"""``python -m pipeline.fuse``: min-max interpolation and RRF over the union of candidates, equal to
``ranx.fuse`` on the same inputs; weights / k tuned on dev queries; bad input is one error line."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import fuse
from pipeline.core.records import Qrel, ScoredDoc
from pipeline.core.formats import read_run, write_qrels, write_run
from tests.conftest import subprocess_env

if importlib.util.find_spec("ranx") is None:
    pytest.skip("ranx is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


def random_runs(count: int, seed: int = 7, queries: int = 6) -> list[dict]:
    """Runs over overlapping but different candidates, no tied scores within a run (ranx's tie order is its
    sort's, not trec_eval's)."""
    rng = random.Random(seed)
    pool = [f"d{i}" for i in range(40)]
    runs = []
    for _ in range(count):
        run = {}
        for q in range(queries):
            docs = rng.sample(pool, rng.randint(5, 20))
            scores = rng.sample(range(1, 10_000), len(docs))
            run[f"q{q}"] = [ScoredDoc(f"q{q}", d, s / rng.choice([1.0, 7.0, 1000.0]) - 3) for d, s in zip(docs, scores)]
        runs.append(run)
    return runs


#: ranx's fusions run in one child process with numba's JIT off: the same ranx code, interpreted. Compiling
#: it took 51 s of the suite's first call (CI, 2026-11-26); interpreted, the few queries here take < 1 s.
RANX_SCRIPT = """
import json, sys
import ranx
out = {}
for name, case in json.load(sys.stdin).items():
    runs = [ranx.Run(run) for run in case["runs"]]
    fused = ranx.fuse(runs, norm=case["norm"], method=case["method"], params=case["params"])
    out[name] = {q: {d: float(v) for d, v in hits.items()} for q, hits in fused.to_dict().items()}
json.dump(out, sys.stdout)
"""


def as_plain(run: dict) -> dict:
    return {q: {h.doc_id: float(h.score) for h in hits} for q, hits in run.items()}


#: every fusion the tests compare with ranx: name -> (runs, norm, method, params)
RANX_CASES = {
    "wsum-2": (random_runs(2), "min-max", "wsum", {"weights": [0.3, 0.7]}),
    "wsum-3": (random_runs(3), "min-max", "wsum", {"weights": [0.2, 0.5, 0.3]}),
    "rrf-60": (random_runs(3, seed=11), None, "rrf", {"k": 60}),
    "rrf-10": (random_runs(3, seed=11), None, "rrf", {"k": 10}),
    "command": (random_runs(2, seed=3), "min-max", "wsum", {"weights": [0.25, 0.75]}),
}


@pytest.fixture(scope="module")
def ranx_fused() -> dict:
    """``name -> {query: {doc: score}}``: ranx's fusion of every :data:`RANX_CASES` entry."""
    cases = {name: {"runs": [as_plain(r) for r in runs], "norm": norm, "method": method, "params": params}
             for name, (runs, norm, method, params) in RANX_CASES.items()}
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run([sys.executable, "-c", RANX_SCRIPT], input=json.dumps(cases), capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def assert_same(ours: dict, expected: dict) -> None:
    assert set(ours) == set(expected)
    for query_id, hits in ours.items():
        got = {h.doc_id: h.score for h in hits}
        assert set(got) == set(expected[query_id]), query_id  # the union of the candidates
        assert got == pytest.approx(expected[query_id], abs=1e-9), query_id


@pytest.mark.parametrize("count", [2, 3])
def test_minmax_interpolation_equals_ranx_wsum_with_minmax_norm(count, ranx_fused):
    runs, _, _, params = RANX_CASES[f"wsum-{count}"]
    assert_same(fuse.interpolate(runs, params["weights"]), ranx_fused[f"wsum-{count}"])


@pytest.mark.parametrize("k", [60, 10])
def test_rrf_equals_ranx_rrf(k, ranx_fused):
    runs = RANX_CASES[f"rrf-{k}"][0]
    assert_same(fuse.rrf(runs, k), ranx_fused[f"rrf-{k}"])


def test_the_command_writes_what_ranx_computes(tmp_path, ranx_fused):
    runs = RANX_CASES["command"][0]
    paths = [write_run(tmp_path / f"r{i}.run", run, tag=f"r{i}") for i, run in enumerate(runs)]
    out = tmp_path / "fused.run"
    assert fuse.main([*map(str, paths), "--method", "interpolate", "--weight", "0.25", "--output", str(out)]) == 0
    written = read_run(out)
    expected = ranx_fused["command"]
    for query_id, hits in written.items():
        # written with the run writer's precision
        assert {h.doc_id: h.score for h in hits} == pytest.approx(expected[query_id], abs=1e-5)
    assert fuse.main([*map(str, paths), "--method", "rrf", "--output", str(tmp_path / "rrf.run")]) == 0
    assert len(read_run(tmp_path / "rrf.run")) == len(runs[0])


def test_tune_picks_the_weight_that_ranks_the_judged_document_first(tmp_path, capsys):
    # b is relevant on the dev queries: neither run alone puts it first, a mix of the two does
    first = {q: [ScoredDoc(q, "a", 10.0), ScoredDoc(q, "b", 8.0), ScoredDoc(q, "c", 2.0)] for q in ("1", "2", "3")}
    second = {q: [ScoredDoc(q, "a", -1.0), ScoredDoc(q, "b", 0.5), ScoredDoc(q, "c", 3.0)] for q in ("1", "2", "3")}
    paths = [write_run(tmp_path / "first.run", first), write_run(tmp_path / "second.run", second)]
    qrels = write_qrels(tmp_path / "qrels", [Qrel("1", "b", 1), Qrel("2", "b", 1), Qrel("3", "a", 1)]) or tmp_path / "qrels"
    (tmp_path / "dev.txt").write_text("1\n2\n", encoding="utf-8")
    out = tmp_path / "tuned.run"
    assert fuse.main([*map(str, paths), "--tune", "--qrels", str(qrels), "--dev-queries", str(tmp_path / "dev.txt"),
                      "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    best, value = fuse.tune([first, second], "interpolate", [Qrel("1", "b", 1), Qrel("2", "b", 1)], ["1", "2"])
    assert value == 1.0 and 0 < best[0] < 1  # only a mix ranks b first
    assert f"weights {best[0]:g} {best[1]:g}" in printed and "tuned: AP 1.0000 on 2 dev queries" in printed
    assert [h.doc_id for h in read_run(out)["1"]][0] == "b"
    k, _ = fuse.tune([first, second], "rrf", [Qrel("1", "b", 1)], ["1"])
    assert k in fuse.RRF_GRID


@pytest.mark.parametrize("args, message", [
    (["one.run", "--output", "o"], "at least two run files"),
    (["a.run", "b.run", "c.run", "--weight", "0.5", "--output", "o"], "--weight is the first run's share"),
    (["a.run", "b.run", "--weights", "1", "--output", "o"], "1 weight(s) for 2 run(s)"),
    (["a.run", "b.run", "--weight", "1.5", "--output", "o"], "in [0, 1]"),
    (["a.run", "b.run", "--tune", "--output", "o"], "--tune needs --qrels"),
    (["a.run", "b.run", "--weight", "0.2", "--tune", "--qrels", "q", "--dev-queries", "1", "--output", "o"], "not both"),
    (["a.run", "b.run", "--method", "rff", "--output", "o"], "invalid choice"),
    (["a.run", "b.run", "--output", "o"], "a.run: run file not found"),
])
def test_bad_arguments_are_one_error_line(args, message, capsys):
    assert fuse.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_console_script_and_help():
    command = Path(sys.executable).parent / "rerank-fuse"
    if not command.exists():
        pytest.skip("reinstall the project (pip install -e .) for the rerank-fuse console script")
    result = subprocess.run([str(command), "--help"], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("usage: rerank-fuse"), result.stderr
