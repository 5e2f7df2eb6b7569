"""benchmarks/merge_results.py: joining per-seed result files of one protocol, refusing mixed ones."""
import json
from pathlib import Path

import pytest

from helpers import load_benchmark
from pipeline.core.errors import PipelineError

merge_results = load_benchmark("merge_results")

PROTOCOL = "--dataset wikiqa --split test --metrics P@1 RR --threads 1 --set epochs=2 --k 100"


def _write(path: Path, rerankers: str, seeds: str, rows: dict, protocol: str = PROTOCOL,
           first_stage=None) -> Path:
    command = f"benchmarks/reproduce.py {protocol} {rerankers} --seeds {seeds} --output {path.with_suffix('.md')}"
    path.write_text(json.dumps({"command": command, "first_stage": first_stage or {"P@1": 0.5, "RR": 0.6},
                                "results": rows}))
    return path


def test_runs_of_one_protocol_merge_by_seed(tmp_path):
    a = _write(tmp_path / "a.json", "--reranker knrm --reranker drmm", "1 3",
               {"knrm": {"seeds": [1, 3], "P@1": [0.1, 0.3], "RR": [0.2, 0.4]},
                "drmm": {"seeds": [1, 3], "P@1": [0.5, 0.7], "RR": [0.6, 0.8]}})
    b = _write(tmp_path / "b.json", "--reranker knrm", "2 3",
               {"knrm": {"seeds": [2, 3], "P@1": [0.2, 0.3], "RR": [0.3, 0.4]}})
    baseline, results, commands = merge_results.merge([a, b])
    assert baseline == {"P@1": 0.5, "RR": 0.6}
    assert list(results) == ["knrm", "drmm"]
    assert results["knrm"] == {"seeds": [1, 2, 3], "P@1": [0.1, 0.2, 0.3], "RR": [0.2, 0.3, 0.4]}
    assert len(commands) == 2

    out = tmp_path / "merged.md"
    merge_results.main([str(a), str(b), "--output", str(out)])
    table = out.read_text()
    assert "| knrm | 0.2000 ± 0.1000 | 0.3000 ± 0.1000 |" in table
    assert json.loads(out.with_suffix(".json").read_text())["results"]["drmm"]["seeds"] == [1, 3]


def test_a_seed_measured_twice_must_agree(tmp_path):
    a = _write(tmp_path / "a.json", "--reranker knrm", "1", {"knrm": {"seeds": [1], "P@1": [0.1], "RR": [0.2]}})
    b = _write(tmp_path / "b.json", "--reranker knrm", "1", {"knrm": {"seeds": [1], "P@1": [0.15], "RR": [0.2]}})
    with pytest.raises(PipelineError, match="knrm seed 1"):
        merge_results.merge([a, b])


def test_different_protocols_are_refused(tmp_path):
    a = _write(tmp_path / "a.json", "--reranker knrm", "1", {"knrm": {"seeds": [1], "P@1": [0.1], "RR": [0.2]}})
    b = _write(tmp_path / "b.json", "--reranker knrm", "2", {"knrm": {"seeds": [2], "P@1": [0.1], "RR": [0.2]}},
               protocol=PROTOCOL.replace("epochs=2", "epochs=3"))
    with pytest.raises(PipelineError, match="protocol differs.*set"):
        merge_results.merge([a, b])
    c = _write(tmp_path / "c.json", "--reranker knrm", "2", {"knrm": {"seeds": [2], "P@1": [0.1], "RR": [0.2]}},
               first_stage={"P@1": 0.5, "RR": 0.61})
    with pytest.raises(PipelineError, match="first-stage scores"):
        merge_results.merge([a, c])


def test_quoted_and_unquoted_metrics_are_the_same_protocol(tmp_path):
    a = _write(tmp_path / "a.json", "--reranker knrm", "1", {"knrm": {"seeds": [1], "P@1": [0.1], "RR": [0.2]}})
    b = _write(tmp_path / "b.json", "--reranker knrm", "2", {"knrm": {"seeds": [2], "P@1": [0.1], "RR": [0.2]}},
               protocol=PROTOCOL.replace("--metrics P@1 RR", "--metrics 'P@1 RR'"))
    _, results, _ = merge_results.merge([a, b])
    assert results["knrm"]["seeds"] == [1, 2]


def test_older_files_with_one_top_level_seeds_list_are_read(tmp_path):
    old = _write(tmp_path / "old.json", "--reranker knrm", "1", {"knrm": {"P@1": [0.1], "RR": [0.2]}})
    data = json.loads(old.read_text())
    data["seeds"] = [1]
    old.write_text(json.dumps(data))
    new = _write(tmp_path / "new.json", "--reranker knrm", "2", {"knrm": {"seeds": [2], "P@1": [0.3], "RR": [0.4]}})
    _, results, _ = merge_results.merge([old, new])
    assert results["knrm"] == {"seeds": [1, 2], "P@1": [0.1, 0.3], "RR": [0.2, 0.4]}


def test_files_without_seeds_are_refused(tmp_path):
    old = _write(tmp_path / "old.json", "--reranker knrm", "1", {"knrm": {"P@1": [0.1], "RR": [0.2]}})
    with pytest.raises(PipelineError, match="no 'seeds' list"):
        merge_results.merge([old])
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(PipelineError, match="broken.json"):
        merge_results.merge([broken])


def test_runs_without_metrics_use_the_recipe_and_merge(tmp_path):
    # reproduce.py without --metrics evaluates the dataset recipe's metrics; such files merge too
    protocol = PROTOCOL.replace(" --metrics P@1 RR", "")
    a = _write(tmp_path / "a.json", "--reranker knrm", "1", {"knrm": {"seeds": [1], "P@1": [0.1], "RR": [0.2]}},
               protocol=protocol)
    b = _write(tmp_path / "b.json", "--reranker knrm", "2", {"knrm": {"seeds": [2], "P@1": [0.3], "RR": [0.2]}},
               protocol=protocol)
    _, results, _ = merge_results.merge([a, b])
    assert results["knrm"]["P@1"] == [0.1, 0.3]
    c = _write(tmp_path / "c.json", "--reranker knrm", "3", {"knrm": {"seeds": [3], "P@1": [0.1], "RR": [0.2]}})
    with pytest.raises(PipelineError, match="protocol differs.*metrics"):
        merge_results.merge([a, c])
