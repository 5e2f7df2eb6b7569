"""The command-line frictions of issue 35: did-you-mean hints from one helper (flags, re-rankers, first stages,
datasets, ir_datasets ids, measures), the console script's name and the defaults in ``--help``, help without
RST markup, progress bars only on a terminal and log lines that never break a bar."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.suggest import closest, flag_hint, hint, unknown_name
from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[3]


def test_closest_names_the_near_choice_and_nothing_for_unrelated_text():
    assert closest("knrn", ["knrm", "conv-knrm", "drmm"]) == "knrm"
    assert closest("KNRM", ["knrm"]) == "knrm"
    assert closest("zzzz", ["knrm", "drmm"]) is None
    assert hint("knrm", ["knrm"]) == ""  # an exact name needs no hint
    message = unknown_name("first stage", "bm52", ["bm25", "run:PATH"], ["bm25", "run:PATH", "run:PATH"])
    assert message == "unknown first stage 'bm52'; did you mean 'bm25'? choose one of bm25, run:PATH"


def test_flag_hint_names_the_flag_argparse_did_not_know():
    text = flag_hint("unrecognized arguments: --datset x --sed=3", ["--dataset", "--seed", "-h"])
    assert "--datset -> did you mean --dataset?" in text and "--sed -> did you mean --seed?" in text
    assert flag_hint("argument --k: invalid int value: 'x'", ["--k"]) == "argument --k: invalid int value: 'x'"


def run_cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          env=subprocess_env(), timeout=120)


@pytest.mark.parametrize("module", ["pipeline.run", "pipeline.train", "pipeline.evaluate", "pipeline.export",
                                    "pipeline.index", "pipeline.classify", "pipeline.fuse"])
def test_every_command_suggests_the_flag_meant(module, capsys):
    from importlib import import_module

    main = import_module(module).main
    typo, meant = {"pipeline.evaluate": ("--qrles", "--qrels"), "pipeline.fuse": ("--metrc", "--metric")}.get(
        module, ("--datset", "--dataset"))
    # a required option is missing too (evaluate's --qrels): the typo that caused it is reported first
    assert main(["a.run", typo, "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert f"{typo} -> did you mean {meant}?" in err, err


def test_run_suggests_reranker_first_stage_dataset_and_measure(capsys, tmp_path):
    from pipeline.run import main

    assert main(["--reranker", "knrn", "--output-dir", str(tmp_path)]) == 2
    assert "did you mean 'knrm'?" in capsys.readouterr().err
    assert main(["--first-stage", "bm52", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'bm25'?" in err and err.count("run:PATH") == 1, err
    assert main(["--metrics", "P@1O", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cutoff after '@' must be a whole number" in err and "did you mean 'P@10'?" in err
    assert "problem parsing measure" not in err  # ir_measures' own parser text is not the message
    assert main(["--dataset", "cranfeld", "--output-dir", str(tmp_path)]) == 2
    assert "did you mean 'cranfield'?" in capsys.readouterr().err


def test_an_ir_datasets_id_typo_gets_a_hint_and_a_missing_archive_is_named(tmp_path, monkeypatch):
    from pipeline.core.datasets import load_dataset
    from pipeline.core.datasets.irds import failed_archive

    with pytest.raises(PipelineError, match="did you mean .msmarco-passage/trec-dl-2019."):
        load_dataset("msmarco-pasage/trec-dl-2019", mirror=str(tmp_path))
    # the error requests raises when ir_datasets cannot fetch an archive (seen offline, issue 35)
    error = ConnectionError("HTTPSConnectionPool(host='msmarco.z22.web.core.windows.net', port=443): Max retries "
                            "exceeded with url: /msmarcoranking/msmarco-test2019-queries.tsv.gz (Caused by "
                            "NameResolutionError(...))")
    assert failed_archive(error) == ("https://msmarco.z22.web.core.windows.net/msmarcoranking/"
                                     "msmarco-test2019-queries.tsv.gz")


def test_an_ir_datasets_id_without_its_archive_names_the_archive(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", "msmarco-passage/trec-dl-2019",
                             "--mirror", str(tmp_path), "--output-dir", str(tmp_path)], capture_output=True,
                            text=True, cwd=ROOT, env=subprocess_env(IR_DATASETS_HOME=str(tmp_path / "irds")),
                            timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "msmarco-test2019-queries.tsv.gz" in last and "mirror" in last, last


def test_console_script_name_and_defaults_in_help():
    command = Path(sys.executable).parent / "rerank-run"
    result = subprocess.run([str(command), "--help"], capture_output=True, text=True, env=subprocess_env(),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rerank-run "), result.stdout[:200]
    text = " ".join(result.stdout.split())
    assert "random seed (same seed -> same run file) (default: 42)" in text
    assert "(default: 5)" in text  # --folds
    module = run_cli("pipeline.run", "--help")
    assert module.stdout.startswith("usage: python -m pipeline.run ")


def test_help_loads_no_torch():
    code = ("import sys, runpy; sys.argv = ['x', '--help']\n"
            "for name in ('pipeline.run', 'pipeline.train', 'pipeline.export', 'pipeline.evaluate'):\n"
            "    try:\n        runpy.run_module(name, run_name='__main__')\n    except SystemExit:\n        pass\n"
            "print('TORCH', 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env=subprocess_env(), timeout=120)
    assert result.stdout.strip().endswith("TORCH False"), result.stdout[-500:] + result.stderr[-2000:]


def test_export_help_has_no_rst_and_lists_only_exportable_rerankers():
    result = run_cli("pipeline.export", "--help")
    assert result.returncode == 0 and "``" not in result.stdout and ":class:" not in result.stdout
    text = " ".join(result.stdout.split()).replace("- ", "-")
    listed = text.split("the transformer re-ranker to export:")[1].split("(")[0]
    assert "cross-encoder" in listed and "addax" in listed and "bi-encoder" in listed
    assert "knrm" not in listed and "hcan" not in listed


def test_evaluate_help_explains_test_correction_and_alpha():
    text = " ".join(run_cli("pipeline.evaluate", "--help").stdout.split()).replace("- ", "-")
    assert "paired significance test" in text and "Holm-Bonferroni" in text and "significance level" in text
    assert "(default: ttest)" in text and "(default: holm)" in text and "(default: 0.05)" in text


PROGRESS_SCRIPT = """
import logging, time
from pipeline.core.logs import configure_logging
from pipeline.core.progress import tqdm
configure_logging()
bar = tqdm(total=4, desc="scoring", unit="query")
for i in range(4):
    time.sleep(0.15)
    bar.update(1)
    logging.getLogger("pipeline.test").info("line %d", i)
