"""The typed run config (pipeline.engine.config.RunConfig), the command line derived from it, and the one
ConfigError every bad option raises before any retrieval or training."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import indexes.registry
import rerankers
from pipeline.engine.config import RunConfig
from pipeline.core.datasets import Dataset
from pipeline.core.errors import ConfigError
from pipeline.core.plugins import Registry
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
from pipeline.run import build_parser, main, parse_config, run_pipeline

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def toy_dataset() -> Dataset:
    """Nine queries (train, dev and test splits of three) of two words; per query four candidates, the first
    holding both query words (relevant), in a shipped first-stage run that ranks it last."""
    queries, docs, qrels, run = {}, {}, [], {}
    for number in range(9):
        qid = f"q{number}"
        words = WORDS[number % len(WORDS)], WORDS[(number + 3) % len(WORDS)]
        queries[qid] = Query(qid, " ".join(words))
        ids = [f"{qid}-d{i}" for i in range(4)]
        docs[ids[0]] = Doc(ids[0], f"the {words[0]} and the {words[1]}")
        for doc_id in ids[1:]:
            docs[doc_id] = Doc(doc_id, f"the {words[0]} of nothing")
        qrels += [Qrel(qid, doc_id, int(doc_id == ids[0])) for doc_id in ids]
        run[qid] = [ScoredDoc(qid, doc_id, float(rank)) for rank, doc_id in enumerate(ids)]
    splits = {"train": ["q0", "q1", "q2"], "dev": ["q3", "q4", "q5"], "test": ["q6", "q7", "q8"]}
    return Dataset("toy", queries, qrels, lambda: docs.values(), "toy", splits, run, _store=docs)


class WorkStarted(AssertionError):
    """Raised by the guards below: retrieval or training began."""


@pytest.fixture
def guarded(monkeypatch, tmp_path):
    """The toy dataset for every ``--dataset``; building a first stage or training a model fails the test."""
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: toy_dataset())
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))

    def no_work(*args, **kwargs):
        raise WorkStarted("retrieval or training started before every option was checked")

    monkeypatch.setattr("pipeline.engine.stages.make_first_stage", no_work)
    monkeypatch.setattr("indexes.make_first_stage", no_work)  # the run's FirstStageContext builds through it
    monkeypatch.setattr("pipeline.engine.model_cache.train_fold", no_work)
    return tmp_path


BAD_OPTIONS = [
    (["--reranker", "nope"], "--reranker: unknown re-ranker 'nope'; did you mean 'none'\\? choose one of none, .*hcan"),
    (["--first-stage", "bm26"], "--first-stage: unknown first stage 'bm26'; did you mean 'bm25'\\? choose one of .*bm25"),
    (["--first-stage", "run:"], "run:PATH needs a path"),
    (["--first-stage", "run:no-such.run"], "--first-stage run:no-such.run: no such run file"),
    (["--split", "2099"], r"--split: dataset 'toy' has no split '2099' \(its splits: train, dev, test\)"),
    (["--reranker", "knrm", "--split", "2099"], "has no split '2099'"),
    (["--reranker", "knrm", "--split", "train"], "cannot test on the training split"),
    (["--metrics", "AP Bogus@3"], "--metrics 'AP Bogus@3': unknown measure 'Bogus@3'"),
    (["--metrics", ""], "no measures given"),
    (["--k", "-5"], "--k must be at least 1, got -5"),
    (["--k", "0"], "--k must be at least 1, got 0"),
    (["--rerank-depth", "-1"], "--rerank-depth must be at least 0, got -1"),
    (["--reranker", "knrm", "--interpolate", "maybe"], "--interpolate takes 'auto', 'none' or a weight"),
    (["--reranker", "knrm", "--interpolate", "1.5"], r"--interpolate weight must be in \[0, 1\], got 1.5"),
    (["--folds", "0"], "--folds must be at least 1, got 0"),
    (["--train-dataset", "cranfield"], "--train-dataset needs --reranker NAME: the re-ranker to train on it, not 'none'"),
    (["--reranker", "knrm", "--model", "some.pt", "--train-dataset", "cranfield"],
     "--train-dataset trains the model that --model would give: give one of them"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--threads", "-1"], "--threads must be at least 0, got -1"),
    (["--b", "2"], r"--b 2: first stage 'auto': options: b must be in \[0, 1\], got 2"),
    (["--stemmer", "snowball"], "--stemmer snowball: .*unknown stemmer 'snowball'; choose one of porter, krovetz, none"),
    (["--fs-set", "b=2"], r"--fs-set: first stage 'auto': options: b must be in \[0, 1\], got 2"),
    (["--first-stage", "bm25", "--fb-terms", "20"], "--fb-terms: first stage 'bm25' has no option 'fb_terms' "
                                                    r"\(--fb-terms is a deprecated alias of --fs-set fb_terms=VALUE\); "
                                                    "its options: k1, b, stemmer, keep_stopwords"),
    (["--reranker", "knrm", "--set", "nope=1"], "unknown model option 'nope'; known: .*epochs"),
    (["--reranker", "knrm", "--set", "epochs=many"], "option epochs='many': expected an integer"),
    (["--reranker", "hcan", "--set", "matching=sideways"], "option matching='sideways': matching must be one of"),
    (["--reranker", "knrm", "--set", "epochs"], "--set 'epochs': expected name=value"),
    (["--reranker", "knrm", "--config", "no-such.yaml"], "--config no-such.yaml: config file not found"),
    (["--reranker", "knrm", "--int8"], "--int8 applies to the transformer re-rankers"),
    (["--model", "some.pt"], "--model needs --reranker"),
    (["--name", "../escape"], "--name '../escape': a run name is one file name"),
    (["--name", "/tmp/absolute"], "--name '/tmp/absolute'"),
    (["--name", "sub/run"], "--name 'sub/run'"),
    (["--name", "my run"], "--name 'my run'"),
    (["--name", ".."], "--name '..'"),
    (["--k", "many"], "argument --k: invalid int value: 'many'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--code-set", "dim=512"], "--code-set applies to --first-stage codes or colbert, not 'auto'"),
    (["--first-stage", "codes", "--code-set", "dimm=512"], "--code-set dimm=512: .*unknown option 'dimm'; did you "
                                                           "mean 'dim'"),
    (["--first-stage", "codes", "--code-set", "dim=many"], "--code-set dim=many: .*option dim='many': expected an "
                                                           "integer"),
    (["--first-stage", "codes", "--code-set", "hash_head=xyz"], "unknown hash head 'xyz'"),
    (["--first-stage", "colbert", "--code-set", "dim"], "--code-set 'dim': expected name=value"),
]


@pytest.mark.parametrize("argv, message", BAD_OPTIONS, ids=[" ".join(argv) for argv, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_config_error_before_any_work(guarded, argv, message, capsys):
    out = guarded / "runs"
    with pytest.raises(ConfigError, match=message):
        run_pipeline(parse_config([*argv, "--dataset", "toy", "--output-dir", str(out)]))
    # the command line prints the same message, without a traceback, and exits with status 2
    assert main([*argv, "--dataset", "toy", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not out.exists() and not (guarded / "models").exists()


def test_the_guard_sees_work_starting(guarded):
    """A good config gets past the checks to the first stage, where the guard stops it."""
    with pytest.raises(WorkStarted):
        run_pipeline(RunConfig(dataset="toy", output_dir=guarded / "runs"))
    with pytest.raises(WorkStarted):  # with a re-ranker: the first stage is the first work, too
        run_pipeline(RunConfig(dataset="toy", reranker="knrm", overrides=("epochs=1",), output_dir=guarded / "runs"))


def test_auto_interpolation_without_judged_dev_queries_is_refused_before_training(guarded, monkeypatch):
    dataset = toy_dataset()
    dataset.qrels = [q for q in dataset.qrels if q.query_id not in dataset.splits["dev"]]
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    with pytest.raises(ConfigError, match="fold 'test' has no judged dev queries"):
        run_pipeline(RunConfig(dataset="toy", reranker="knrm", output_dir=guarded / "runs"))
    with pytest.raises(WorkStarted):  # a fixed weight needs no dev queries
        run_pipeline(RunConfig(dataset="toy", reranker="knrm", interpolate="0.5", output_dir=guarded / "runs"))


def test_pipeline_train_checks_its_options_before_training(guarded, monkeypatch, capsys):
    from pipeline import train

    monkeypatch.setattr("pipeline.train.load_dataset", lambda name, mirror=None: toy_dataset())
    assert train.main(["--dataset", "toy"]) == 2
    assert "choose a re-ranker to train" in capsys.readouterr().err
    assert train.main(["--dataset", "toy", "--reranker", "knrm", "--set", "nope=1"]) == 2
    assert "unknown model option 'nope'" in capsys.readouterr().err
    assert train.main(["--dataset", "toy", "--reranker", "knrm", "--k", "0"]) == 2
    assert "--k must be at least 1" in capsys.readouterr().err
    with pytest.raises(WorkStarted):
        train.train(RunConfig(dataset="toy", reranker="knrm"))
    assert not (guarded / "models").exists()


def test_a_config_made_in_python_checks_itself():
    with pytest.raises(ConfigError, match="--k must be at least 1"):
        RunConfig(k=0)
    with pytest.raises(ConfigError, match="unknown re-ranker"):
        RunConfig(reranker="nope")
    config = RunConfig(output_dir="elsewhere", overrides=["epochs=2"])  # looser types are normalised
    assert config.output_dir == Path("elsewhere") and config.overrides == ("epochs=2",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.k = 5


def test_the_command_line_is_the_config():
    """Every field is a flag with the field's default, and every flag is a field: the two cannot drift."""
    parser = build_parser()
    flags = {action.dest for action in parser._actions if action.dest != "help"}
    assert flags == {f.name for f in dataclasses.fields(RunConfig)}
    assert parse_config([]) == RunConfig()
    config = parse_config(["--dataset", "cranfield", "--k", "10", "--set", "a=1", "--set", "b=2", "--int8",
                           "--reranker", "cross-encoder", "--config", "c.yaml", "--output-dir", "out"])
    assert config == RunConfig(dataset="cranfield", k=10, overrides=("a=1", "b=2"), int8=True,
                               reranker="cross-encoder", config_file="c.yaml", output_dir=Path("out"))


