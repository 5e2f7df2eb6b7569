"""--precision auto|float32|bf16|int8 (issue 37, item 2): auto is bf16 for a torch re-ranker where bfloat16
is native (AMX / AVX512-BF16 CPU, or a GPU), else float32; the shortcuts --bf16 / --int8; the run name says
the precision actually used, so float32 and bf16 runs never overwrite each other."""
import pytest

from pipeline.engine.config import RunConfig
from pipeline.core import runtime
from pipeline.core.errors import ConfigError
from pipeline.core.runtime import requested_precision, resolve_precision
from pipeline.engine.naming import run_names, run_precision
from pipeline.engine.stages import scoring_precision, set_scoring_arithmetic


@pytest.fixture(params=[False, True], ids=["emulated-bf16", "native-bf16"])
def native(request, monkeypatch):
    """This host's answer, then the other one: every test holds on both kinds of machine."""
    monkeypatch.delenv("PIPELINE_PRECISION", raising=False)
    monkeypatch.setattr(runtime, "native_bf16_on", lambda device=None: request.param)
    return request.param


def test_requested_precision_merges_the_shortcuts():
    assert requested_precision() == "auto"
    assert requested_precision("auto", bf16=True) == "bf16"
    assert requested_precision("auto", int8=True) == "int8"
    assert requested_precision("bf16", bf16=True) == "bf16"
    assert requested_precision("float32") == "float32"
    for bad in [dict(bf16=True, int8=True), dict(precision="float32", bf16=True), dict(precision="int8", bf16=True)]:
        with pytest.raises(ValueError, match="choose one"):
            requested_precision(**bad)
    with pytest.raises(ValueError, match="--precision must be one of"):
        requested_precision("fp16")


def test_run_config_checks_precision():
    assert RunConfig().precision == "auto"
    with pytest.raises(ConfigError, match="--precision"):
        RunConfig(reranker="hcan", precision="half")
    with pytest.raises(ConfigError, match="choose one"):
        RunConfig(reranker="hcan", precision="float32", bf16=True)


def test_auto_is_bf16_only_where_native_and_for_torch_models(native):
    assert resolve_precision("auto") == ("bf16" if native else "float32")
    assert resolve_precision("auto", supports_bf16=False) == "float32"
    assert resolve_precision("float32") == "float32"
    assert resolve_precision("bf16") == "bf16"          # asked for: kept even where emulated (slower)
    assert resolve_precision("auto", int8=True) == "int8"


def test_environment_pins_auto(native, monkeypatch):
    monkeypatch.setenv("PIPELINE_PRECISION", "float32")
    assert resolve_precision("auto") == "float32"
    assert resolve_precision("bf16") == "bf16"          # an explicit choice wins over the environment
    monkeypatch.setenv("PIPELINE_PRECISION", "bogus")
    with pytest.raises(ValueError, match="PIPELINE_PRECISION"):
        resolve_precision("auto")
    with pytest.raises(ConfigError, match="PIPELINE_PRECISION"):
        RunConfig(reranker="hcan")


def test_run_name_says_the_resolved_precision(native):
    default = RunConfig(reranker="hcan")
    name, alone = run_names(default, "microblog", "bm25", "test", "auto", 0)
    suffix = "-bf16" if native else ""
    assert run_precision(default) == ("bf16" if native else "float32")
    assert name == f"microblog-test-bm25-hcan{suffix}" and alone == f"{name}-alone"
    pinned = run_names(RunConfig(reranker="hcan", precision="float32"), "microblog", "bm25", "test", "auto", 0)[0]
    assert pinned == "microblog-test-bm25-hcan"
    assert run_names(RunConfig(reranker="hcan", bf16=True), "microblog", "bm25", "test", "auto", 0)[0] \
        == "microblog-test-bm25-hcan-bf16"
    assert run_names(RunConfig(), "microblog", "bm25", "test", None, 0)[0] == "microblog-test-bm25"


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    from tests.helpers import make_tiny_encoder

    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def test_set_scoring_arithmetic_applies_the_resolved_precision(native, monkeypatch, tiny_encoder):
    import pipeline.engine.stages as stages

    from tests.helpers import NothingToLearn, transformer_model, varied_dataset, word_model

    monkeypatch.setattr(stages, "native_bf16", lambda: native)
    dataset = varied_dataset()
    model = word_model("knrm", dataset)
    assert set_scoring_arithmetic(model, RunConfig(reranker="knrm")) == ("bf16" if native else "float32")
    assert (model.bf16, model.quantized) == (native, False)
    model = word_model("knrm", dataset)
    assert set_scoring_arithmetic(model, RunConfig(reranker="knrm", precision="float32")) == "float32"
    assert (model.bf16, model.quantized) == (False, False)
    model = transformer_model("cross-encoder", tiny_encoder)
    assert set_scoring_arithmetic(model, RunConfig(reranker="cross-encoder", int8=True)) == "int8"
    assert (model.bf16, model.quantized) == (False, True)
    # a plugin that is not a torch model has no bfloat16 or int8 arithmetic
    assert set_scoring_arithmetic(NothingToLearn(), RunConfig(reranker="hcan")) == "float32"
    # the serving CLI passes its argparse options: bf16 / int8 / precision attributes
    import argparse
    assert scoring_precision(argparse.Namespace(bf16=False, int8=False)) == ("bf16" if native else "float32")
    assert scoring_precision(argparse.Namespace(bf16=False, int8=False, precision="float32")) == "float32"


def test_native_bf16_on_answers_for_the_cpu():
    import torch

    assert runtime.native_bf16_on("cpu") == runtime.native_bf16()
    if not torch.cuda.is_available():
        assert runtime.native_bf16_on() == runtime.native_bf16()