bar.close()
"""


def test_off_a_terminal_progress_is_periodic_log_lines_not_a_bar():
    result = subprocess.run([sys.executable, "-c", PROGRESS_SCRIPT], capture_output=True, text=True, cwd=ROOT,
                            env=subprocess_env(PIPELINE_PROGRESS_SECONDS="0.2"), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "|" not in result.stderr  # no bar drawn into a file
    lines = result.stderr.splitlines()
    assert result.stderr.count("INFO pipeline.progress: scoring: 100% 4/4 query") == 1  # once, not again at close
    assert 2 <= sum("pipeline.progress" in line for line in lines) <= 4  # periodic, not one per update
    assert [line for line in lines if "pipeline.test" in line] == [f"INFO pipeline.test: line {i}" for i in range(4)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal")
def test_on_a_terminal_a_log_line_never_lands_inside_the_bar():
    import fcntl
    import pty
    import struct
    import termios

    env = subprocess_env()
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-c", PROGRESS_SCRIPT], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "scoring: 100%|" in screen  # a bar is drawn on a terminal
    for i in range(4):
        # the bar is cleared (a carriage return after blanks) before each log line: never "...s]INFO"
        assert f"\rINFO pipeline.test: line {i}" in screen, screen[-1500:]
        assert f"]INFO pipeline.test: line {i}" not in screen