def test_run_pipeline_leaves_its_config_alone_and_still_takes_a_namespace(monkeypatch, tmp_path):
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: toy_dataset())
    config = RunConfig(dataset="toy", first_stage="shipped", output_dir=tmp_path / "a", metrics="AP")
    result = run_pipeline(config)
    assert config == RunConfig(dataset="toy", first_stage="shipped", output_dir=tmp_path / "a", metrics="AP")
    assert config.k is None  # the depth the run used (1000) is not written back
    assert result.run_path == tmp_path / "a" / "toy-all-shipped.run" and len(result.run) == 9
    # for one release: parsed command-line arguments, as benchmarks/reproduce.py passes them
    namespace = build_parser().parse_args(["--dataset", "toy", "--first-stage", "shipped", "--metrics", "AP",
                                           "--output-dir", str(tmp_path / "b")])
    again = run_pipeline(namespace)
    assert again.run_path.read_bytes() == result.run_path.read_bytes()


# ------------------------------------------------------------------------------------------- plugins


class WordShare:
    """A re-ranker of an outside package, as in README "Adding a re-ranker": it has only what the
    ``rerankers.Reranker`` protocol asks for (no ``from_options``, no ``prepare``)."""

    name = "word-share"

    def score(self, query, docs):
        words = set(query.text.lower().split())
        return [len(words & set(doc.text.lower().split())) / len(words) for doc in docs]

    def fit(self, train, dev=None, state_path=None):
        return None

    def save(self, path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"reranker": self.name}))

    @classmethod
    def load(cls, path):
        if json.loads(Path(path).read_text())["reranker"] != cls.name:
            raise ValueError(f"{path} holds another model")
        return cls()


