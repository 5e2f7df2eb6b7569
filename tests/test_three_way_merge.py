"""benchmarks/three_way_combination.py --merge: seeds measured in separate processes, put into one result file."""
import json
from pathlib import Path

import pytest

from helpers import load_benchmark

three_way = load_benchmark("three_way_combination")


def _part(path: Path, seeds: list[int], partial: bool = False, model: str = "drmm") -> Path:
    data = {"command": f"benchmarks/three_way_combination.py --seeds {' '.join(map(str, seeds))}",
            "date": "2026-11-26", "seconds": 10 * len(seeds), "loadavg_at_end": "1.00 1.00 1.00",
            "dataset": "dl", "split": "2019", "seed_model": model, "zero_shot": "all-MiniLM-L6-v2",
            "metric": "nDCG@10", "seeds": seeds, "two_way": [0.6 + s / 100 for s in seeds],
            "three_way": [0.61 + s / 100 for s in seeds], "p_three_vs_two": [0.01 * s for s in seeds],
            "first_stage": [0.5 for _ in seeds],
            "folds": {str(s): [{"fold": "only", "seed_model": {"weight_of_two_way": 1.0}}] for s in seeds},
            "per_query": {name: {str(s): {"q1": s / 10} for s in seeds}
                          for name in ("two_way", "three_way", "first_stage")}}
    if partial:
        data["partial"] = f"{len(seeds)} of 3 seeds"
    path.write_text(json.dumps(data))
    return path


def test_parts_merge_in_seed_order_and_a_stopped_run_counts_with_its_finished_seeds(tmp_path):
    out = tmp_path / "merged.json"
    three_way.main(["--merge", str(_part(tmp_path / "b.json", [3, 2])), str(_part(tmp_path / "a.json", [1], True)),
                    "--output", str(out)])
    merged = json.loads(out.read_text())
    assert merged["seeds"] == [1, 2, 3] and "partial" not in merged
    assert merged["two_way"] == pytest.approx([0.61, 0.62, 0.63])
    assert merged["p_three_vs_two"] == pytest.approx([0.01, 0.02, 0.03])
    assert merged["mean"]["three_way"] == pytest.approx(0.63)
    assert set(merged["folds"]) == set(merged["per_query"]["three_way"]) == {"1", "2", "3"}
    assert merged["seconds"] == 30 and merged["command"].count(" ; ") == 1


def test_overlapping_seeds_or_another_measurement_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="more than one file"):
        three_way.main(["--merge", str(_part(tmp_path / "a.json", [1, 2])), str(_part(tmp_path / "b.json", [2])),
                        "--output", str(tmp_path / "m.json")])
    with pytest.raises(SystemExit, match="not the same measurement"):
        three_way.main(["--merge", str(_part(tmp_path / "a.json", [1])),
                        str(_part(tmp_path / "b.json", [2], model="knrm")), "--output", str(tmp_path / "m.json")])
    assert not (tmp_path / "m.json").exists()


def test_a_measurement_needs_an_output_file_unless_it_only_trains(capsys):
    with pytest.raises(SystemExit) as stopped:
        three_way.main(["--dataset", "vaswani", "--reranker", "knrm"])
    assert stopped.value.code == 2 and "--output is required" in capsys.readouterr().err
