"""A first stage's options come from ``--fs-set`` alone: :class:`RunConfig` has no field of any one first
stage, the older per-option flags (``--k1``, ``--stemmer``, ``--code-set``, ...) are deprecated aliases the
command line turns into ``--fs-set`` entries for the chosen first stage (an option it does not have: one
``error:`` line, exit status 2), a default run keeps the run name and model cache key it had before
(measured at commit 28af75a, before the change), and PyTerrier's ``first_stage`` takes the chosen first
stage's options, plugins' included."""
from __future__ import annotations

import dataclasses

import pytest

from indexes import first_stage_options
from indexes.registry import REGISTRY, register
from pipeline.core.errors import ConfigError
from pipeline.engine.config import FIRST_STAGE, RunConfig
from pipeline.engine.first_stage_flags import ALIASES, settings_of
from pipeline.run import build_parser, main, parse_config
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401 (autouse fixture)
from tests.plugin_docs import plugin_target

WORDS = ("apple river mountain music doctor garden winter ocean teacher window city dog cat bread train forest"
         ).split()
#: the fields RunConfig had for single first stages before they moved to --fs-set
REMOVED = ("k1", "b", "fb_terms", "fb_docs", "rm3_weight", "stemmer", "keep_stopwords", "code_overrides",
           "dense_overrides", "hybrid_overrides")
#: the docs' first-stage plugin, registered in process under this name
PLUGIN = "docs-overlap-flags"


@pytest.fixture
def plugin():
    """docs/plugins.md's first stage (option ``min_shared``), registered while the test runs."""
    _, factory = plugin_target("neural_rerank.first_stages")
    register(PLUGIN, factory)
    yield PLUGIN
    REGISTRY._entries.pop(PLUGIN, None)


def test_run_config_has_no_field_of_one_first_stage():
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    assert not set(REMOVED) & set(fields)
    assert [name for name, f in fields.items() if f.metadata["group"] == FIRST_STAGE] == ["first_stage_overrides"]
    assert RunConfig().first_stage_settings().options == {}


ENTRIES = [  # (argv, the --fs-set entries it is)
    (["--first-stage", "bm25", "--k1", "1.2", "--b", "0.7"], ("k1=1.2", "b=0.7")),
    (["--first-stage", "bm25", "--stemmer", "none", "--keep-stopwords"], ("stemmer=none", "keep_stopwords=true")),
    (["--first-stage", "bm25+rm3", "--fb-terms", "20", "--fb-docs", "5", "--rm3-weight", "0.3"],
     ("fb_terms=20", "fb_docs=5", "original_query_weight=0.3")),
    (["--first-stage", "bm25s", "--k1", "1.2"], ("k1=1.2",)),
    (["--k1", "1.2"], ("k1=1.2",)),  # auto: bm25's options (a dataset that ships a run refuses them, below)
    (["--first-stage", "hybrid", "--k1", "1.2", "--stemmer", "none"], ("bm25.k1=1.2", "bm25.stemmer=none")),
    (["--first-stage", "hybrid", "--dense-set", "index_type=hnsw", "--hybrid-set", "fusion=rrf"],
     ("dense.index_type=hnsw", "fusion=rrf")),
    (["--first-stage", "dense", "--dense-set", "index_type=hnsw"], ("index_type=hnsw",)),
    (["--first-stage", "codes", "--code-set", "dim=64"], ("dim=64",)),
    (["--first-stage", "colbert", "--code-set", "dim=64"], ("dim=64",)),
    (["--first-stage", "bm25:.", "--k1", "1.2"], ("k1=1.2",)),  # an existing index takes bm25's options
]


@pytest.mark.parametrize("argv, entries", ENTRIES, ids=[" ".join(argv) for argv, _ in ENTRIES])
def test_each_deprecated_flag_is_an_fs_set_entry_of_the_chosen_first_stage(argv, entries):
    config = parse_config(argv)
    assert config.first_stage_overrides == entries
    spec = config.first_stage
    fs_set = parse_config([*argv[:argv.index("--first-stage") + 2]] if "--first-stage" in argv else [])
    assert config == dataclasses.replace(fs_set, first_stage_overrides=entries)
    assert first_stage_options(spec, config.first_stage_settings()) is not None


def test_flags_and_fs_set_keep_the_command_lines_order():
    def k1(*argv):
        return first_stage_options("bm25", parse_config(["--first-stage", "bm25", *argv]).first_stage_settings()).k1

    assert k1("--k1", "1.2", "--fs-set", "k1=1.5") == 1.5
    assert k1("--fs-set", "k1=1.5", "--k1", "1.2") == 1.2


