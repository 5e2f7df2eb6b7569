"""Data-parallel training under torchrun (infra/distributed.py: DistributedDataParallel), with 2
CPU processes (gloo).

Two twins. With dropout 0, the same global batch gives the same losses and final weights as one process,
within float rounding (the two shares are padded and summed separately). With the model's default dropout
(HCAN: 0.1) the ranks draw their own masks (seed + rank), so 2 processes cannot equal 1 process bit for bit;
what must hold exactly is DDP's property, the same weights on every rank after every optimizer step, and
training must behave like one process within the spread of dropout draws (:data:`LOSS_TOLERANCE`,
:data:`DEV_TOLERANCE`). Rank 0 alone writes the checkpoint; scoring gives the one-process run byte for byte;
an interrupted run resumes to the same weights, dropout included; a barrier waits the configured timeout.
"""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY_HCAN as TINY, TOPICS, write_pairs, write_tiny_pairs
from tests.helpers import DDP_TRAINING_SCRIPT as TRAIN, free_port, train_addax, train_hcan  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

#: dropout 0: float32 sums in another order (two shares, then all_reduce) move weights by about 1e-7 per step
TOLERANCE = 1e-5
#: default dropout: |2-process epoch loss - 1-process epoch loss|. One process, 3 epochs, its dropout masks
#: drawn from 8 different seeds (nothing else changed), gave epoch losses within 0.0009, 0.0032 and 0.0038 of
#: each other (2026-11-25); 2 processes change only the masks (rank 1 draws from seed + 1), so 0.01 is
#: 2.6x the widest spread seen
LOSS_TOLERANCE = 0.01
#: default dropout: |2-process - 1-process| dev AP after 3 epochs. The same 8 draws ended between .329 and
#: .488 (2 dev queries: one swapped document moves AP by ~.1), at most .083 from the reference draw
DEV_TOLERANCE = 0.2


def run(args, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    return write_tiny_pairs(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="module")
def two_ranks(pairs, tmp_path_factory) -> dict:
    from tests.helpers import make_tiny_encoder

    folder = tmp_path_factory.mktemp("ddp")
    script = folder / "train.py"
    script.write_text(TRAIN)
    encoder = make_tiny_encoder(folder / "tiny-bert")
    double = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                  str(script), str(pairs), str(folder / "two.pt"), encoder], folder)
    assert double.returncode == 0, double.stderr[-3000:]
    return torch.load(folder / "two.pt", weights_only=True)


def test_ddp_keeps_every_ranks_weights_identical_after_every_step(two_ranks):
    assert two_ranks["world"] == 2
    # HCAN uses every parameter; ADDAX's BERT pooler gets no gradient, so DDP must look for unused ones
    assert two_ranks["made"] == [("DistributedDataParallel", False)] * 2 + [("DistributedDataParallel", True)]
    # HCAN: 2 trainings x 3 epochs x 10 batches (8 queries x 2 positives x (1 + 4 negatives) pointwise units / 8);
    # ADDAX: 32 hinge pairs in batches of 4 pairs
    assert (two_ranks["hcan_steps"], two_ranks["steps"]["checked"]) == (2 * 3 * 10, 2 * 3 * 10 + 8)
    assert two_ranks["steps"]["differed"] == 0
    assert len(two_ranks["addax"]["losses"]) == 1 and 0 < two_ranks["addax"]["losses"][0] < 10


def test_two_processes_train_the_weights_one_process_trains_with_dropout_0(pairs, two_ranks):
    torch.set_num_threads(1)
    one, two = train_hcan(pairs, dropout=0.0), two_ranks["zero"]    # 1 process, no accumulation
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), atol=TOLERANCE, rtol=0)
    assert two["dev"] == pytest.approx(one["dev"], abs=1e-4)  # rank 0's evaluation, decided once
    for name, weights in one["state"].items():
        torch.testing.assert_close(two["state"][name], weights, atol=TOLERANCE, rtol=0)
    assert not torch.equal(one["state"][name], torch.zeros_like(weights))


def test_two_processes_train_like_one_process_with_the_default_dropout(pairs, two_ranks):
    torch.set_num_threads(1)
    one, two = train_hcan(pairs), two_ranks["default"]
    assert one["dropout"] == two["dropout"] > 0                    # the model's default, not a test shortcut
    for losses in (one["losses"], two["losses"]):
        assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] - 0.03   # it learns
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), atol=LOSS_TOLERANCE,
                               rtol=0)
    assert abs(two["dev"][-1] - one["dev"][-1]) <= DEV_TOLERANCE
    # not a copy of one process: the masks differ, so the weights do (a little)
    assert any(not torch.equal(two["state"][name], weights) for name, weights in one["state"].items())