def first_in_order(dataset, settings):
    """A first stage of an outside package: every document, in collection order, scored by position."""

    class InOrder:
        name = "in-order"

        def search(self, queries, k=1000):
            ids = [doc.doc_id for doc in dataset.docs_iter()][:k]
            return {q.query_id: [ScoredDoc(q.query_id, d, -float(r)) for r, d in enumerate(ids)] for q in queries}

    return InOrder()


@pytest.fixture
def plugins(monkeypatch):
    """Fresh registries (restored after the test) with the two plugins registered in process."""
    monkeypatch.setattr(rerankers, "REGISTRY", Registry("re-ranker", "neural_rerank.rerankers", rerankers.BUILTIN))
    monkeypatch.setattr(indexes.registry, "REGISTRY", Registry("first stage", "neural_rerank.first_stages"))
    rerankers.register("word-share", WordShare)
    indexes.registry.register("in-order", first_in_order)


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # the t-test of a tiny toy run's equal scores
def test_registered_plugins_are_listed_and_run(plugins, monkeypatch, tmp_path):
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: toy_dataset())
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    helps = {action.dest: action.help for action in build_parser()._actions}
    assert "word-share" in helps["reranker"] and "in-order" in helps["first_stage"]
    result = run_pipeline(parse_config(["--dataset", "toy", "--reranker", "word-share", "--first-stage", "in-order",
                                        "--interpolate", "none", "--metrics", "P@1",
                                        "--output-dir", str(tmp_path / "runs")]))
    assert set(result.run) == {"q6", "q7", "q8"}  # the protocol's test queries
    assert all(max(hits, key=lambda h: h.score).doc_id == f"{q}-d0" for q, hits in result.run.items())
    assert result.comparison.evaluations[-1].aggregate["P@1"] == 1.0
    assert len(list((tmp_path / "models").rglob("word-share-test-seed42-*.pt"))) == 1  # trained once, cached
    with pytest.raises(ConfigError, match="re-ranker 'word-share' takes no options"):
        run_pipeline(parse_config(["--dataset", "toy", "--reranker", "word-share", "--set", "epochs=2"]))


