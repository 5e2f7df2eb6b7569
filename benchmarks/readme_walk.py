"""Walk the README's first ten minutes literally on a fresh clone: every command of its code blocks, in order,
as a new user would type them, and report which ones work.

    python benchmarks/readme_walk.py                      # the quick commands; heavy ones listed as skipped
    python benchmarks/readme_walk.py --heavy              # every command (trains HCAN, a cross-encoder, codes)
    python benchmarks/readme_walk.py --install            # also `make install` in the clone (minutes, PyPI)

The clone is ``git clone`` of this repository's committed HEAD into a temporary folder. Without ``--install``
the repository's own ``.venv`` is linked into it (what ``make install`` would create). ``source
.venv/bin/activate`` is honoured by putting the clone's ``.venv/bin`` first on ``PATH`` for the commands after
it (and a command run before it, with a bare ``python``, is reported as the README's mistake). ``PIPELINE_HOME``
is left unset, as the README leaves it (the checkout is the home); ``PIPELINE_DATA`` is set to the data
beside this repository, since the clone's ``../shared/data`` does not exist. Placeholders (``path/to/...``)
are reported, not guessed. Results: ``benchmarks/results/readme-walk/walk.{md,json}`` with the date, the load
average and the command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "readme-walk" / "walk.md"
#: commands that train a model or an encoder for minutes: run only with --heavy
HEAVY = (re.compile(r"--reranker (hcan|cross-encoder)\b"), re.compile(r"pipeline\.index .*--kind codes"),
         re.compile(r"--first-stage codes"), re.compile(r"^make (demo|test)\b"))
PLACEHOLDER = re.compile(r"\bpath/to/\S+")


def code_blocks(readme: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, in order (language ``""`` for a bare fence)."""
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", readme, re.M | re.S)]


def steps(readme: str) -> list[tuple[str, str]]:
    """``(kind, text)``: ``shell`` for each command line of a bare or shell block (comments after ``#``
    dropped), ``python`` for a python block; tables (``| ...``) and output blocks are not commands."""
    found = []
    for language, body in code_blocks(readme):
        if language in ("python", "py"):
            found.append(("python", body))
            continue
        if language not in ("", "sh", "bash", "shell", "console"):
            continue
        for line in body.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith(("|", "#")):
                found.append(("shell", command))
    return found


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "unknown"


def run_step(kind: str, text: str, clone: Path, env: dict, timeout: int) -> dict:
    """Run one README step in ``clone``; its status, seconds and the last lines of its output."""
    started = time.perf_counter()
    argv = [env.get("WALK_PYTHON", "python"), "-c", text] if kind == "python" else ["bash", "-c", text]
    try:
        result = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=timeout)
        code, out, err = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as expired:
        code, out, err = 124, expired.stdout or "", (expired.stderr or "") + f"\n(timed out after {timeout} s)"
        out, err = (out.decode() if isinstance(out, bytes) else out), (err.decode() if isinstance(err, bytes) else err)
    tail = [line for line in (err.strip().splitlines() or out.strip().splitlines()) if line.strip()][-3:]
    return {"kind": kind, "command": text.strip(), "status": "ok" if code == 0 else f"failed ({code})",
            "seconds": round(time.perf_counter() - started, 1), "tail": tail, "stdout_tail": out.strip().splitlines()[-4:]}


def walk(args) -> dict:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    work = Path(tempfile.mkdtemp(prefix="readme-walk-"))
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_HOME", "VIRTUAL_ENV"))}
    env["PIPELINE_DATA"] = str(args.data)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("PYTHONPATH", None)
    # a user's shell before `source .venv/bin/activate`: python3.11 is there, the project's python is not
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    records = []
    activated = False
    for kind, text in steps(readme):
        if kind == "shell" and text.startswith("make install"):
            if args.install:
                record = run_step(kind, text, clone, env, args.timeout)
                record["note"] = "output lines while installing: see stdout_tail (pip -q prints nothing for minutes)"
            else:
                (clone / ".venv").symlink_to(REPO / ".venv")
                record = {"kind": kind, "command": text, "status": "skipped (linked the repository's .venv)",
                          "seconds": 0, "tail": []}
            records.append(record)
            continue
        if kind == "shell" and text.startswith("source ") and "activate" in text:
            activated = True
            env = {**env, "VIRTUAL_ENV": str(clone / ".venv"), "PATH": f"{clone / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"}
            env["WALK_PYTHON"] = str(clone / ".venv" / "bin" / "python")
            records.append({"kind": kind, "command": text, "status": "ok (PATH)", "seconds": 0, "tail": []})
            continue
        placeholder = PLACEHOLDER.search(text)
        if placeholder and not args.collection:
            records.append({"kind": kind, "command": text, "status": f"placeholder {placeholder.group(0)!r}",
                            "seconds": 0, "tail": ["the README gives no real path to type (a shipped example "
                                                   "would run as written)"]})
            continue
        if placeholder:
            text = text.replace(placeholder.group(0), shlex.quote(str(args.collection)))
        if any(pattern.search(text) for pattern in HEAVY) and not args.heavy:
            records.append({"kind": kind, "command": text, "status": "skipped (heavy: --heavy runs it)",
                            "seconds": 0, "tail": []})
            continue
        if not activated and kind == "shell" and re.match(r"python\b", text):
            records.append({"kind": kind, "command": text, "status": "failed (no venv active)", "seconds": 0,
                            "tail": ["the README runs python before saying `source .venv/bin/activate`"]})
            continue
        print(f"$ {text[:120]}", file=sys.stderr, flush=True)
        records.append(run_step(kind, text, clone, env, args.timeout))
        print(f"  -> {records[-1]['status']} in {records[-1]['seconds']} s", file=sys.stderr, flush=True)
    runs = sorted(p.name for p in (clone / "runs").glob("*.run")) if (clone / "runs").is_dir() else []
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average": load_average(), "command": " ".join(["python", *sys.argv]),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip(),
            "steps": records, "runs_written": runs}


def markdown(report: dict) -> str:
    lines = [f"# README walk ({report['date']}, commit {report['commit']}, load {report['load_average']})", "",
             f"Command: `{report['command']}`", "", "| # | command | status | s | last output |", "|---|---|---|---|---|"]
    for number, step in enumerate(report["steps"], 1):
        shown = step["command"].replace("\n", " ; ")[:110].replace("|", "\\|")
        tail = " / ".join(step.get("tail", []))[-220:].replace("|", "\\|")
        lines.append(f"| {number} | `{shown}` | {step['status']} | {step['seconds']} | {tail} |")
    lines += ["", f"Runs written under the clone's runs/: {', '.join(report['runs_written']) or 'none'}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heavy", action="store_true", help="also run the commands that train for minutes")
    parser.add_argument("--install", action="store_true", help="run `make install` in the clone (else link .venv)")
    parser.add_argument("--collection", type=Path, help="a folder to type for the README's path/to/collection")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="PIPELINE_DATA")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per command")
    parser.add_argument("--keep", action="store_true", help="keep the clone")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    report = walk(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(report), encoding="utf-8")
    args.output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(markdown(report))
    return 0 if all(not s["status"].startswith("failed") for s in report["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
