"""Tests for rerankers/hf_export.py and pipeline/export.py: transformer re-rankers written as Hugging Face
model directories (``save_pretrained``) and read back with identical scores, by this project and, for the
cross-encoder, by plain ``transformers`` (``AutoModelForSequenceClassification``).

The encoders are tiny random BERTs saved by the tests (no network: connections are refused as in
tests/rerankers/test_hf_cross_encoder.py). Encoder weights are perturbed before an export, so that reading back the
original encoder instead of the exported one would change the scores.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from pipeline import export
from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.records import Query
from rerankers import reranker_class
from rerankers.addax import AddaxNoHashingReranker, AddaxReranker
from rerankers.bi_encoder import BiEncoderReranker
from rerankers.cross_encoder import CrossEncoderModel, CrossEncoderReranker, PretrainedHeadModel
from rerankers.hf_export import (
    ADDAX_CONFIG_FILE, ADDAX_HEAD_FILE, CHECKSUM_FILE, CONFIG_FILE, LINEAR_SCALE_EXPONENT, load_pretrained,
)
from tests.helpers import one_torch_thread  # noqa: F401  (autouse fixture)
from tests.helpers import make_tiny_encoder
from tests.helpers import TOPICS, write_pairs
from tests.helpers import (  # noqa: F401  (autouse fixture)
    HF_DOCS as DOCS, HF_QUERY as QUERY, network_attempts, save_tiny_classifier as save_tiny_bert,
)
SMALL = {"max_query_length": 8, "max_doc_length": 16}
#: the project scores a BERT cross-encoder through its [CLS]-only forward (rerankers/blocks/first_token.py), Hugging
#: Face through the full one: the same function, summed in another order
HF_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    """A random 2-layer BERT with the MiniLM tokenizer (:func:`tests.helpers.make_tiny_encoder`)."""
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


@pytest.fixture(scope="module")
def word_bert(tmp_path_factory) -> str:
    """A plain tiny BERT (no head) over a 30-word vocabulary, weights drawn wide so pairs score apart."""
    return save_tiny_bert(tmp_path_factory.mktemp("wordbert"), num_labels=None)


def scores(reranker) -> torch.Tensor:
    return torch.tensor(reranker.score(QUERY, DOCS), dtype=torch.float64)


def perturb_encoder(reranker, seed: int = 3) -> None:
    """Move every encoder weight a little: an export that wrote the original encoder would score otherwise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in reranker.module.encoder.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    reranker.clear_cache()