def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(guarded, capsys):
    blocker = guarded / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="--output-dir .*a-file/runs: cannot write there"):
        run_pipeline(RunConfig(dataset="toy", output_dir=blocker / "runs"))
    assert main(["--dataset", "toy", "--output-dir", str(blocker / "runs")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_full_disk_while_writing_the_run_is_an_error_line(monkeypatch, tmp_path, capsys):
    import errno

    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: toy_dataset())
    target = tmp_path / "runs" / "x.run"

    def full_disk(path, run, tag="pipeline"):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr("pipeline.run.write_run", full_disk)
    assert main(["--dataset", "toy", "--output-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert f"error: cannot write {target}: No space left on device; no partial run" in err
    assert "Traceback" not in err


def test_a_reranker_giving_nan_is_an_error_naming_the_query():
    from pipeline.core.errors import PipelineError
    from pipeline.engine.stages import rerank

    dataset = toy_dataset()

    class Broken:
        name = "broken"

        def score(self, query, docs):
            return [float("nan")] * len(docs)

    with pytest.raises(PipelineError, match="broken gave a non-finite score to doc .* of query"):
        rerank(Broken(), dataset, dataset.first_stage)


@pytest.mark.parametrize("flag", ["--rerank-depth", "--metrics", "--output-dir", "--name", "--model", "--interpolate",
                                  "--batch-size", "--int8", "--bf16"])
def test_pipeline_train_takes_only_its_own_flags(guarded, flag, capsys):
    from pipeline.train import main as train_main

    argv = ["--reranker", "knrm", flag] + ([] if flag in ("--int8", "--bf16") else ["1"])
    assert train_main(argv) == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_a_first_stage_over_a_pooled_collection_is_named_and_warned(caplog):
    import dataclasses

    from pipeline.core.datasets import Recipe
    from pipeline.engine.plan import plan_run

    pooled = toy_dataset()
    pooled.recipe = dataclasses.replace(pooled.recipe, pooled="the passages of a top-100 pool")
    with caplog.at_level("WARNING"):
        plan = plan_run(RunConfig(dataset="toy", first_stage="bm25"), pooled)
    assert plan.name == "toy-all-bm25-pool"
    assert "searches that pool, not the collection" in caplog.text
    assert plan_run(RunConfig(dataset="toy", first_stage="shipped"), pooled).name == "toy-all-shipped"
    assert plan_run(RunConfig(dataset="toy", first_stage="bm25"), toy_dataset()).name == "toy-all-bm25"
    assert isinstance(pooled.recipe, Recipe)


def test_the_shipped_dl_and_microblog_datasets_say_they_are_pools():
    from pipeline.core.datasets import DL_RECIPE, MICROBLOG_RECIPE

    assert "MS MARCO" in DL_RECIPE.pooled and "QL top-1000" in MICROBLOG_RECIPE.pooled


def test_runs_of_different_settings_never_share_a_name(tmp_path):
    from pipeline.engine.plan import plan_run

    run_file = tmp_path / "my.first-stage.run"
    run_file.write_text("q6 Q0 d1 1 1.0 x\n")

    def name(*argv):
        return plan_run(parse_config([*argv, "--dataset", "toy"]), toy_dataset()).name

    assert name("--first-stage", "bm25") == "toy-all-bm25"                  # every split's queries
    assert name("--first-stage", "bm25", "--split", "test") == "toy-test-bm25"
    assert name("--first-stage", "bm25", "--stemmer", "none") == "toy-all-bm25-stem.none"
    assert name("--first-stage", "bm25", "--k1", "1.2", "--b", "0.75") == "toy-all-bm25-k1.1.2-b.0.75"
    assert name("--first-stage", "bm25+rm3", "--fb-terms", "20") == "toy-all-bm25+rm3-fb20x10w0.5"
    assert name("--first-stage", "bm25+rm3", "--fs-set", "fb_terms=20") == "toy-all-bm25+rm3-fb20x10w0.5"
    with pytest.raises(ConfigError, match="--fb-terms: first stage 'bm25' has no option"):  # bm25 has no RM3
        name("--first-stage", "bm25", "--fb-terms", "20")
    assert name("--first-stage", f"run:{run_file}") == "toy-all-run-my.first-stage"
    (tmp_path / "prebuilt").mkdir()
    assert name("--first-stage", f"bm25:{tmp_path / 'prebuilt'}") == "toy-all-bm25-index.prebuilt"
    plain = name("--first-stage", "shipped", "--reranker", "knrm")
    assert plain == "toy-shipped-knrm"
    assert name("--first-stage", "shipped", "--reranker", "knrm", "--seed", "1") == "toy-shipped-knrm-seed1"
    two, three = (name("--first-stage", "shipped", "--reranker", "knrm", "--set", f"epochs={e}") for e in (2, 3))
    assert two != three and two.startswith("toy-shipped-knrm-set.")
    assert name("--first-stage", "shipped", "--reranker", "knrm", "--name", "mine") == "mine"


def test_trec_eval_metric_names_reach_the_run_as_ir_measures_names():
    from pipeline.engine.plan import plan_run

    plan = plan_run(parse_config(["--dataset", "toy", "--reranker", "knrm", "--metrics", "map P_10"]), toy_dataset())
    assert plan.metrics == "AP P@10" and plan.main_metric == "AP"   # the interpolation weight is tuned on AP