def test_accumulated_micro_batches_take_the_step_of_the_whole_batch(pairs):
    from pipeline.core.errors import PipelineError
    from rerankers.training.config import TrainConfig

    torch.set_num_threads(1)
    whole, parts = (train_hcan(pairs, dropout=0.0, epochs=1, accumulation_steps=n) for n in (1, 3))
    torch.testing.assert_close(torch.tensor(parts["losses"]), torch.tensor(whole["losses"]), atol=TOLERANCE, rtol=0)
    for name, weights in whole["state"].items():
        torch.testing.assert_close(parts["state"][name], weights, atol=TOLERANCE, rtol=0)
    with pytest.raises(PipelineError, match="accumulation_steps must be >= 1"):
        TrainConfig(accumulation_steps=0)


def test_the_process_group_waits_hours_by_default_or_the_configured_time(monkeypatch):
    import torch.distributed as dist

    from pipeline.core.errors import PipelineError
    from infra import distributed

    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: calls.append((backend, kwargs)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("PIPELINE_DIST_TIMEOUT_S", raising=False)
    assert distributed.init_from_environment()
    monkeypatch.setenv("PIPELINE_DIST_TIMEOUT_S", "90.5")
    distributed.init_from_environment()
    assert calls == [("gloo", {"timeout": datetime.timedelta(hours=12)}),
                     ("gloo", {"timeout": datetime.timedelta(seconds=90.5)})]
    assert distributed.DEFAULT_TIMEOUT_S >= 4 * 3600 > 30 * 60    # torch's own default is 30 min
    for bad in ("0", "-5", "soon", "inf"):
        monkeypatch.setenv("PIPELINE_DIST_TIMEOUT_S", bad)
        with pytest.raises(PipelineError, match="PIPELINE_DIST_TIMEOUT_S=.*positive number of seconds"):
            distributed.init_from_environment()
    assert len(calls) == 2


WAIT = """
import sys, time
from infra import distributed

distributed.init_from_environment()
if distributed.rank() == 0:  # a phase rank 0 runs alone (training the code encoder, assembling an index)
    time.sleep(float(sys.argv[1]))
distributed.barrier()
print("rank", distributed.rank(), "passed the barrier", flush=True)
distributed.shutdown()
"""


def test_a_barrier_fails_only_after_the_configured_timeout(tmp_path, monkeypatch):
    script = tmp_path / "wait.py"
    script.write_text(WAIT)
    monkeypatch.setenv("PIPELINE_DIST_TIMEOUT_S", "1.5")
    waited = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                  str(script), "6"], tmp_path)
    assert waited.returncode != 0 and "passed the barrier" not in waited.stdout
    assert "Timed out waiting 1500ms" in waited.stderr, waited.stderr[-3000:]   # the configured time, not 30 min


def test_pipeline_train_under_torchrun_writes_one_checkpoint_that_pipeline_run_loads(pairs, tmp_path, monkeypatch):
    models = tmp_path / "models"
    common = ["--dataset", str(pairs), "--reranker", "hcan", "--threads", "1", "--set", "embeddings=random",
              "--set", "embedding_dim=16", "--set", "num_filters=16", "--set", "hidden_dim=16", "--set",
              "num_layers=2", "--set", "query_slots=8", "--set", "epochs=2"]   # the default dropout
    monkeypatch.setenv("PIPELINE_MODEL_DIR", str(models))
    trained = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                   "-m", "pipeline.train", *common], tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert trained.stdout.count("test: ") == 1  # rank 0 reports
    assert len(list(models.rglob("hcan-*.pt"))) == 1 and not list(models.rglob("*.training-state"))
    ran = run(["-m", "pipeline.run", *common, "--output-dir", str(tmp_path / "runs")], tmp_path)
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
from pipeline.engine.fitting import train_fold
from pipeline.engine.protocols import make_protocol
from infra import distributed
from rerankers.training.loop import Trainer
from tests.helpers import TINY_HCAN as TINY

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
# the default dropout: each rank's own generator is saved and put back (seed + rank)
options = {**{k: v for k, v in TINY.items() if k != "dropout"}, "epochs": 4, "patience": 10, "schedule": "linear",
           "warmup": 0.2, "batch_size": 8}
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


def test_a_code_index_encoded_by_two_ranks_is_the_one_process_index(pairs, tmp_path):
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
    one = run([str(script), str(pairs), str(encoder), str(tmp_path / "one")], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
               str(script), str(pairs), str(encoder), str(tmp_path / "two")], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    first, second = Path(one.stdout.strip()), Path(two.stdout.strip())
    assert first.name == second.name                                   # 96 documents, 6 shards, 3 per rank
    from indexes.codes import VERIFIED_FILES

    for name in VERIFIED_FILES:  # the index files: faiss index, document offsets and ids
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".")]   # no shards or temp left
