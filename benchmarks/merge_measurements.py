"""Merge the result files of several ``beyond_zero_shot.py measure`` runs of one protocol into one file.

    python benchmarks/merge_measurements.py /tmp/cranfield-seed1.json /tmp/cranfield-seed2.json \\
        /tmp/cranfield-seed3.json --output /tmp/cranfield-3-seeds.json

A measurement that trains a model per fold and seed takes about an hour per seed on one thread; it is run as
one process per seed (one per core) and the files joined here. ``merge_results.py`` does the same for
``reproduce.py``'s files; these have another layout (every fold's weights and the per-query values the paired
tests against other pipelines need), so they get their own merge. It refuses what does not belong together:

* the commands must be the same but for ``--seeds``, ``--output`` and ``--score-cache`` (where a given model's
  scores are kept: it changes no number);
* the dataset, split, re-ranker, model, training collection, main metric, weight rules and first-stage scores
  must agree;
* a seed measured twice must have the same values (the same seed trains the same model), and is kept once;
* a file a run left unfinished (``partial``) is refused.

The merged file lists the commands it came from (``" ; "``-joined, as the matrix of BENCHMARKS.md shows them),
their seconds, and the latest date.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline.core.errors import PipelineError  # noqa: E402

#: command options that may differ between runs of one protocol (each takes one value, ``--seeds`` several)
RUN_ONLY_OPTIONS = {"--seeds", "--output", "--score-cache"}
#: fields every file must agree on
SAME_FIELDS = ("dataset", "split", "reranker", "model", "train_dataset", "metric", "rules")
TOLERANCE = 1e-9


def protocol_of(command: str) -> list[str]:
    """``command``'s words without the options that only say which seeds ran and where they were written."""
    words, kept, skipping = shlex.split(command), [], False
    for word in words:
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            skipping = name in RUN_ONLY_OPTIONS and "=" not in word
            if name in RUN_ONLY_OPTIONS:
                continue
        elif skipping:
            continue
        kept.append(word)
    return kept


def _close(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=TOLERANCE)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def merge(paths: list[Path]) -> dict:
    """The measurement files at ``paths`` joined by seed.

    Args:
        paths: ``beyond_zero_shot.py measure`` result files of one protocol.

    Returns:
        One result file's content with every seed, sorted.

    Raises:
        PipelineError: a file is unfinished, or the files are not of one protocol, or disagree on a seed.
    """
    files = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise PipelineError(f"{path}: not a readable result file ({error})") from None
        if data.get("partial"):
            raise PipelineError(f"{path}: an unfinished measurement ({data['partial']}); finish it first")
        for key in ("command", "results", "folds", "first_stage", "per_query"):
            if key not in data:
                raise PipelineError(f"{path}: no {key!r}: not a beyond_zero_shot.py measure result file")
        files.append((Path(path), data))
    first_path, first = files[0]
    for path, data in files[1:]:
        if protocol_of(data["command"]) != protocol_of(first["command"]):
            raise PipelineError(f"{path}: another protocol than {first_path}:\n  {data['command']}\n  {first['command']}")
        for field in SAME_FIELDS:
            if data.get(field) != first.get(field):
                raise PipelineError(f"{path}: {field} {data.get(field)!r}, {first_path} has {first.get(field)!r}")
        if not _close(data["first_stage"], first["first_stage"]):
            raise PipelineError(f"{path}: first-stage scores differ from {first_path}'s")
        if data["per_query"].get("metric") != first["per_query"].get("metric"):
            raise PipelineError(f"{path}: per-query metric differs from {first_path}'s")

    by_seed: dict[int, tuple[Path, dict]] = {}   # seed -> (file, {row: {measure: value}})
    rows: list[str] = []
    for path, data in files:
        for row, values in data["results"].items():
            if row not in rows:
                rows.append(row)
            for index, seed in enumerate(values["seeds"]):
                measured = {name: series[index] for name, series in values.items() if name != "seeds"}
                seen = by_seed.setdefault(seed, (path, {}))
                if row in seen[1] and seen[0] != path and not _close(seen[1][row], measured):
                    raise PipelineError(f"{path}: seed {seed} of {row!r} differs from {seen[0]}'s")
                seen[1].setdefault(row, measured)
    seeds = sorted(by_seed)
    results = {}
    for row in rows:
        present = [seed for seed in seeds if row in by_seed[seed][1]]
        names = list(by_seed[present[0]][1][row])
        results[row] = {"seeds": present, **{name: [by_seed[s][1][row][name] for s in present] for name in names}}
    folds, runs = {}, {}
    for _, data in files:
        for seed, value in data["folds"].items():
            folds.setdefault(seed, value)
        for row, per_seed in data["per_query"]["runs"].items():
            for seed, values in per_seed.items():
                runs.setdefault(row, {}).setdefault(seed, values)
    merged = {key: value for key, value in first.items() if key not in ("partial",)}
    merged.update({
        "command": " ; ".join(data["command"] for _, data in files),
        "date": max(data["date"] for _, data in files),
        "seconds": sum(data["seconds"] for _, data in files),
        "seconds_per_command": [data["seconds"] for _, data in files],
        "loadavg_at_end": files[-1][1]["loadavg_at_end"],
        "results": results,
        "folds": {seed: folds[seed] for seed in sorted(folds, key=int)},
        "per_query": {"metric": first["per_query"]["metric"],
                      "runs": {row: {s: v[s] for s in sorted(v, key=int)} for row, v in runs.items()}},
        "merged_note": f"seeds {', '.join(map(str, seeds))} measured by {len(files)} invocations of one protocol, "
                       f"merged by benchmarks/merge_measurements.py",
    })
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        merged = merge(args.files)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from safe_combination_measure import write_json

    write_json(args.output, merged)
    print(f"wrote {args.output}: seeds {merged['results'][next(iter(merged['results']))]['seeds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
