"""docs/plugins.md's "Adding a re-ranker" and "Adding a first stage", as written there: each example file and its
entry-point lines go into a throwaway installed package, and ``python -m pipeline.run`` (a fresh process,
which reads the entry points) lists, trains, caches and runs them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, run_python, write
from tests.plugin_docs import plugin_examples as readme_examples  # the page's files and entry points


def install_package(site: Path) -> None:
    """The page's files as package ``mypkg``, installed (dist-info with entry points) into ``site``."""
    files, groups = readme_examples()
    assert {"mypkg/ranker.py", "mypkg/overlap.py"} <= set(files)
    assert set(groups) == {"neural_rerank.rerankers", "neural_rerank.first_stages"}
    for path, text in files.items():
        write(site / path, text)
    write(site / "mypkg" / "__init__.py", "")
    write(site / "mypkg-0.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    write(site / "mypkg-0.1.dist-info" / "entry_points.txt",
          "".join(f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
                  for group, entries in groups.items()))


def write_collection(folder: Path) -> Path:
    """Eight queries of two words; per query one document with both words (relevant) and three with one."""
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    topics, docs, qrels = [], [], []
    for number in range(8):
        first, second = words[number], words[(number + 4) % len(words)]
        topics.append(f"{number}\t{first} {second}\n")
        docs.append(f"{number}-0\t{second} then {first}\n")
        docs += [f"{number}-{i}\t{first} without the other {'word ' * i}\n" for i in range(1, 4)]
        qrels.append(f"{number} 0 {number}-0 1\n")
    write(folder / "topics.tsv", "".join(topics))
    write(folder / "docs.tsv", "".join(docs))
    write(folder / "qrels.txt", "".join(qrels))
    write(folder / "dataset.json", json.dumps({"format": "trec", "topics": "topics.tsv", "qrels": "qrels.txt",
                                               "docs": "docs.tsv"}))
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    install_package(site)
    return site


def test_the_readme_plugins_are_listed(site):
    result = run_python(["-m", "pipeline.run", "--help"], timeout=120, PYTHONPATH=f"{site}:{REPO}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "myranker" in result.stdout and "overlap" in result.stdout


def test_the_readme_plugins_train_and_rerank(site, tmp_path):
    collection = write_collection(tmp_path / "words")
    models, runs = tmp_path / "models", tmp_path / "runs"
    command = ["-m", "pipeline.run", "--dataset", str(collection), "--first-stage", "overlap", "--reranker",
               "myranker", "--folds", "2", "--metrics", "P@1 AP", "--output-dir", str(runs)]
    result = run_python(command, timeout=300, PYTHONPATH=f"{site}:{REPO}", PIPELINE_MODEL_DIR=models,
                        TQDM_DISABLE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list(models.rglob("myranker-fold*of2-seed42-*.pt"))) == 2  # one model per fold, cached
    alone = [line.split() for line in (runs / "words-overlap-myranker-2fold-alone.run").read_text().splitlines()]
    assert {row[0] for row in alone} == {str(n) for n in range(8)}  # every query re-ranked once (k-fold)
    assert all(row[2].endswith("-0") for row in alone if row[3] == "1")  # the two-word document first
    assert "| words-overlap-myranker-2fold-alone | 1.0000" in result.stdout  # P@1 of the re-ranker alone
    again = run_python(command, timeout=300, PYTHONPATH=f"{site}:{REPO}", PIPELINE_MODEL_DIR=models,
                       TQDM_DISABLE="1")
    assert again.returncode == 0 and again.stderr.count("loaded") == 2 and "training" not in again.stderr


def test_the_contract_tests_pass_for_the_readme_plugins(site, tmp_path):
    """Installing the page's plugins must not break the test suite: the contract tests that run every
    registered re-ranker and first stage (entry points included) pass for them, although ``MyRanker`` has
    neither ``from_options`` nor ``prepare`` nor ``score_many`` (all optional)."""
    tests = ["tests/rerankers/test_every_reranker.py", "tests/rerankers/test_batched_scoring.py",
             "tests/indexes/test_first_stage_contract.py"]
    result = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, "-k", "myranker or overlap",
                         "--rootdir", str(REPO)], timeout=600, PYTHONPATH=f"{site}:{REPO}",
                        PIPELINE_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    # the re-ranker contract (1), its batching and bf16 tests (2), the first-stage contract's two tests for the
    # entry point and for the page's code registered in process (4)
    passed = int(re.search(r"(\d+) passed", result.stdout).group(1))
    assert passed >= 7 and " failed" not in result.stdout and " error" not in result.stdout
