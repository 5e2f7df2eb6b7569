"""One contract, every registered first stage (as ``test_every_reranker`` for the re-rankers): built from an
empty ``PIPELINE_HOME`` on a tiny collection, it returns each query's documents ranked (at most ``k``, scores
not increasing, no document twice, only the collection's documents); its options dataclass round-trips
(``from_options(to_options())``), an unknown option is a ``ConfigError`` naming it (also through
``--fs-set``), and a changed option changes the run's name.

The list is the registry itself (entry points included), plus the minimal first-stage plugin of
docs/plugins.md, read from the page. ``codes`` / ``colbert`` train their encoder: here 2 steps on the
packaged MiniLM (their default-options builds are ``test_code_fresh_builds``'), ``bm25s`` searches with
numpy instead of numba (whose compilation takes ~40 s; ``test_bm25s`` runs it); the others run with their
defaults.
"""
from __future__ import annotations

import dataclasses

import pytest

from indexes import FirstStageSettings, make_first_stage
from indexes.options import make_options, option_names, options_class, options_dict
from indexes.registry import REGISTRY, factory_of, register
from pipeline.engine.config import RunConfig
from pipeline.core.errors import ConfigError
from pipeline.engine.naming import first_stage_label
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401 (autouse fixture)
from tests.plugin_docs import plugin_target

WORDS = ("wind tunnel pressure wing boundary layer flow shock heat plate cone jet nozzle blade engine fuel "
         "crystal lattice protein gene cell virus enzyme liver diet sugar").split()
#: the first stages registered by this package (plugins need not declare options)
BUILT_IN = ("shipped", "bm25", "bm25+rm3", "bm25s", "dense", "hybrid", "codes", "colbert")
#: the docs' plugin, registered in process under this name for the test
DOCS_PLUGIN = "docs-overlap"
#: small training for the learned-code first stages (an encoder is trained before their index is built)
SMALL_CODES = {"dim": 16, "steps": 2, "batch_size": 4, "hard_negatives": 0, "max_query_length": 12,
               "max_doc_length": 24, "shard_size": 64, "encode_batch_size": 32, "progress": False, "device": "cpu"}
CONTRACT_OPTIONS = {"codes": SMALL_CODES, "colbert": SMALL_CODES}
NAMES = sorted({*REGISTRY.names(), DOCS_PLUGIN})
K = 3


@pytest.fixture(scope="module", autouse=True)
def docs_plugin():
    """docs/plugins.md's first stage, registered under :data:`DOCS_PLUGIN` while this module runs."""
    _, factory = plugin_target("neural_rerank.first_stages")
    register(DOCS_PLUGIN, factory)
    yield factory
    REGISTRY._entries.pop(DOCS_PLUGIN, None)