BAD = [  # (argv, the error line)
    (["--first-stage", "dense", "--k1", "1"], "--k1: first stage 'dense' has no option 'k1' (--k1 is a deprecated "
                                              "alias of --fs-set k1=VALUE); its options: encoder, pooling"),
    (["--first-stage", "bm25", "--rm3-weight", "0.3"], "--rm3-weight: first stage 'bm25' has no option "
                                                       "'original_query_weight'"),
    (["--fb-docs", "3"], "--fb-docs: first stage 'auto' (checked as 'bm25') has no option 'fb_docs'"),
    (["--first-stage", "run:some.run", "--b", "0.5"], "--b: first stage 'run:some.run' has no option 'b' (--b is a "
                                                      "deprecated alias of --fs-set b=VALUE); its options: none"),
    (["--first-stage", "shipped", "--keep-stopwords"], "--keep-stopwords: first stage 'shipped' has no option"),
    (["--first-stage", "bm25", "--code-set", "dim=64"], "--code-set applies to --first-stage codes or colbert, not "
                                                        "'bm25'"),
    (["--first-stage", "bm25", "--k1", "-1"], "--k1 -1: first stage 'bm25': options: k1 must be at least 0"),
    (["--first-stage", "bm25", "--k1", "many"], "--k1 many: first stage 'bm25': option k1='many': expected a number"),
    (["--first-stage", "bm26", "--k1", "1"], "--first-stage: unknown first stage 'bm26'; did you mean 'bm25'?"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_a_flag_for_an_option_the_first_stage_lacks_is_one_error_line(argv, message, capsys, tmp_path):
    with pytest.raises(ConfigError) as error:
        parse_config(argv)
    assert str(error.value).startswith(message)
    assert main([*argv, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {message}" in err and "Traceback" not in err


def test_a_dataset_that_settles_auto_to_its_shipped_run_refuses_bm25_options(monkeypatch, tmp_path, capsys):
    dataset = tiny_dataset(WORDS)  # ships a first-stage run: auto is "shipped"
    monkeypatch.setattr("pipeline.run.load_dataset", lambda name, mirror=None: dataset)
    assert main(["--dataset", "tiny", "--stemmer", "none", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert ("error: --fs-set: --first-stage auto is 'shipped' for dataset 'tiny' (it ships a first-stage run): "
            "first stage 'shipped': takes no options (given: stemmer); name the first stage, e.g. --first-stage "
            "bm25") in err
    assert not list(tmp_path.iterdir())


def test_help_marks_the_flags_deprecated_and_other_commands_follow():
    parser = build_parser()
    helps = {action.option_strings[0]: action.help for action in parser._actions if action.option_strings}
    for alias in ALIASES:
        assert helps[alias.flag].startswith(f"deprecated: {alias.stands_for} ("), alias.flag
    assert "deprecated first-stage flags" in parser.format_help()
    from pipeline.classify import build_parser as classify_parser
    from pipeline.export import build_export_parser

    assert build_export_parser().parse_args(["--first-stage", "bm25", "--k1", "1.2"]).first_stage_overrides == [
        "k1=1.2"]
    with pytest.raises(ConfigError, match="unrecognized arguments: --k1"):  # classify has no first stage
        classify_parser().parse_args(["--dataset", "wikiqa", "--k1", "1.2"])


# the run name and the model cache key of runs made before the change (commit 28af75a), on the tiny dataset
# without splits and one fixed fold: a user's existing runs and trained models are found again
BEFORE = {
    ("bm25",): ("tiny-bm25", "tiny-bm25-knrm", "bm25", "knrm-test-seed1-651a69ff7da4.pt"),
    ("bm25+rm3",): ("tiny-bm25+rm3", "tiny-bm25+rm3-knrm", "bm25+rm3", "knrm-test-seed1-19dea53d1466.pt"),
    ("hybrid",): ("tiny-hybrid", "tiny-hybrid-knrm", "hybrid", "knrm-test-seed1-29f17b5522f9.pt"),
    ("codes",): ("tiny-codes", "tiny-codes-knrm", "codes", "knrm-test-seed1-24bd9dd197dd.pt"),
    ("auto",): ("tiny-shipped", "tiny-shipped-knrm", "shipped", "knrm-test-seed1-4818a99644fb.pt"),
    ("bm25", "--k1", "0.9"): ("tiny-bm25", "tiny-bm25-knrm", "bm25", "knrm-test-seed1-651a69ff7da4.pt"),
    ("bm25", "--fs-set", "k1=0.9"): ("tiny-bm25", "tiny-bm25-knrm", "bm25", "knrm-test-seed1-651a69ff7da4.pt"),
    ("bm25", "--k1", "1.2"): ("tiny-bm25-k1.1.2-b.0.4", "tiny-bm25-k1.1.2-b.0.4-knrm", 'bm25:{"k1": 1.2}',
                              "knrm-test-seed1-0cab96493a0a.pt"),
    ("bm25", "--fs-set", "k1=1.2"): ("tiny-bm25-k1.1.2-b.0.4", "tiny-bm25-k1.1.2-b.0.4-knrm", 'bm25:{"k1": 1.2}',
                                     "knrm-test-seed1-0cab96493a0a.pt"),
    ("hybrid", "--k1", "1.2"): ("tiny-hybrid-opts.0f2c49", "tiny-hybrid-opts.0f2c49-knrm", 'hybrid:{"bm25.k1": 1.2}',
                                "knrm-test-seed1-b2dff0a72670.pt"),
    ("codes", "--code-set", "dim=512"): ("tiny-codes-opts.f589ec", "tiny-codes-opts.f589ec-knrm", 'codes:{"dim": 512}',
                                         "knrm-test-seed1-ae031147c8fb.pt"),
}


@pytest.mark.parametrize("argv", list(BEFORE), ids=[" ".join(argv) for argv in BEFORE])
def test_run_names_and_cache_keys_are_those_of_before_the_change(argv, monkeypatch, tmp_path):
    from pipeline.engine.model_cache import candidates_key, checkpoint_path, training_plan
    from pipeline.engine.plan import plan_run
    from pipeline.engine.protocols import Fold

    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path))
    dataset = dataclasses.replace(tiny_dataset(WORDS), splits={})
    fold = Fold("test", ["q1"], ["q2"], ["q3"])
    first, *rest = argv
    name = plan_run(parse_config(["--first-stage", first, *rest]), dataset).name
    reranked = plan_run(parse_config(["--first-stage", first, *rest, "--reranker", "knrm"]), dataset).name
    config = parse_config(["--reranker", "knrm", "--first-stage", first, *rest])
    plan = training_plan(config, dataset, folds=[fold], options={}, first_stage="shipped" if first == "auto" else first,
                         k=10)
    key = candidates_key(plan)
    assert (name, reranked, key, checkpoint_path(dataset, "knrm", {}, fold, 1, key, 10).name) == BEFORE[argv]


# ---------------------------------------------------------------------------------------- PyTerrier's first_stage


def test_pyterrier_options_are_the_chosen_first_stages(plugin):
    assert settings_of("bm25+rm3", {"k1": 1.2, "rm3_weight": 0.3}).options == {"k1": 1.2,
                                                                              "original_query_weight": 0.3}
    assert settings_of("hybrid", {"k1": 1.2, "dense.index_type": "hnsw"}).options == {
        "bm25.k1": 1.2, "dense.index_type": "hnsw"}
    assert settings_of(plugin, {"min_shared": 2}).options == {"min_shared": 2}
    with pytest.raises(ConfigError, match=f"first stage '{plugin}': unknown option 'min_share'; did you mean "
                                          "'min_shared'\\? known: min_shared"):
        settings_of(plugin, {"min_share": 2})
    with pytest.raises(ConfigError, match="first stage 'dense': unknown option 'k1'"):
        settings_of("dense", {"k1": 1.2})


def test_pyterrier_first_stage_of_a_plugin_with_its_option(plugin):
    pytest.importorskip("pyterrier")
    from pipeline import pyterrier as ptx

    dataset = tiny_dataset(WORDS)
    topics = ptx.topics(dataset)
    every = ptx.first_stage(plugin, dataset, k=100)(topics)
    two = ptx.first_stage(plugin, dataset, k=100, min_shared=2)(topics)
    assert len(two) < len(every) and (two["score"] >= 2).all() and (every["score"] >= 1).all()
    with pytest.raises(ConfigError, match=f"first_stage: first stage '{plugin}': unknown option 'k1'"):
        ptx.first_stage(plugin, dataset, k1=1.2)


def test_a_deprecated_flag_is_answered_without_torch():
    """As ``--fs-set``'s, the deprecated flags' errors need no model: torch, transformers, faiss and
    ir_datasets stay unimported (exit status 2 for every built-in first stage)."""
    from conftest import run_python

    script = ("import sys\nfrom pipeline.run import main\n"
              "codes = [main(['--first-stage', name, flag, 'x', '--dataset', 'toy']) for name, flag in "
              "[('bm25', '--k1'), ('bm25+rm3', '--fb-terms'), ('bm25s', '--b'), ('dense', '--k1'), "
              "('hybrid', '--stemmer'), ('codes', '--code-set'), ('colbert', '--dense-set'), ('shipped', '--k1')]]\n"
              "heavy = [m for m in ('torch', 'transformers', 'faiss', 'ir_datasets') if m in sys.modules]\n"
              "print(codes, heavy)\n")
    result = run_python(["-c", script], timeout=120)
    assert result.stdout.strip().splitlines()[-1] == f"{[2] * 8} []", result.stdout + result.stderr
