"""The commands under torchrun with 2 CPU processes (gloo): ``pipeline.train`` writes one checkpoint (rank 0)
that ``pipeline.run`` loads; ``pipeline.run`` scores and writes the run one process writes, byte for byte; a code
index encoded by two ranks is the one-process index, file for file. Training itself (DDP's equal weights,
dropout, resuming): ``test_distributed.py``.
"""
from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers import TOPICS, run_python_in, tiny_pairs, two_process_torchrun, write_pairs  # noqa: F401


def test_pipeline_train_under_torchrun_writes_one_checkpoint_that_pipeline_run_loads(tiny_pairs, tmp_path, monkeypatch):
    models = tmp_path / "models"
    common = ["--dataset", str(tiny_pairs), "--reranker", "hcan", "--threads", "1", "--set", "embeddings=random",
              "--set", "embedding_dim=16", "--set", "num_filters=16", "--set", "hidden_dim=16", "--set",
              "num_layers=2", "--set", "query_slots=8", "--set", "epochs=2"]   # the default dropout
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(models))
    trained = run_python_in(tmp_path, two_process_torchrun("-m", "pipeline.train", *common))
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert trained.stdout.count("test: ") == 1  # rank 0 reports
    assert len(list(models.rglob("hcan-*.pt"))) == 1 and not list(models.rglob("*.training-state"))
    ran = run_python_in(tmp_path, ["-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "runs")])
    assert ran.returncode == 0 and "training hcan" not in ran.stderr, ran.stderr[-3000:]


def test_scoring_under_torchrun_writes_the_run_one_process_writes_byte_for_byte(tmp_path, monkeypatch):
    from pipeline.engine.stages import RERANK_CHUNK_PAIRS

    many = [f"word{i} term{i % 37}" for i in range(RERANK_CHUNK_PAIRS // 8 + 200)]  # two chunks: one per rank
    pairs = tmp_path / "many"
    write_pairs(pairs / "train", 1, TOPICS[:8])
    write_pairs(pairs / "dev", 2, TOPICS[8:12])
    write_pairs(pairs / "test", 3, many)
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    common = ["--dataset", str(pairs), "--reranker", "hcan", "--threads", "1", "--set", "embeddings=random",
              "--set", "embedding_dim=16", "--set", "num_filters=16", "--set", "hidden_dim=16", "--set",
              "num_layers=2", "--set", "query_slots=8", "--set", "epochs=1", "--batch-size", "4"]
    one = run_python_in(tmp_path, ["-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "one")])
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_python_in(tmp_path, two_process_torchrun("-m", "pipeline.run", *common, "--output-dir",
                                                       str(tmp_path / "two")))
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("run: ") == 1                               # rank 0 reports
    runs = sorted(p.name for p in (tmp_path / "one").glob("*.run"))
    assert runs and runs == sorted(p.name for p in (tmp_path / "two").glob("*.run"))   # alone and combined
    for name in runs:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


BUILD = """
import sys, faiss, torch
from pathlib import Path
from pipeline.core.datasets import load_local
from indexes.codes import CodeOptions, build_code_index
from infra import distributed

distributed.init_from_environment()
torch.set_num_threads(1)
faiss.omp_set_num_threads(1)
options = CodeOptions(kind="codes", encoder=sys.argv[2], dim=16, steps=4, batch_size=4, hard_negatives=0,
                      max_query_length=12, max_doc_length=24, shard_size=16, encode_batch_size=16, progress=False,
                      device="cpu")
path = build_code_index(load_local(sys.argv[1]), options, Path(sys.argv[3]))
if distributed.is_main():
    print(path)
distributed.shutdown()
"""


def test_a_code_index_encoded_by_two_ranks_is_the_one_process_index(tiny_pairs, tmp_path):
    import transformers

    from infra.encoders import load_encoder

    tokenizer, _ = load_encoder()
    encoder = tmp_path / "tiny-bert"
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    script = tmp_path / "build.py"
    script.write_text(BUILD)
    one = run_python_in(tmp_path, [str(script), str(tiny_pairs), str(encoder), str(tmp_path / "one")])
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_python_in(tmp_path, two_process_torchrun(str(script), str(tiny_pairs), str(encoder),
                                                       str(tmp_path / "two")))
    assert two.returncode == 0, two.stderr[-3000:]
    first, second = Path(one.stdout.strip()), Path(two.stdout.strip())
    assert first.name == second.name                                   # 96 documents, 6 shards, 3 per rank
    from indexes.codes import VERIFIED_FILES

    for name in VERIFIED_FILES:  # the index files: faiss index, document offsets and ids
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".")]   # no shards or temp left
