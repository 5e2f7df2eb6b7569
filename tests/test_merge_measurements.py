"""benchmarks/merge_measurements.py: joining per-seed beyond_zero_shot.py measurements of one protocol."""
import json
from pathlib import Path

import pytest

from helpers import load_benchmark
from pipeline.core.errors import PipelineError

merge_measurements = load_benchmark("merge_measurements")

PROTOCOL = "--dataset cranfield --reranker bi-encoder --label tuned --threads 1 --set amp=true"


def _write(path: Path, seeds: list[int], value=lambda seed: 0.3 + seed / 100, protocol: str = PROTOCOL,
           first_stage: float = 0.28, **extra) -> Path:
    command = (f"benchmarks/beyond_zero_shot.py measure {protocol} --seeds {' '.join(map(str, seeds))} "
               f"--output {path}")
    rows = {row: {"seeds": seeds, "AP": [value(s) + shift for s in seeds], "p:AP": [0.01 for _ in seeds]}
            for row, shift in (("tuned", 0.0), ("tuned+interp", 0.01), ("tuned+safe", 0.02))}
    path.write_text(json.dumps({
        "command": command, "date": "2026-11-28", "seconds": 100 * len(seeds), "loadavg_at_end": "1.00 1.00 1.00",
        "dataset": "cranfield", "split": None, "reranker": "bi-encoder", "model": None, "metric": "AP",
        "rules": {"old": "o", "safe": "s"}, "first_stage": {"AP": first_stage}, "results": rows,
        "folds": {str(s): [{"fold": 1, "seed": s}] for s in seeds},
        "per_query": {"metric": "AP", "runs": {"tuned+safe": {str(s): {"q1": value(s)} for s in seeds}}},
        **extra}))
    return path


def test_seeds_of_one_protocol_merge_in_seed_order(tmp_path):
    a = _write(tmp_path / "seed-3.json", [3])
    b = _write(tmp_path / "seeds-1-2.json", [1, 2])
    merged = merge_measurements.merge([a, b])
    assert merged["results"]["tuned+safe"]["seeds"] == [1, 2, 3]
    assert merged["results"]["tuned+safe"]["AP"] == pytest.approx([0.33, 0.34, 0.35])
    assert list(merged["folds"]) == ["1", "2", "3"]
    assert list(merged["per_query"]["runs"]["tuned+safe"]) == ["1", "2", "3"]
    assert merged["seconds"] == 300 and merged["seconds_per_command"] == [100, 200]
    assert merged["command"].count("beyond_zero_shot.py measure") == 2


def test_another_protocol_is_refused(tmp_path):
    a = _write(tmp_path / "a.json", [1])
    b = _write(tmp_path / "b.json", [2], protocol=PROTOCOL.replace("amp=true", "amp=false"))
    with pytest.raises(PipelineError, match="another protocol"):
        merge_measurements.merge([a, b])


def test_another_first_stage_is_refused(tmp_path):
    a = _write(tmp_path / "a.json", [1])
    b = _write(tmp_path / "b.json", [2], first_stage=0.29)
    with pytest.raises(PipelineError, match="first-stage"):
        merge_measurements.merge([a, b])


def test_models_trained_on_another_collection_merge_only_with_the_same_collection(tmp_path):
    """``measure --train-dataset``: the training collection is recorded and must agree (files written by hand
    could hold the same command with another training collection)."""
    a = _write(tmp_path / "a.json", [1], train_dataset="nfcorpus-dev")
    b = _write(tmp_path / "b.json", [2], train_dataset="nfcorpus-dev")
    assert merge_measurements.merge([a, b])["train_dataset"] == "nfcorpus-dev"
    c = _write(tmp_path / "c.json", [3], train_dataset="cranfield")
    with pytest.raises(PipelineError, match="train_dataset 'cranfield'"):
        merge_measurements.merge([a, c])


def test_a_seed_measured_twice_must_agree(tmp_path):
    a = _write(tmp_path / "a.json", [1, 2])
    b = _write(tmp_path / "b.json", [2], value=lambda seed: 0.5)
    with pytest.raises(PipelineError, match="seed 2"):
        merge_measurements.merge([a, b])
    same = _write(tmp_path / "c.json", [2])
    assert merge_measurements.merge([a, same])["results"]["tuned"]["seeds"] == [1, 2]


def test_an_unfinished_measurement_is_refused_with_exit_code_2(tmp_path, capsys):
    a = _write(tmp_path / "a.json", [1])
    b = _write(tmp_path / "b.json", [2, 3], partial="partial: 1 of 2 seeds")
    assert merge_measurements.main([str(a), str(b), "--output", str(tmp_path / "out.json")]) == 2
    assert "unfinished" in capsys.readouterr().err and not (tmp_path / "out.json").exists()


def test_the_command_line_writes_the_merged_file(tmp_path):
    a = _write(tmp_path / "a.json", [1])
    b = _write(tmp_path / "b.json", [2])
    assert merge_measurements.main([str(a), str(b), "--output", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["results"]["tuned"]["seeds"] == [1, 2]