def hf_logits(folder, query: Query, docs) -> torch.Tensor:
    """The logits of plain transformers' classifier and tokenizer read from ``folder`` (no project code)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True).eval()
    inputs = tokenizer([query.text] * len(docs), [doc.text for doc in docs], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (len(docs), 1)
    return logits[:, 0].double()


# ------------------------------------------------------------------------------------------ cross-encoder


@pytest.fixture(scope="module")
def linear_head(word_bert):
    """A cross-encoder with a fresh linear head on [CLS] (a plain encoder), its head drawn wide."""
    reranker = CrossEncoderReranker.from_options({"encoder": word_bert, **SMALL}, seed=5)
    reranker.prepare()
    assert isinstance(reranker.module, CrossEncoderModel)
    with torch.no_grad():
        reranker.module.head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
        reranker.module.head.bias.fill_(0.25)
    perturb_encoder(reranker)
    reranker.module.eval()
    return reranker


def test_linear_head_cross_encoder_is_a_standard_sequence_classifier(linear_head, tmp_path):
    expected = scores(linear_head)
    assert expected.std() > 0.1  # the pairs score apart, so a wrong head or encoder shows
    folder = linear_head.save_pretrained(tmp_path / "ce")
    config = json.loads((folder / "config.json").read_text())
    assert config.get("num_labels", len(config.get("id2label", {}))) == 1
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer_config.json").is_file()
    described = json.loads((folder / CONFIG_FILE).read_text())
    assert described["reranker"] == "cross-encoder" and described["head"]["kind"] == "linear"
    assert described["encoder_config"]["max_doc_length"] == 16 and described["versions"]["project"]
    # plain transformers: the one logit is the project's score (float rounding only)
    torch.testing.assert_close(hf_logits(folder, QUERY, DOCS), expected, atol=HF_TOLERANCE, rtol=HF_TOLERANCE)


def test_linear_head_cross_encoder_round_trips_exactly(linear_head, tmp_path):
    expected = scores(linear_head)
    folder = linear_head.save_pretrained(tmp_path / "ce")
    loaded = CrossEncoderReranker.load(folder)
    assert isinstance(loaded.module, CrossEncoderModel)  # the plain head is back, not the tanh layer
    torch.testing.assert_close(loaded.module.head.weight, linear_head.module.head.weight, atol=0, rtol=0)
    assert torch.equal(scores(loaded), expected)
    assert loaded.encoder_config.max_query_length == 8 and loaded.encoder_config.max_doc_length == 16
    assert loaded.seed == 5 and loaded.train_config == linear_head.train_config
    # the same through the generic reader and through --model's dispatch (a directory, any model)
    assert torch.equal(scores(load_pretrained(folder)), expected)
    # and the restored model trains on and saves like any other
    loaded.save(tmp_path / "again.pt")
    assert torch.equal(scores(CrossEncoderReranker.load(tmp_path / "again.pt")), expected)


def test_linear_head_is_scaled_by_a_power_of_two(linear_head, tmp_path):
    from safetensors.torch import load_file

    folder = linear_head.save_pretrained(tmp_path / "ce")
    weights = load_file(str(folder / "model.safetensors"))
    head = linear_head.module.head
    assert torch.equal(weights["bert.pooler.dense.weight"][0] * 2.0 ** LINEAR_SCALE_EXPONENT, head.weight[0])
    assert torch.count_nonzero(weights["bert.pooler.dense.weight"][1:]) == 0
    assert weights["classifier.weight"][0, 0] == 2.0 ** LINEAR_SCALE_EXPONENT
    assert torch.equal(weights["classifier.bias"], head.bias)


@pytest.mark.parametrize("labels", [1, 2])
def test_classifier_cross_encoder_exports_one_label_with_the_same_score(labels, tmp_path):
    original = CrossEncoderReranker.load(save_tiny_bert(tmp_path / f"hf{labels}", num_labels=labels))
    expected = scores(original)
    assert expected.std() > 0.1
    folder = original.save_pretrained(tmp_path / "export")
    described = json.loads((folder / CONFIG_FILE).read_text())
    assert described["head"] == {"kind": "classifier", "labels_before_export": labels, "scale_exponent": None}
    # two labels: the exported logit is logit[1] - logit[0], the project's score (rounding apart)
    torch.testing.assert_close(hf_logits(folder, QUERY, DOCS), expected, atol=HF_TOLERANCE, rtol=HF_TOLERANCE)
    loaded = CrossEncoderReranker.load(folder)
    assert isinstance(loaded.module, PretrainedHeadModel) and loaded.module.labels == 1
    if labels == 1:
        assert torch.equal(scores(loaded), expected)
    else:
        torch.testing.assert_close(scores(loaded), expected, atol=1e-6, rtol=1e-6)
    assert loaded.encoder_config.max_doc_length == original.encoder_config.max_doc_length


def test_roberta_layout_holds_a_linear_head(tmp_path):
    from transformers import RobertaConfig, RobertaModel

    from infra.encoders import load_encoder

    tokenizer, _ = load_encoder()
    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=130, pad_token_id=tokenizer.pad_token_id,
                           type_vocab_size=2, initializer_range=0.5)
    RobertaModel(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    original = CrossEncoderReranker.from_options({"encoder": str(tmp_path / "roberta"), **SMALL}, seed=5)
    original.prepare()
    with torch.no_grad():
        original.module.head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    original.module.eval()
    expected = scores(original)
    folder = original.save_pretrained(tmp_path / "export")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["RobertaForSequenceClassification"]
    torch.testing.assert_close(hf_logits(folder, QUERY, DOCS), expected, atol=HF_TOLERANCE, rtol=HF_TOLERANCE)
    assert torch.equal(scores(CrossEncoderReranker.load(folder)), expected)


def test_a_head_the_layout_cannot_hold_is_refused(linear_head, tmp_path, monkeypatch):
    import rerankers.hf_export.heads as heads

    monkeypatch.setattr(heads, "LINEAR_SCALE_EXPONENT", -4)  # tanh far outside its linear range
    with pytest.raises(PipelineError, match="probe pairs"):
        linear_head.save_pretrained(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written


# ------------------------------------------------------------------------------------------ ADDAX, bi-encoder


def prepared(name: str, encoder: str, **options):
    settings = {"encoder": encoder, **SMALL, **options}
    if name.startswith("addax"):
        settings.update(hidden_dim=8, hash_hidden=8)
    reranker = reranker_class(name).from_options(settings, seed=1)
    reranker.prepare()
    perturb_encoder(reranker)
    reranker.module.eval()
    return reranker


def test_addax_round_trips_with_identical_scores(tiny_encoder, tmp_path):
    from transformers import AutoModel
    from safetensors.torch import load_file

    original = prepared("addax", tiny_encoder)
    expected = scores(original)
    folder = original.save_pretrained(tmp_path / "addax")
    files = {path.name for path in folder.iterdir()}
    assert {ADDAX_CONFIG_FILE, ADDAX_HEAD_FILE, "config.json", "model.safetensors"} <= files
    head = load_file(str(folder / ADDAX_HEAD_FILE))
    assert head and not any(key.startswith("encoder.") for key in head) and any("denoiser" in key for key in head)
    # the encoder is a standard one: plain transformers reads it, with the fine-tuned (perturbed) weights
    encoder = AutoModel.from_pretrained(folder, local_files_only=True)
    assert torch.equal(encoder.embeddings.word_embeddings.weight,
                       original.module.encoder.embeddings.word_embeddings.weight)
    for loaded in (AddaxReranker.from_pretrained(folder), AddaxReranker.load(folder), load_pretrained(folder)):
        assert type(loaded) is AddaxReranker
        assert loaded.model_config == original.model_config
        assert torch.equal(scores(loaded), expected)


def test_an_ablation_comes_back_as_that_ablation(tiny_encoder, tmp_path):
    original = prepared("addax-no-hd", tiny_encoder)
    folder = original.save_pretrained(tmp_path / "no-hd")
    loaded = AddaxReranker.from_pretrained(folder)
    assert type(loaded) is AddaxNoHashingReranker and not loaded.model_config.hashing
    assert torch.equal(scores(loaded), scores(original))


def test_bi_encoder_round_trips_with_identical_scores(tiny_encoder, tmp_path):
    original = prepared("bi-encoder", tiny_encoder, scale=7.0)
    expected = scores(original)
    folder = original.save_pretrained(tmp_path / "bi")
    assert not list(folder.glob("*head*"))  # mean pooling has no weights
    for loaded in (BiEncoderReranker.load(folder), load_pretrained(folder)):
        assert type(loaded) is BiEncoderReranker and loaded.model_config.scale == 7.0
        assert torch.equal(scores(loaded), expected)
    # the zero-shot path of a plain encoder directory is unchanged
    assert type(BiEncoderReranker.load(tiny_encoder).module.encoder).__name__ == "BertModel"


def test_export_replaces_a_directory_it_wrote_before(tiny_encoder, tmp_path):
    first = prepared("bi-encoder", tiny_encoder)
    folder = first.save_pretrained(tmp_path / "bi")
    second = prepared("bi-encoder", tiny_encoder)
    perturb_encoder(second, seed=9)
    second.save_pretrained(folder)
    # the encoders read once per process are forgotten: the second model is what comes back
    assert torch.equal(scores(BiEncoderReranker.load(folder)), scores(second))
    assert not torch.equal(scores(second), scores(first))


# ------------------------------------------------------------------------------------------ bad input


def test_directories_that_are_no_export_are_checkpoint_errors_naming_them(tiny_encoder, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for load in (AddaxReranker.load, BiEncoderReranker.load, CrossEncoderReranker.load, load_pretrained):
        with pytest.raises(CheckpointError, match=str(empty)):
            load(empty)
    # a plain encoder directory is not an ADDAX export
    with pytest.raises(CheckpointError, match=f"{tiny_encoder}.*no {ADDAX_CONFIG_FILE}"):
        AddaxReranker.load(tiny_encoder)
    with pytest.raises(CheckpointError, match="not a directory"):
        AddaxReranker.from_pretrained(tmp_path / "missing")


def test_exports_of_another_model_or_damaged_ones_are_refused(tiny_encoder, tmp_path):
    bi = prepared("bi-encoder", tiny_encoder).save_pretrained(tmp_path / "bi")
    with pytest.raises(CheckpointError, match="holds a 'bi-encoder' model, not 'cross-encoder'"):
        CrossEncoderReranker.load(bi)
    addax = prepared("addax", tiny_encoder).save_pretrained(tmp_path / "addax")
    with pytest.raises(CheckpointError, match=f"no {CONFIG_FILE}"):
        BiEncoderReranker.load(addax)
    no_hashing = tmp_path / "no-hd"
    shutil.copytree(addax, no_hashing)
    described = json.loads((no_hashing / ADDAX_CONFIG_FILE).read_text())
    changed = {**described, "model_config": {**described["model_config"], "hashing": False}}
    (no_hashing / ADDAX_CONFIG_FILE).write_text(json.dumps(changed))
    with pytest.raises(CheckpointError, match="exported model is damaged.*addax_config.json"):  # its checksums
        AddaxReranker.load(no_hashing)
    (no_hashing / CHECKSUM_FILE).unlink()  # an export without checksums (older ones): the checks behind them
    with pytest.raises(CheckpointError, match="weights do not fit.*unexpected.*denoiser"):  # the head file has more
        AddaxReranker.load(no_hashing)
    (addax / CHECKSUM_FILE).unlink()
    (addax / ADDAX_HEAD_FILE).write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match=f"{ADDAX_HEAD_FILE}: not a readable safetensors file"):
        AddaxReranker.load(addax)
    (addax / ADDAX_CONFIG_FILE).write_text("{")
    with pytest.raises(CheckpointError, match="not a readable export description"):
        AddaxReranker.load(addax)
    described["format"] = 99
    (addax / ADDAX_CONFIG_FILE).write_text(json.dumps(described))
    with pytest.raises(CheckpointError, match="format 99"):
        load_pretrained(addax)


def test_unprepared_or_int8_models_do_not_export(tiny_encoder, tmp_path):
    with pytest.raises(PipelineError, match="nothing to export"):
        BiEncoderReranker().save_pretrained(tmp_path / "x")
    quantized = prepared("bi-encoder", tiny_encoder).quantize_int8()
    with pytest.raises(PipelineError, match="int8"):
        quantized.save_pretrained(tmp_path / "x")
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------ command line


def test_cli_exports_a_checkpoint(linear_head, tmp_path, capsys):
    checkpoint = tmp_path / "ce.pt"
    linear_head.save(checkpoint)
    output = tmp_path / "out"
    assert export.main(["--checkpoint", str(checkpoint), "--output", str(output)]) == 0
    assert f"-> {output}" in capsys.readouterr().out
    expected = scores(linear_head)
    torch.testing.assert_close(hf_logits(output, QUERY, DOCS), expected, atol=HF_TOLERANCE, rtol=HF_TOLERANCE)
    assert torch.equal(scores(CrossEncoderReranker.load(output)), expected)
    # an existing, non-empty directory needs --force
    assert export.main(["--checkpoint", str(checkpoint), "--output", str(output)]) == 2
    assert "--force" in capsys.readouterr().err
    assert export.main(["--checkpoint", str(checkpoint), "--output", str(output), "--force"]) == 0


def test_cli_bad_input_exits_2(tmp_path, capsys):
    output = str(tmp_path / "out")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    word_level = tmp_path / "knrm.pt"
    from infra.checkpoints import save_checkpoint
    save_checkpoint(word_level, {"reranker": "knrm", "format": 1})
    cases = {
        "--output DIR": ["--checkpoint", str(garbage)],
        "checkpoint not found": ["--checkpoint", str(tmp_path / "missing.pt"), "--output", output],
        "not a readable checkpoint": ["--checkpoint", str(garbage), "--output", output],
        "'knrm' is not a transformer re-ranker": ["--checkpoint", str(word_level), "--output", output],
        "takes no model or dataset flags (got --reranker)": ["--checkpoint", str(garbage), "--reranker", "addax",
                                                             "--output", output],
        "'hcan' is not a transformer re-ranker": ["--reranker", "hcan", "--output", output],
        "say what to export": ["--output", output],
        "unrecognized arguments": ["--checkpoint", str(garbage), "--output", output, "--bogus"],
    }
    for message, argv in cases.items():
        assert export.main(argv) == 2, message
        assert message in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert export.main(["--checkpoint", str(garbage), "--output", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_trains_or_loads_the_cached_model_and_exports_it(tiny_encoder, tmp_path, monkeypatch, capsys):
    data = tmp_path / "pairs"
    write_pairs(data / "train", 1, TOPICS[:6], per_query=4)
    write_pairs(data / "dev", 2, TOPICS[6:8], per_query=4)
    write_pairs(data / "test", 3, TOPICS[8:], per_query=4)
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    options = {"encoder": tiny_encoder, **SMALL, "epochs": 1, "batch_size": 8, "dev_at_start": "false"}
    argv = ["--dataset", str(data), "--reranker", "bi-encoder", "--threads", "1",
            *[f"--set={key}={value}" for key, value in options.items()]]
    assert export.main([*argv, "--output", str(tmp_path / "first")]) == 0
    trained_line = capsys.readouterr().out
    checkpoint = Path(trained_line.split(": ", 1)[1].split(" -> ")[0])
    assert checkpoint.is_file() and checkpoint.suffix == ".pt"
    # again: the cached checkpoint is exported, nothing is trained
    assert export.main([*argv, "--output", str(tmp_path / "second")]) == 0
    assert str(checkpoint) in capsys.readouterr().out
    cached = BiEncoderReranker.load(checkpoint)
    for folder in ("first", "second"):
        assert torch.equal(scores(BiEncoderReranker.load(tmp_path / folder)), scores(cached))
