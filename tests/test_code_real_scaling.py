"""benchmarks/code_real_scaling*.py: the published scaling report is what its steps' recorded JSON renders to,
and the helpers of the steps (the shard prefix of a size, the cache watcher of ``simulate``) do what they say."""
import json
import os
import shlex
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import load_benchmark

load_benchmark("code_real_scaling")  # puts benchmarks/ on sys.path for the step modules
import code_real_scaling_build as build  # noqa: E402
from code_real_scaling_common import measure_file  # noqa: E402
import code_real_scaling_measure as measure  # noqa: E402
import code_real_scaling_report as report  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "codes"


def vectors_of(command: str) -> int:
    """The ``--vectors`` size a recorded step command asked for (0, every shard, when it gave none)."""
    step = shlex.split(command)
    return int(step[step.index("--vectors") + 1]) if "--vectors" in step else 0


def recorded_work(folder: Path) -> tuple[dict, str]:
    """A work folder holding the JSON of every step recorded in ``real-scaling.json``, named as the steps name
    them; returns the recorded report and the work folder the steps ran in."""
    recorded = json.loads((RESULTS / "real-scaling.json").read_text())
    argv = shlex.split(recorded["command"])
    ran_in = argv[argv.index("--work") + 1]

    def dump(name: str, value) -> None:
        (folder / name).write_text(json.dumps(value))

    dump("union.json", recorded["union"])
    dump("estimate.json", recorded["estimate"])
    dump("simulate.json", recorded["simulate"])
    if recorded["cut"]:
        dump("cut.json", recorded["cut"])
    for growth in recorded["growths"]:
        dump(f"grow-{growth['shards']}.json", growth)
    for build_facts in recorded["later_builds"]:
        step = shlex.split(build_facts["runner"])
        dump(step[step.index("--simulate") + 1], build_facts)
    for size in recorded["sizes"]:
        dump(measure_file(folder, vectors_of(size["command"])).name, size)
    return recorded, ran_in


def test_published_report_is_what_the_recorded_steps_render_to(tmp_path):
    recorded, ran_in = recorded_work(tmp_path)
    text, data = report.render(tmp_path, recorded["command"])
    published = (RESULTS / "real-scaling.md").read_text().rstrip("\n").splitlines()
    rendered = text.replace(str(tmp_path), ran_in).splitlines()
    assert rendered[0].split(" (")[0] == published[0].split(" (")[0]  # the title; its date and machine are today's
    assert rendered[1:] == published[1:]
    for key in ("union", "estimate", "simulate", "cut", "later_builds", "sizes", "growths"):
        assert data[key] == recorded[key], key


def test_step_commands_follow_the_order_the_steps_ran(tmp_path):
    recorded, _ = recorded_work(tmp_path)
    commands = report.step_commands(tmp_path)
    steps = [shlex.split(command)[2] for command in commands]
    # the interrupted first build is listed before the cut that followed it; growths and rebuilds by date
    assert steps[:5] == ["union", "estimate", "simulate", "cut", "simulate"]
    assert "stopped when the time ran out" in commands[2]
    assert steps[5:9] == ["grow", "simulate", "grow", "simulate"]
    assert steps[9:] == ["measure"] * len(recorded["sizes"])


def write_shard(path: Path, lengths: list[int]) -> None:
    vectors = np.zeros((sum(lengths), 64), dtype=np.uint8)
    np.savez(path, vectors=vectors, lengths=np.array(lengths), doc_ids=np.array([f"d{i}" for i in range(len(lengths))]))


@pytest.mark.parametrize("vectors, expected", [(0, 3), (1, 1), (10, 1), (11, 2), (25, 2), (26, 3), (10**6, 3)])
def test_shard_prefix_is_the_first_shards_holding_the_size(tmp_path, vectors, expected):
    shards = []
    for number, lengths in enumerate([[4, 6], [15], [3, 3, 3]]):  # 10, 25, 34 vectors in all
        shards.append(tmp_path / f"shard-{number:05d}.npz")
        write_shard(shards[-1], lengths)
    assert measure.shard_prefix(shards, vectors) == shards[:expected]


def test_stage_watcher_sees_each_stage_and_keeps_the_shards(tmp_path):
    root, keep = tmp_path / "codes", tmp_path / "keep"
    keep.mkdir()
    started = time.perf_counter()
    watcher = build.StageWatcher(root, keep, started)
    old = root / "union-codes-old"  # an earlier build's index: not this build's
    old.mkdir(parents=True)
    (old / "code-index.json").write_text("{}")
    past = time.time() - 3600
    os.utime(old / "code-index.json", (past, past))
    shards = root / ".union-codes-new.shards"
    (shards / "ivf-blocks").mkdir(parents=True)
    write_shard(shards / "shard-00000.npz", [2])
    watcher.poll()
    assert {"shards_folder", "shard/shard-00000.npz"} <= set(watcher.seen)
    assert "index" not in watcher.seen and "trained" not in watcher.seen
    assert (keep / "shard-00000.npz").samefile(shards / "shard-00000.npz")
    (shards / "ivf-blocks" / "trained.index").write_bytes(b"q")
    (shards / "ivf-blocks" / "rank0.index").write_bytes(b"b")
    new = root / "union-codes-new"
    new.mkdir()
    (new / "code-index.json").write_text("{}")
    (shards / "shard-00000.npz").unlink()  # the build deletes its shards when done: the kept link stays
    watcher.poll()
    assert {"trained", "block/rank0.index", "index"} <= set(watcher.seen)
    assert watcher.seen["index_path"] == str(new)
    assert (keep / "shard-00000.npz").is_file()
    first = dict(watcher.seen)
    watcher.poll()
    assert watcher.seen == first  # a stage's time is when it was first seen


def test_published_storage_report_is_what_its_recorded_steps_render_to(tmp_path):
    storage = load_benchmark("code_ivf_storage")
    recorded = json.loads((RESULTS / "ivf-storage.json").read_text())
    for size in recorded["sizes"]:
        folder = storage.size_folder(tmp_path, vectors_of(size["build"]["command"]))
        folder.mkdir(parents=True)
        for name, facts in size.items():
            (folder / f"{name}.json").write_text(json.dumps(facts))
    text, data = storage.render(tmp_path, recorded["command"])
    published = (RESULTS / "ivf-storage.md").read_text().rstrip("\n").splitlines()
    rendered = text.splitlines()
    assert rendered[0].split(" (")[0] == published[0].split(" (")[0]
    assert rendered[1:] == published[1:]
    assert data["sizes"] == recorded["sizes"]
