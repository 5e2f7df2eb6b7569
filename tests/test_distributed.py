"""Data-parallel training under torchrun (rerankers/training/distributed.py), with 2 CPU processes (gloo):
the same global batch gives the same losses and final weights as one process, within float rounding (the
two shares are padded and summed separately); rank 0 alone writes the checkpoint.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_framework import TOPICS, write_pairs

ROOT = Path(__file__).resolve().parent.parent

#: float32 sums in another order (two shares, then all_reduce) move weights by about 1e-7 per step
TOLERANCE = 1e-5

TRAIN = """
import sys, torch
from pipeline.core.datasets import load_local
from rerankers.training import distributed
from tests.test_framework import train_tiny

distributed.init_from_environment()
torch.set_num_threads(1)
reranker, report, _ = train_tiny(load_local(sys.argv[1]), epochs=3, batch_size=8, dropout=0.0)
if distributed.is_main():
    torch.save({"state": reranker.module.state_dict(), "losses": [e.loss for e in report.epochs],
                "dev": [e.dev_score for e in report.epochs], "world": distributed.world_size()}, sys.argv[2])
distributed.shutdown()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pairs")
    write_pairs(root / "train", 1, TOPICS[:8])
    write_pairs(root / "dev", 2, TOPICS[8:10])
    write_pairs(root / "test", 3, TOPICS[10:])
    return root


def test_two_processes_train_the_weights_one_process_trains(pairs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    single = run([str(script), str(pairs), str(tmp_path / "one.pt")], tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    double = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                  str(script), str(pairs), str(tmp_path / "two.pt")], tmp_path)
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = (torch.load(tmp_path / name, weights_only=True) for name in ("one.pt", "two.pt"))
    assert (one["world"], two["world"]) == (1, 2)
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), atol=TOLERANCE, rtol=0)
    assert two["dev"] == pytest.approx(one["dev"], abs=1e-4)  # rank 0's evaluation, decided once
    for name, weights in one["state"].items():
        torch.testing.assert_close(two["state"][name], weights, atol=TOLERANCE, rtol=0)
    assert not torch.equal(one["state"][name], torch.zeros_like(weights))