@pytest.fixture(scope="module")
def dataset():
    return tiny_dataset(WORDS, num_queries=6)  # 24 documents, a shipped run, a train split


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path / "home"))
    for variable in ("PIPELINE_INDEX_DIR", "PIPELINE_MODEL_DIR"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "home"


def changed_option(cls) -> tuple[str, object] | None:
    """One option of ``cls`` at another value its checks accept (``None`` when it has none)."""
    defaults = options_dict(cls())
    for name in option_names(cls):
        value = defaults[name]
        if isinstance(value, bool):
            candidate = not value
        elif isinstance(value, int):
            candidate = value + 1
        elif isinstance(value, float):
            candidate = value / 2 if value else 0.5
        else:
            continue
        try:
            make_options(cls, "x", {name: candidate})
        except ConfigError:
            continue
        return name, candidate
    return None


def test_every_built_in_first_stage_declares_its_options():
    for name in BUILT_IN:
        cls = options_class(factory_of(name))
        assert cls is not None and dataclasses.is_dataclass(cls), name
        assert all(hasattr(cls, method) for method in ("from_options", "to_options")), name


@pytest.mark.parametrize("name", NAMES)
def test_options_round_trip_and_refuse_unknown_names(name):
    cls = options_class(factory_of(name))
    with pytest.raises(ConfigError, match="no_such_option"):
        make_options(cls, name, {"no_such_option": "1"})
    with pytest.raises(ConfigError, match="--fs-set: .*no_such_option"):
        RunConfig(first_stage=name, first_stage_overrides=("no_such_option=1",))
    if cls is None:  # a plugin that declares no options takes none
        assert make_options(cls, name, {}) is None
        return
    defaults = make_options(cls, name, {})
    assert defaults == cls() and make_options(cls, name, options_dict(defaults)) == defaults
    change = changed_option(cls)
    if change is None:  # no options at all (shipped)
        assert option_names(cls) == []
        return
    key, value = change
    changed = make_options(cls, name, {key: str(value).lower() if isinstance(value, bool) else str(value)})
    assert changed != defaults and options_dict(changed)[key] == value
    assert make_options(cls, name, options_dict(changed)) == changed
    if hasattr(cls, "to_options"):
        assert cls.from_options(changed.to_options()) == changed
    # a changed option changes the run's name
    config = RunConfig(first_stage=name, first_stage_overrides=(f"{key}={value}",))
    assert first_stage_label(config, name) != first_stage_label(RunConfig(first_stage=name), name)


@pytest.mark.parametrize("name", NAMES)
def test_every_first_stage_builds_from_an_empty_home_and_ranks(name, dataset, empty_home, monkeypatch):
    if name == "bm25s":  # numba compiles bm25s' search for ~40 s per process; test_bm25s runs that backend
        monkeypatch.setattr("indexes.bm25s._numba_available", lambda: False)
    settings = FirstStageSettings(options=CONTRACT_OPTIONS.get(name), threads=1)
    retriever = make_first_stage(name, dataset, settings)
    queries = list(dataset.queries.values())
    run = retriever.search(queries, K)
    documents = {doc.doc_id for doc in dataset.docs_iter()}
    assert set(run) == {query.query_id for query in queries}
    for query in queries:
        hits = run[query.query_id]
        assert 1 <= len(hits) <= K, (query.query_id, hits)
        assert all(hit.query_id == query.query_id and hit.doc_id in documents for hit in hits)
        assert len({hit.doc_id for hit in hits}) == len(hits)
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    if hasattr(retriever, "close"):
        retriever.close()
    if name in BUILT_IN and name != "shipped":  # an index or a model was written under the empty home
        assert any(path.is_file() for path in empty_home.rglob("*"))


def test_the_options_page_lists_every_option_and_its_commands_parse():
    """docs/first-stages.md's section on the options names every option of every built-in first stage, and
    its example commands are accepted (options checked against their first stage, nothing run)."""
    import re
    import shlex

    from pipeline.run import parse_config
    from tests.plugin_docs import PAGE

    text = (PAGE.parent / "first-stages.md").read_text(encoding="utf-8")
    section = text.split("## Every first stage's options", 1)[1].split("\n## ", 1)[0]
    for name in BUILT_IN:
        cls = options_class(factory_of(name))
        for option in option_names(cls):
            if "." not in option and option != "kind":
                assert f"`{option}`" in section, (name, option)
    commands = re.findall(r"^python -m pipeline\.run (.*)$", section, re.M)
    assert commands and any("--fs-set" in command for command in commands)
    from indexes import first_stage_options

    for command in commands:
        config = parse_config(shlex.split(command))
        assert first_stage_options(config.first_stage, config.first_stage_settings()) is not None


def test_classify_offers_no_first_stage_option():
    """``pipeline.classify`` ranks nothing: none of RunConfig's first-stage fields is one of its flags."""
    from pipeline.classify import NOT_CLASSIFICATION

    first_stage_fields = {f.name for f in dataclasses.fields(RunConfig)
                          if f.metadata.get("group", "").startswith("first-stage")}
    assert "first_stage_overrides" in first_stage_fields and first_stage_fields <= set(NOT_CLASSIFICATION)


def test_a_bad_first_stage_option_is_answered_without_torch():
    """Every built-in first stage's options are checked without importing torch, transformers, faiss or
    ir_datasets (exit status 2, one line naming the option)."""
    from conftest import run_python

    script = ("import sys\nfrom pipeline.run import main\n"
              f"codes = [main(['--first-stage', name, '--fs-set', 'no_such=1', '--dataset', 'toy'])\n"
              f"         for name in {BUILT_IN!r}]\n"
              "heavy = [m for m in ('torch', 'transformers', 'faiss', 'ir_datasets') if m in sys.modules]\n"
              "print(codes, heavy)\n")
    result = run_python(["-c", script], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"{[2] * len(BUILT_IN)} []"
    assert result.stderr.count("unknown option 'no_such'") == len(BUILT_IN) - 1  # shipped: takes no options
    assert "first stage 'shipped': takes no options (given: no_such)" in result.stderr
