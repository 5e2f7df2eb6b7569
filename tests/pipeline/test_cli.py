"""The command lines: python -m pipeline.run / pipeline.evaluate / pipeline.index (run as subprocesses)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_python, write

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def irds_home(tmp_path_factory):
    return tmp_path_factory.mktemp("irds-home")


@pytest.fixture(scope="module")
def cranfield_runs(tmp_path_factory, irds_home, data_root):
    """``python -m pipeline.run --dataset cranfield`` twice with the same seed; the second run rebuilds the
    index in a fresh index directory, so everything is computed again."""
    out = tmp_path_factory.mktemp("cli-runs")
    results = []
    for attempt in ("first", "second"):
        index_dir = tmp_path_factory.mktemp(f"cli-index-{attempt}")
        result = run_python(
            ["-m", "pipeline.run", "--dataset", "cranfield", "--output-dir", str(out / attempt), "--seed", "13"],
            timeout=400, IR_DATASETS_HOME=irds_home, PIPELINE_INDEX_DIR=index_dir, PIPELINE_MIRROR=data_root,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        results.append((out / attempt, result, index_dir))
    return results


@pytest.mark.slow
def test_run_cranfield_writes_a_run_and_prints_the_table(cranfield_runs, irds_home):
    out, result, index_dir = cranfield_runs[0]
    run_file = out / "cranfield-bm25.run"
    assert f"run: {run_file}" in result.stdout
    rows = [line.split() for line in run_file.read_text().splitlines()]
    per_query = Counter(row[0] for row in rows)
    assert len(per_query) == 225 and max(per_query.values()) <= 1000
    assert all(len(row) == 6 and row[5] == "cranfield-bm25" for row in rows)
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert table[0].split("|")[2].strip() == "AP"
    ap = float(table[2].split("|")[2])
    assert table[2].startswith("| cranfield-bm25 |") and 0.2 < ap < 0.4
    assert (out / "cranfield-bm25.eval.md").is_file() and (out / "cranfield-bm25.eval.json").is_file()
    assert (irds_home / "cranfield" / "cran.tar.gz").is_file()  # the archive came from the mirror
    assert len(os.listdir(index_dir)) == 1  # one finished index, no temp directories


@pytest.mark.slow
def test_same_seed_gives_byte_identical_runs(cranfield_runs):
    (first, _, _), (second, _, _) = cranfield_runs
    a, b = (first / "cranfield-bm25.run").read_bytes(), (second / "cranfield-bm25.run").read_bytes()
    assert len(a) > 100_000 and a == b


def test_evaluate_cli_reports_a_malformed_run_without_traceback(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "1 0 d1 1\n1 0 d2 0\n")
    run = write(tmp_path / "bad.run", "1 Q0 d1 1 2.0 t\n1 Q0 d2 2 1.0 t\n1 Q0 d3 3 lots t\n")
    result = run_python(["-m", "pipeline.evaluate", str(run), "--qrels", str(qrels)], timeout=120)
    assert result.returncode == 2
    assert f"{run}:3:" in result.stderr and "score 'lots' is not a number" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_evaluate_cli_with_baseline_writes_reports(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "".join(f"{q} 0 d{q}a 1\n{q} 0 d{q}b 0\n" for q in range(1, 6)))
    write(tmp_path / "base.run", "".join(f"{q} Q0 d{q}b 1 2 b\n{q} Q0 d{q}a 2 1 b\n" for q in range(1, 6)))
    write(tmp_path / "good.run", "".join(f"{q} Q0 d{q}a 1 2 g\n{q} Q0 d{q}b 2 1 g\n" for q in range(1, 6)))
    result = run_python(
        ["-m", "pipeline.evaluate", str(tmp_path / "base.run"), str(tmp_path / "good.run"), "--qrels",
         str(tmp_path / "qrels.txt"), "--baseline", str(tmp_path / "base.run"), "--metrics", "AP P@1",
         "--output-dir", str(tmp_path / "eval")],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| base (baseline) | 0.5000 | 0.0000 |" in result.stdout
    assert "| good | 1.0000" in result.stdout
    assert sorted(os.listdir(tmp_path / "eval")) == ["evaluation.json", "evaluation.md", "evaluation.png"]


@pytest.mark.slow
def test_evaluate_cli_checks_run_ids_against_the_dataset(tmp_path, data_root):
    run = write(tmp_path / "r.run", "1 Q0 1 1 2.0 t\n1 Q0 999999 2 1.0 t\n")
    result = run_python(["-m", "pipeline.evaluate", str(run), "--dataset", "vaswani-npl"], timeout=120)
    assert result.returncode == 2
    assert f"{run}:2: unknown doc id '999999'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_index_cli_prints_the_index_path(tmp_path, data_root):
    result = run_python(["-m", "pipeline.index", "--dataset", "vaswani-npl"], timeout=300, PIPELINE_INDEX_DIR=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = Path(result.stdout.split()[0])
    assert printed.parent == tmp_path and printed.name.startswith("vaswani-npl-porter-stop-")
    assert (printed / "pipeline-index.json").is_file() and (printed / "lucene").is_dir()
    assert "(11429 documents" in result.stdout
    assert os.listdir(tmp_path) == [printed.name]


def test_index_cli_unknown_dataset_exits_2(tmp_path):
    result = run_python(["-m", "pipeline.index", "--dataset", "no-such-collection"], timeout=120,
                        PIPELINE_INDEX_DIR=tmp_path, IR_DATASETS_HOME=tmp_path / "irds")
    assert result.returncode == 2
    assert "error: unknown dataset 'no-such-collection'" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name != "irds"] == []  # no index, no temp directory


def test_run_cli_lists_the_registered_rerankers_and_rejects_unknown_ones(tmp_path, capsys):
    from pipeline.run import build_parser, main
    from rerankers import available

    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "reranker")
    assert all(name in action.help for name in available()) and action.default == "none"
    assert parser.parse_args([]).reranker == "none"
    # names come from the registry (plugins included), so an unknown one is a clean error, not argparse's
    assert main(["--reranker", "no-such-reranker", "--output-dir", str(tmp_path)]) == 2
    assert "unknown re-ranker 'no-such-reranker'; choose one of none, " in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_run_cli_unknown_split_exits_2(tmp_path, data_root):
    result = run_python(["-m", "pipeline.run", "--dataset", "wikiqa", "--split", "nope", "--output-dir", str(tmp_path)],
                        timeout=120)
    assert result.returncode == 2
    assert "no split 'nope'" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_run_cli_negative_rerank_depth_exits_2_before_any_work(tmp_path, data_root):
    result = run_python(["-m", "pipeline.run", "--dataset", "wikiqa", "--reranker", "knrm", "--rerank-depth", "-1",
                         "--output-dir", str(tmp_path)], timeout=120, PIPELINE_MODEL_DIR=tmp_path / "models")
    assert result.returncode == 2
    assert "--rerank-depth must be at least 0, got -1" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_evaluate_cli_bad_options_are_one_error_line(tmp_path, capsys):
    from pipeline.evaluate import main

    run = write(tmp_path / "a.run", "1 Q0 d1 1 2.0 t\n")
    qrels = write(tmp_path / "qrels.txt", "1 0 d1 1\n")
    for argv, message in [([str(run), "--qrels", str(qrels), "--test", "bogus"], "argument --test: invalid choice"),
                          ([str(run)], "one of the arguments --qrels --dataset is required"),
                          ([str(run), "--qrels", str(qrels), "--metrics", "AP Bogus@3"], "unknown measure 'Bogus@3'")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_every_step_is_a_console_command():
    import tomllib
    from importlib import import_module, metadata

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert set(scripts) == {"rerank-run", "rerank-train", "rerank-index", "rerank-evaluate", "rerank-serve",
                            "rerank-export", "rerank-classify", "rerank-fuse", "rerank-verify"}
    installed = {point.name: point.value for point in metadata.entry_points(group="console_scripts")}
    for name, target in scripts.items():
        module, function = target.split(":")
        assert callable(getattr(import_module(module), function))
        assert installed.get(name) == target, f"{name}: reinstall the project (pip install -e .)"
        command = Path(sys.executable).parent / name
        result = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-2000:]


def test_index_flags_are_the_code_options_fields(capsys):
    import dataclasses

    from indexes.codes import CodeOptions
    from pipeline.index import main

    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    derived = [option for option in dataclasses.fields(CodeOptions) if option.metadata["cli"]]
    assert len(derived) > 25
    for option in derived:
        assert f"--{option.name.replace('_', '-')} " in help_text, option.name
    assert "--progress" not in help_text  # cli=False: the command decides
    assert main(["--kind", "codes", "--dim", "many"]) == 2
    assert "argument --dim: invalid int value: 'many'" in capsys.readouterr().err
    assert main(["--kind", "codes", "--hash-head", "xyz", "--dataset", "no-such-dataset"]) == 2
    assert "unknown hash head 'xyz'" in capsys.readouterr().err  # options before the dataset


def test_evaluate_cli_same_file_names_trec_eval_metrics_and_names(tmp_path):
    qrels = write(tmp_path / "qrels.txt", "".join(f"{q} 0 d{q}a 1\n{q} 0 d{q}b 0\n" for q in range(1, 6)))
    base = write(tmp_path / "bm25" / "test.run", "".join(f"{q} Q0 d{q}b 1 2 b\n{q} Q0 d{q}a 2 1 b\n" for q in range(1, 6)))
    good = write(tmp_path / "knrm" / "test.run", "".join(f"{q} Q0 d{q}a 1 2 g\n{q} Q0 d{q}b 2 1 g\n" for q in range(1, 6)))
    result = run_python(
        ["-m", "pipeline.evaluate", str(base), str(good), "--qrels", str(qrels), "--baseline", str(base),
         "--metrics", "map P.1 ndcg_cut_10", "--output-dir", str(tmp_path / "eval")],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| run | AP | P@1 | nDCG@10 |" in result.stdout
    assert "| bm25/test (baseline) | 0.5000 | 0.0000 |" in result.stdout and "| knrm/test | 1.0000" in result.stdout
    assert sorted(os.listdir(tmp_path / "eval")) == ["evaluation.json", "evaluation.md", "evaluation.png"]

    result = run_python(["-m", "pipeline.evaluate", str(base), str(good), "--qrels", str(qrels), "--names", "BM25", "BM25"],
                        timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "error: --names 'BM25' is given twice; each run needs its own name\n"


#: an expected fault for every console command (input that is not there) and what its one error line says
EXPECTED_FAULTS = {
    "rerank-run": (["--dataset", "{missing}/collection"], "unknown dataset"),
    "rerank-train": (["--dataset", "{missing}/collection", "--reranker", "knrm"], "unknown dataset"),
    "rerank-index": (["--dataset", "{missing}/collection"], "unknown dataset"),
    "rerank-evaluate": (["{missing}/a.run", "--qrels", "{missing}/qrels.txt"], "qrels.txt: file not found"),
    "rerank-serve": (["--checkpoint", "{missing}/model.pt"], "model.pt: no such file"),
    "rerank-export": (["--checkpoint", "{missing}/model.pt", "--output", "{missing}/out"], "checkpoint not found"),
    "rerank-classify": (["--dataset", "{missing}/pairs", "--reranker", "knrm"], "unknown dataset"),
    "rerank-fuse": (["{missing}/a.run", "{missing}/b.run", "--output", "{missing}/f.run"], "run file not found"),
    "rerank-verify": (["{missing}/index"], "no such file or directory"),
}


@pytest.mark.parametrize("script", sorted(EXPECTED_FAULTS))
def test_every_command_runs_in_the_shell_and_answers_a_fault_with_one_line_and_status_2(script, tmp_path, capsys,
                                                                                       monkeypatch):
    import tomllib
    from importlib import import_module

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert set(scripts) == set(EXPECTED_FAULTS)  # a new command gets its case here
    shell_runs = []
    # the shell sets up the allocator first thing: a command that calls it ran in the shell
    monkeypatch.setattr("pipeline.shell.keep_freed_memory", lambda: shell_runs.append(script))
    module, function = scripts[script].split(":")
    argv, message = EXPECTED_FAULTS[script]
    assert getattr(import_module(module), function)([a.format(missing=tmp_path / "missing") for a in argv]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err and shell_runs == [script]
    assert not (tmp_path / "missing").exists()  # nothing written


def test_the_shell_turns_each_fault_into_one_line_and_an_exit_status(capsys):
    import errno

    from pipeline.core.errors import ConfigError
    from pipeline.shell import run_command

    def bad_option():
        raise ConfigError("--k must be\n   at least 1")

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/a.run")

    def interrupted():
        raise KeyboardInterrupt

    assert run_command(bad_option) == 2
    assert capsys.readouterr().err == "error: --k must be at least 1\n"
    assert run_command(full_disk, on_write_error="no partial run was kept") == 1
    assert capsys.readouterr().err == ("error: cannot write /runs/a.run: No space left on device; no partial run "
                                       "was kept\n")
    with pytest.raises(SystemExit) as stop:
        run_command(interrupted, kept="finished epochs are kept")
    assert stop.value.code == 130 and capsys.readouterr().err.strip() == "interrupted: finished epochs are kept"
    assert run_command(lambda: None) == 0 and run_command(lambda: 3) == 3


def test_a_bad_model_option_is_refused_before_any_dataset_is_read(monkeypatch):
    """A typo in ``--set`` is answered from the re-ranker's options alone (about the time of importing torch),
    not after loading the collection (Microblog by default: ~10 s)."""
    from pipeline import run
    from pipeline.core.errors import ConfigError

    def no_dataset(*args, **kwargs):
        raise AssertionError("the dataset was read before the options were checked")

    monkeypatch.setattr(run, "load_dataset", no_dataset)
    with pytest.raises(ConfigError, match="unknown model option 'epochz'; did you mean 'epochs'"):
        run.run_pipeline(run.parse_config(["--reranker", "knrm", "--set", "epochz=3"]))
    with pytest.raises(AssertionError, match="dataset was read"):  # good options go on to read the dataset
        run.run_pipeline(run.parse_config(["--reranker", "knrm", "--set", "epochs=3"]))


def test_model_options_without_a_re_ranker_are_refused_not_ignored(monkeypatch, tmp_path):
    """``--set`` / ``--config`` with ``--reranker none`` (the default) used to run the first stage and drop
    the options silently; they are refused before any dataset is read."""
    from pipeline import run
    from pipeline.core.errors import ConfigError

    def no_dataset(*args, **kwargs):
        raise AssertionError("the dataset was read before the options were checked")

    monkeypatch.setattr(run, "load_dataset", no_dataset)
    with pytest.raises(ConfigError, match="--set: model options need a re-ranker, and --reranker is none"):
        run.run_pipeline(run.parse_config(["--set", "epochs=3"]))
    options = tmp_path / "options.json"
    options.write_text('{"epochs": 3}', encoding="utf-8")
    with pytest.raises(ConfigError, match="--config: model options need a re-ranker"):
        run.run_pipeline(run.parse_config(["--reranker", "none", "--config", str(options)]))
    with pytest.raises(AssertionError, match="dataset was read"):  # no options: the first stage alone runs
        run.run_pipeline(run.parse_config([]))