def test_pipeline_train_under_torchrun_writes_one_checkpoint_that_pipeline_run_loads(pairs, tmp_path, monkeypatch):
    models = tmp_path / "models"
    common = ["--dataset", str(pairs), "--reranker", "hcan", "--threads", "1", "--set", "embeddings=random",
              "--set", "embedding_dim=16", "--set", "num_filters=16", "--set", "hidden_dim=16", "--set",
              "num_layers=2", "--set", "query_slots=8", "--set", "epochs=2", "--set", "dropout=0.0"]
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(models))
    trained = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                   "-m", "pipeline.train", *common], tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert trained.stdout.count("test: ") == 1  # rank 0 reports
    assert len(list(models.rglob("hcan-*.pt"))) == 1 and not list(models.rglob("*.training-state"))
    ran = run(["-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "runs")], tmp_path)
    assert ran.returncode == 0 and "training hcan" not in ran.stderr, ran.stderr[-3000:]


def test_scoring_under_torchrun_writes_the_run_one_process_writes_byte_for_byte(tmp_path, monkeypatch):
    from pipeline.stages import RERANK_CHUNK_PAIRS

    many = [f"word{i} term{i % 37}" for i in range(RERANK_CHUNK_PAIRS // 8 + 200)]  # two chunks: one per rank
    pairs = tmp_path / "many"
    write_pairs(pairs / "train", 1, TOPICS[:8])
    write_pairs(pairs / "dev", 2, TOPICS[8:12])
    write_pairs(pairs / "test", 3, many)
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(tmp_path / "models"))
    common = ["--dataset", str(pairs), "--reranker", "hcan", "--threads", "1", "--set", "embeddings=random",
              "--set", "embedding_dim=16", "--set", "num_filters=16", "--set", "hidden_dim=16", "--set",
              "num_layers=2", "--set", "query_slots=8", "--set", "epochs=1", "--set", "dropout=0.0",
              "--batch-size", "4"]
    one = run(["-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "one")], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
               "-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "two")], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("run: ") == 1                               # rank 0 reports
    runs = sorted(p.name for p in (tmp_path / "one").glob("*.run"))
    assert runs and runs == sorted(p.name for p in (tmp_path / "two").glob("*.run"))   # alone and combined
    for name in runs:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()


RESUMABLE = """
import logging, sys, torch
logging.basicConfig(level=logging.INFO)
from pipeline.core.datasets import load_local
from pipeline.fitting import train_fold
from pipeline.protocols import make_protocol
from rerankers.training import distributed
from rerankers.training.loop import Trainer
from tests.test_framework import TINY

mode, data, model, out = sys.argv[1:5]
if mode == "interrupt":  # rank 0 dies right after writing epoch 2's training state
    save_state = Trainer.save_state
    def save_then_die(self, path, state):
        save_state(self, path, state)
        if state["epoch"] == 2:
            raise SystemExit(3)
    Trainer.save_state = save_then_die
distributed.init_from_environment()
torch.set_num_threads(1)
dataset = load_local(data)
fold = make_protocol(dataset, None, 7)[0]
options = {**TINY, "epochs": 4, "patience": 10, "dropout": 0.0, "schedule": "linear", "warmup": 0.2, "batch_size": 8}
reranker, report = train_fold("hcan", dataset, fold, dataset.first_stage, options, 7, __import__("pathlib").Path(model))
if distributed.is_main():
    torch.save({"state": reranker.module.state_dict(), "losses": [e.loss for e in report.epochs]}, out)
distributed.shutdown()
"""


def test_an_interrupted_torchrun_training_resumes_from_rank_0s_state_to_the_same_weights(pairs, tmp_path):
    script = tmp_path / "resumable.py"
    script.write_text(RESUMABLE)

    def torchrun(mode, model, out):
        return run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                    str(script), mode, str(pairs), str(tmp_path / model), str(tmp_path / out)], tmp_path)

    whole = torchrun("full", "whole.pt", "whole.out")
    assert whole.returncode == 0, whole.stderr[-3000:]
    broken = torchrun("interrupt", "resumed.pt", "broken.out")
    assert broken.returncode != 0 and (tmp_path / "resumed.pt.training-state").is_file()
    resumed = torchrun("full", "resumed.pt", "resumed.out")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.count("resuming after epoch 2/4") == 2          # both ranks, from rank 0's state
    assert not (tmp_path / "resumed.pt.training-state").exists()
    one, two = (torch.load(tmp_path / name, weights_only=True) for name in ("whole.out", "resumed.out"))
    assert two["losses"] == one["losses"]
    for name, weights in one["state"].items():
        assert torch.equal(two["state"][name], weights), name


BUILD = """
import sys, faiss, torch
from pathlib import Path
from pipeline.core.datasets import load_local
from indexes.codes import CodeOptions, build_code_index
from rerankers.training import distributed

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


def test_a_code_index_encoded_by_two_ranks_is_the_one_process_index(pairs, tmp_path):
    import transformers

    from rerankers.encoders import load_encoder

    tokenizer, _ = load_encoder()
    encoder = tmp_path / "tiny-bert"
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    script = tmp_path / "build.py"
    script.write_text(BUILD)
    one = run([str(script), str(pairs), str(encoder), str(tmp_path / "one")], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
               str(script), str(pairs), str(encoder), str(tmp_path / "two")], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    first, second = Path(one.stdout.strip()), Path(two.stdout.strip())
    assert first.name == second.name                                   # 96 documents, 6 shards, 3 per rank
    for name in ("faiss.index", "token_docs.npy", "doc_ids.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".")]   # no shards or temp left
