"""Helpers shared by the test modules: every constant, builder and fixture more than one module uses lives here,
so that no test module imports another.

Constants only one module uses (``VOCAB``, ``WORDS``, model settings) stay in it and are passed in explicitly,
typically by binding them once with :func:`functools.partial` at the top of the module.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from pipeline.core.atomic import write_text
from pipeline.core.datasets import Dataset
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
from pipeline.engine.fitting import untrained_reranker
from pipeline.engine.protocols import PerQueryReranker, make_protocol
from rerankers import reranker_class
from rerankers.hcan import HCANReranker
from rerankers.training.data import RankingData


def load_benchmark(name: str):
    """The module of script ``benchmarks/<name>.py`` (scripts are not a package), imported from its file."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TrainingInterrupted(Exception):
    """Stands for a training killed right after it saved an epoch's state (see :func:`interrupt_after_epoch`)."""


def interrupt_after_epoch(monkeypatch, epoch: int) -> None:
    """Make every :class:`~rerankers.training.loop.Trainer` raise :class:`TrainingInterrupted` right after it has
    saved the training state of ``epoch`` (undo with ``monkeypatch.undo()``)."""
    from rerankers.training.loop import Trainer

    save_state = Trainer.save_state

    def save_then_die(self, state_path, state):
        save_state(self, state_path, state)
        if state["epoch"] == epoch:
            raise TrainingInterrupted

    monkeypatch.setattr(Trainer, "save_state", save_then_die)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Run the importing module on one torch intra-op thread, restoring the previous setting afterwards.

    Tiny tensors gain nothing from intra-op threads, and on a shared 2-core machine OpenMP's spinning
    threads make these tests ~10x slower. Import this fixture into a test module to make it autouse there.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pad_batch(queries, docs, extra_q=0, extra_d=0, garbage=True, *, vocab):
    """Right-pad pairs of id lists into ``(q_ids, q_mask, d_ids, d_mask)``.

    The padded width is the longest query/doc plus ``extra_q``/``extra_d``. With ``garbage`` the padding
    positions get random ids in ``[2, vocab)`` (the masks alone must hide them); otherwise they are 0.
    """
    lq, ld, b = max(map(len, queries)) + extra_q, max(map(len, docs)) + extra_d, len(queries)
    if garbage:
        q_ids, d_ids = torch.randint(2, vocab, (b, lq)), torch.randint(2, vocab, (b, ld))
    else:
        q_ids, d_ids = torch.zeros(b, lq, dtype=torch.long), torch.zeros(b, ld, dtype=torch.long)
    q_mask, d_mask = torch.zeros(b, lq, dtype=torch.bool), torch.zeros(b, ld, dtype=torch.bool)
    for row, (q, d) in enumerate(zip(queries, docs)):
        q_ids[row, : len(q)], q_mask[row, : len(q)] = torch.tensor(q), True
        d_ids[row, : len(d)], d_mask[row, : len(d)] = torch.tensor(d), True
    return q_ids, q_mask, d_ids, d_mask


def random_pairs(num, seed, max_q=6, max_d=12, *, vocab):
    """``num`` seeded random (query, doc) id lists of lengths 1..``max_q`` / 1..``max_d``, ids in ``[2, vocab)``."""
    gen = torch.Generator().manual_seed(seed)
    queries, docs = [], []
    for _ in range(num):
        lq = int(torch.randint(1, max_q + 1, (1,), generator=gen))
        ld = int(torch.randint(1, max_d + 1, (1,), generator=gen))
        queries.append(torch.randint(2, vocab, (lq,), generator=gen).tolist())
        docs.append(torch.randint(2, vocab, (ld,), generator=gen).tolist())
    return queries, docs


class NothingToLearn:
    """The parts of a test's plugin re-ranker that has nothing to learn (its subclass sets ``name`` and
    ``score``): ``fit`` does nothing, ``save`` writes a marker checkpoint naming the re-ranker (the model cache
    needs one), ``load`` gives a fresh instance. ``tests/pipeline/engine/test_config.py`` keeps a standalone
    plugin written as the README shows."""

    name = "nothing-to-learn"

    def fit(self, train, dev=None, state_path=None):
        """Nothing to learn."""
        return None

    def save(self, path):
        """A marker file naming the re-ranker (written atomically, its folder made if need be)."""
        write_text(path, json.dumps({"reranker": self.name}))

    @classmethod
    def load(cls, path):
        """The same scorer."""
        return cls()


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    """Run the importing module's faiss searches on one OpenMP thread (import it, like
    :func:`one_torch_thread`, to make it autouse there)."""
    import faiss

    faiss.omp_set_num_threads(1)
    yield


def save_tiny_bert(folder: Path) -> str:
    """A random 2-layer BERT (hidden 32, BERT's default dropout 0.1, seed 0) saved in ``folder`` with MiniLM's
    tokenizer: a local encoder directory for the code and dense first stages; ``folder`` as a string."""
    import transformers

    from infra.encoders import load_encoder

    tokenizer, _ = load_encoder()
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    """A random 2-layer BERT (hidden 32) saved with MiniLM's tokenizer: a local encoder directory (per module)."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def assert_the_loss_falls(report, epochs):
    """``report`` (a training report) has one loss per epoch, ``epochs`` of them, the last below the first."""
    losses = [epoch.loss for epoch in report.epochs]
    assert len(losses) == epochs, losses
    assert losses[-1] < losses[0], losses


def tiny_dataset(words, seed=0, num_queries=16):
    """A synthetic :class:`Dataset` over the vocabulary ``words``, with a first-stage run and one
    ``train`` split.

    Queries have 3 words; per query one relevant answer shares 2 of them, and 3 answers share none.
    """
    rng = random.Random(seed)
    queries, docs, qrels, run = {}, {}, [], {}
    for number in range(num_queries):
        qid = f"q{number}"
        query_words = rng.sample(words, 3)
        others = [w for w in words if w not in query_words]
        queries[qid] = Query(qid, " ".join(query_words))
        texts = [rng.sample(query_words, 2) + rng.sample(others, 4)] + [rng.sample(others, 6) for _ in range(3)]
        for rank, tokens in enumerate(texts):
            rng.shuffle(tokens)
            doc_id = f"{qid}-d{rank}"
            docs[doc_id] = Doc(doc_id, " ".join(tokens))
            qrels.append(Qrel(qid, doc_id, 1 if rank == 0 else 0))
        order = rng.sample(range(4), 4)
        run[qid] = [ScoredDoc(qid, f"{qid}-d{r}", -float(i)) for i, r in enumerate(order)]
    splits = {"train": list(queries)}
    return Dataset("tiny", queries, qrels, lambda: docs.values(), "tiny", splits, run, _store=docs)


def write_vectors(path, words, dim=12, seed=0):
    """Write seeded random ``dim``-dimensional text word vectors for ``words`` to ``path``; return it as a str."""
    gen = torch.Generator().manual_seed(seed)
    lines = [w + " " + " ".join(f"{v:.5f}" for v in torch.randn(dim, generator=gen).tolist()) for w in words]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def fit_on_tiny_dataset(cls, tmp_path, words, settings, **options):
    """Train ``cls`` (a re-ranker class) on :func:`tiny_dataset` with random vectors for ``words``.

    ``settings`` are the module's default options (after the embeddings file), ``options`` override them.
    Returns ``(reranker, report, train)``.
    """
    dataset = tiny_dataset(words)
    train = RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage)
    merged = dict(embeddings=write_vectors(tmp_path / "vectors.txt", words), **settings)
    merged.update(options)
    reranker = cls.from_options(merged, seed=3)
    reranker.prepare(train, dataset)
    report = reranker.fit(train)
    return reranker, report, train


def relevant_wins(reranker, train) -> int:
    """Training queries whose first relevant document outscores one random (seeded by query id) negative."""
    import random

    wins = 0
    for query_id, query in train.queries.items():
        positive = train.docs[train.positives(query_id)[0]]
        negative = train.docs[random.Random(query_id).choice(train.negatives(query_id))]
        relevant, other = reranker.score(query, [positive, negative])
        wins += relevant > other
    return wins


def assert_the_tiny_fit_overfits(reranker, report, train, factor: float) -> None:
    """The last epoch's loss is below ``factor`` times the first's and every training query's relevant document
    outscores its random negative (:func:`relevant_wins`)."""
    losses = [epoch.loss for epoch in report.epochs]
    assert losses[-1] < factor * losses[0], losses
    assert relevant_wins(reranker, train) == len(train.queries)


def overfit_one_batch(model, batch, loss_of, steps: int, lr: float) -> tuple[list[float], torch.Tensor]:
    """Train ``model`` on the one ``batch`` with Adam for ``steps`` steps.

    Args:
        model: the module; called as ``model(*batch)``.
        batch: its inputs.
        loss_of: the loss of the model's scores of ``batch``.
        steps: optimizer steps.
        lr: Adam's learning rate.

    Returns:
        The loss of every step and, afterwards (eval mode, no gradients), the model's scores of ``batch``.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model(*batch))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        return losses, model(*batch)


def assert_garbage_and_missing_checkpoints_fail(reranker_class, folder: Path) -> None:
    """``reranker_class.load`` of a file that is no checkpoint, and of a missing file, raises a
    CheckpointError naming the file and what is wrong with it."""
    from pipeline.core.errors import CheckpointError

    garbage = folder / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="garbage.pt: not a readable checkpoint"):
        reranker_class.load(garbage)
    with pytest.raises(CheckpointError, match="missing.pt: .*not found"):
        reranker_class.load(folder / "missing.pt")


def ctrl_c_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child a test sends SIGINT to: Ctrl-C's default disposition, as a command started
    at a terminal has it. A test suite started in the background by a shell without job control inherits
    SIGINT *ignored*, and Python then never raises KeyboardInterrupt in the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# ---------------------------------------------------------------- shared by several test modules
# Each block below was defined in one test module and imported from it by others; it lives here so that
# no test module imports another.


# -- a tiny random BERT with MiniLM's tokenizer, and a query with documents for it

ENCODER_WORDS = ["apple", "river", "mountain", "guitar", "window", "coffee", "tiger", "planet", "garden",
                 "silver", "doctor", "engine", "forest", "winter", "castle", "rocket", "violin", "desert", "island",
                 "bridge"]
ENCODER_QUERY = Query("q1", "who founded the power station band")
ENCODER_DOCS = [
    Doc("d1", "power station is a taiwanese pop rock group founded in 1994 by two singers"),
    Doc("d2", "a power station is a factory that burns coal to make electricity"),
    Doc("d3", "tigers live in forests"),
    Doc("d4", ""),
    Doc("d5", "the band released many albums and toured across asia for a decade with great success"),
]


def make_tiny_encoder(folder) -> str:
    """A random 2-layer, 32-wide BERT with the MiniLM tokenizer, saved to ``folder``."""
    from transformers import BertConfig, BertModel

    from infra.encoders import load_encoder

    tokenizer, _ = load_encoder()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


# -- every re-ranker built small, and a collection whose queries batch together

TRANSFORMER_RERANKERS = {"cross-encoder", "bi-encoder", "addax", "addax-no-mags", "addax-no-hw", "addax-no-hd",
                         "addax-att-mags"}
#: per-query and cross-query scores may differ by float rounding only
BATCHING_TOLERANCE = 1e-5


def varied_dataset(seed: int = 0) -> Dataset:
    """Seven queries of 1-5 words with 0-9 candidates of 1-24 words each; document ``shared`` is a candidate
    of the first three queries (and of the first query twice, under the same id)."""
    rng = random.Random(seed)
    queries, docs, qrels, run = {}, {"shared": Doc("shared", " ".join(ENCODER_WORDS[:7]))}, [], {}
    for number in range(7):
        qid = f"q{number}"
        queries[qid] = Query(qid, " ".join(rng.sample(ENCODER_WORDS, rng.randint(1, 5))))
        ids = [f"{qid}-d{i}" for i in range(0 if number == 6 else rng.randint(2, 9))]
        for doc_id in ids:
            docs[doc_id] = Doc(doc_id, " ".join(rng.choice(ENCODER_WORDS) for _ in range(rng.randint(1, 24))))
        if number < 3:
            ids.insert(rng.randrange(len(ids) + 1), "shared")
        if number == 0:
            ids.append("shared")
        run[qid] = [ScoredDoc(qid, doc_id, -float(rank)) for rank, doc_id in enumerate(ids)]
        qrels += [Qrel(qid, doc_id, int(rank == 0)) for rank, doc_id in enumerate(ids)]
    return Dataset("varied", queries, qrels, lambda: docs.values(), "varied", {"train": list(queries)}, run,
                   _store=docs)


def word_model(name: str, dataset: Dataset, seed: int = 1, **options):
    """Re-ranker ``name`` built small as the pipeline builds it (``from_options`` and ``prepare`` are
    optional: a plugin written as docs/plugins.md shows may have neither) and prepared on ``dataset``;
    ``options`` are its ``--set`` options (for a re-ranker with ``from_options``)."""
    cls = reranker_class(name)
    options = {"embeddings": "random", "embedding_dim": 16, **options} if hasattr(cls, "from_options") else {}
    reranker = untrained_reranker(cls, options, seed)
    if hasattr(reranker, "prepare"):
        reranker.prepare(RankingData.from_dataset(dataset, list(dataset.queries), dataset.first_stage), dataset)
    return reranker


def batched(reranker, items):
    """``reranker`` with ``score_many`` for ``items``' queries: itself, or (a plugin without it) as the
    pipeline scores it, query by query behind :class:`PerQueryReranker`."""
    if hasattr(reranker, "score_many"):
        return reranker
    return PerQueryReranker(reranker.name, {query.query_id: reranker for query, _ in items})


def transformer_model(name: str, encoder: str, seed: int = 1, **options):
    settings = {"encoder": encoder, "max_query_length": 8, "max_doc_length": 16, **options}
    if name.startswith("addax"):
        settings.update(hidden_dim=8, hash_hidden=8)
    reranker = reranker_class(name).from_options(settings, seed=seed)
    reranker.prepare()
    return reranker


# -- tiny Hugging Face classifiers over a 30-word vocabulary; the network refused

HF_WORDS = ["apple", "river", "mountain", "guitar", "window", "coffee", "tiger", "planet", "garden", "silver",
            "doctor", "engine", "forest", "winter", "castle", "rocket", "violin", "desert", "island", "bridge",
            "power", "station", "band", "founded", "rock", "pop", "group", "live", "in", "the"]
HF_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
HF_QUERY = Query("q1", "who founded the power station band")
HF_DOCS = [
    Doc("d1", "power station is a pop rock group founded by two singers"),
    Doc("d2", "a power station is a factory that burns coal"),
    Doc("d3", "tigers live in forests"),
    Doc("d4", ""),
    Doc("d5", "the band toured the island and the desert with a violin and a guitar"),
]
HF_POSITIONS = 64  # fewer than the default 32 + 180 + 3 word pieces: the document length must be lowered


@pytest.fixture(autouse=True)
def network_attempts(monkeypatch):
    """Refuse every connection and name lookup in this process and record the attempts; hub lookups see
    an offline hub at once (huggingface_hub reads HF_HUB_OFFLINE at import, so its constant is patched)."""
    import huggingface_hub.constants

    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network refused by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return attempts


def save_tiny_classifier(folder: Path, num_labels: int | None = 1, seed: int = 0) -> str:
    """A seeded tiny BERT saved with ``save_pretrained`` in ``folder`` with its tokenizer: a
    ``BertForSequenceClassification`` with ``num_labels`` labels, or a plain ``BertModel`` when None."""
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(HF_SPECIAL + HF_WORDS) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"))  # transformers 5 ignores ``vocab_file``
    assert tokenizer("power station")["input_ids"][1:3] == [len(HF_SPECIAL) + HF_WORDS.index(w)
                                                            for w in ("power", "station")]
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(HF_SPECIAL) + len(HF_WORDS), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=HF_POSITIONS,
                        initializer_range=0.5, num_labels=num_labels or 2)
    model = BertModel(config) if num_labels is None else BertForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def hf_logits(folder: str, query: Query, docs) -> torch.Tensor:
    """The logits ``[N, num_labels]`` of the saved model, on inputs built by its tokenizer (no project code)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    inputs = tokenizer([query.text] * len(docs), [d.text for d in docs], padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**inputs).logits


def write_collection(folder: Path) -> Path:
    """A 2-query TREC collection with a shipped first-stage run (no index to build)."""
    folder.mkdir()
    (folder / "topics.tsv").write_text("1\twho founded the power station band\n2\ttigers in the forest\n")
    (folder / "docs.tsv").write_text("".join(f"{d.doc_id}\t{d.text or 'the'}\n" for d in HF_DOCS))
    (folder / "qrels.txt").write_text("1 0 d1 1\n1 0 d2 0\n2 0 d3 1\n2 0 d5 0\n")
    (folder / "bm25.run").write_text("".join(f"{q} Q0 d{i} {i} {10 - i} bm25\n" for q in (1, 2) for i in range(1, 6)))
    (folder / "dataset.json").write_text(json.dumps({"format": "trec", "topics": "topics.tsv", "qrels": "qrels.txt",
                                                     "docs": "docs.tsv", "run": "bm25.run"}))
    return folder


# -- a tiny Lucene collection

LUCENE_DOCS = [
    Doc("cat", "the cat sat on the mat and purred at the cat food"),
    Doc("dog", "dogs are running in the park chasing a ball"),
    Doc("fox", "a quick brown fox jumps over the lazy hound"),
    Doc("quantum", "quantum physics describes particles with wave functions"),
    Doc("pets", "pets such as a cat or a parrot need food and care"),
    Doc("market", "the stock market fell sharply on monday"),
    # filler, so that the words above are rare enough for RM3 to use them (Anserini drops feedback terms
    # found in more than 10% of the documents)
    *(Doc(f"filler{i}", f"zzfill{i} yyword{i} xxterm{i}") for i in range(30)),
]


def tiny_lucene_dataset(name: str = "tiny", docs=LUCENE_DOCS, fingerprint: str = "tiny-v1") -> Dataset:
    queries = {"1": Query("1", "quantum particles"), "2": Query("2", "cat mat")}
    return Dataset(name, queries, [], lambda: list(docs), fingerprint)


# -- the tiny pair-format collection and the tiny HCAN trained on it

TINY_HCAN = {"num_filters": 16, "hidden_dim": 16, "num_layers": 2, "query_slots": 8, "embeddings": "random",
             "embedding_dim": 16, "epochs": 6, "learning_rate": 0.01, "batch_size": 16, "dropout": 0.0}
TOPICS = ["alpha bravo", "charlie delta", "echo foxtrot", "golf hotel", "india juliet", "kilo lima",
          "mike november", "oscar papa", "quebec romeo", "sierra tango", "uniform victor", "whiskey xray"]
FILLER_WORDS = "the a of in on and to is was for with as by at from".split()


def write_pairs(folder: Path, seed: int, topics: list[str], per_query: int = 8) -> None:
    """A pair-format split: per query, two relevant candidates (with the query words) and random others."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    rows = []
    for number, topic in enumerate(topics):
        for position in range(per_query):
            words = [rng.choice(FILLER_WORDS) for _ in range(rng.randint(4, 9))]
            relevant = position < 2
            if relevant:
                for word in topic.split():
                    words.insert(rng.randrange(len(words) + 1), word)
            else:  # distractor: a word from another topic
                words.insert(0, rng.choice(" ".join(topics).split()))
            rows.append((topic, " ".join(words), f"q{number}", int(relevant)))
    rng.shuffle(rows)
    rows.sort(key=lambda r: r[2])
    (folder / "a.toks").write_text("".join(r[0] + "\n" for r in rows))
    (folder / "b.toks").write_text("".join(r[1] + "\n" for r in rows))
    (folder / "id.txt").write_text("".join(r[2] + "\n" for r in rows))
    (folder / "sim.txt").write_text("".join(f"{r[3]}\n" for r in rows))


def write_tiny_pairs(root: Path) -> Path:
    """The tiny pair-format collection under ``root``: train on 8 topics, dev on 2, test on 2; ``root``."""
    write_pairs(root / "train", 1, TOPICS[:8])
    write_pairs(root / "dev", 2, TOPICS[8:10])
    write_pairs(root / "test", 3, TOPICS[10:])
    return root


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory) -> Path:
    """:func:`write_tiny_pairs` once per test module (a folder)."""
    return write_tiny_pairs(tmp_path_factory.mktemp("pairs"))


def two_process_torchrun(*args: str) -> list[str]:
    """The arguments of ``python -m torch.distributed.run`` with 2 processes on a free port, then ``args``."""
    return ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()), *args]


def run_python_in(folder: Path, args: list[str]) -> subprocess.CompletedProcess:
    """``conftest.run_python`` in ``folder`` with one OpenMP thread and no progress bars, 10 minutes at most
    (the torchrun tests' processes)."""
    from conftest import run_python  # here: the scripts those processes run import this module without tests/

    return run_python(args, timeout=600, cwd=folder, OMP_NUM_THREADS=1, TQDM_DISABLE=1)


def train_tiny(dataset, seed=7, use_dev=True, **extra):
    fold = make_protocol(dataset, None, seed)[0]
    reranker = HCANReranker.from_options({**TINY_HCAN, **extra}, seed=seed)
    train = RankingData.from_dataset(dataset, fold.train, dataset.first_stage)
    dev = RankingData.from_dataset(dataset, fold.dev, dataset.first_stage) if use_dev else None
    reranker.prepare(train, dataset)
    report = reranker.fit(train, dev)
    return reranker, report, fold


# -- data-parallel training under torchrun

#: one module-scoped torchrun trains both twins (imports dominate a run on a loaded two-core machine)
DDP_TRAINING_SCRIPT = """
import hashlib, sys, torch
from infra import distributed
from tests.helpers import train_addax, train_hcan

distributed.init_from_environment()
torch.set_num_threads(1)
made, steps = [], {"checked": 0, "differed": 0}
wrap = distributed.data_parallel
def recording(module, device, find_unused_parameters=False):
    wrapped = wrap(module, device, find_unused_parameters)
    made.append((type(wrapped).__name__, find_unused_parameters))
    return wrapped
distributed.data_parallel = recording
def same_weights_everywhere(optimizer, args, kwargs):  # after every optimizer step, on every rank
    digest = hashlib.sha256()
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            digest.update(parameter.detach().cpu().numpy().tobytes())
    steps["checked"] += 1
    steps["differed"] += len(set(distributed.gather_to_all(digest.hexdigest()))) > 1
from torch.optim.optimizer import register_optimizer_step_post_hook
register_optimizer_step_post_hook(same_weights_everywhere)
zero = train_hcan(sys.argv[1], dropout=0.0, accumulation_steps=2)   # no_sync() over 2 micro-batches per rank
default = train_hcan(sys.argv[1])
hcan_steps = steps["checked"]
addax = train_addax(sys.argv[1], sys.argv[3])   # BERT's pooler is unused: find_unused_parameters
if distributed.is_main():
    torch.save({"zero": zero, "default": default, "addax": addax, "made": made, "steps": steps,
                "hcan_steps": hcan_steps, "world": distributed.world_size()}, sys.argv[2])
distributed.shutdown()
"""


def train_hcan(data, **options) -> dict:
    """Train the tiny HCAN (:data:`TINY_HCAN`) with its model's default dropout unless ``options``
    set one: 3 epochs of batches of 8, fold 0 of seed 7; returns the weights, epoch losses and dev scores."""
    from pipeline.core.datasets import load_local
    from pipeline.engine.protocols import make_protocol
    from rerankers.hcan import HCANReranker
    from rerankers.training.data import RankingData

    dataset = load_local(data)
    fold = make_protocol(dataset, None, 7)[0]
    settings = {**{k: v for k, v in TINY_HCAN.items() if k != "dropout"}, "epochs": 3, "batch_size": 8, **options}
    reranker = HCANReranker.from_options(settings, seed=7)
    train = RankingData.from_dataset(dataset, fold.train, dataset.first_stage)
    dev = RankingData.from_dataset(dataset, fold.dev, dataset.first_stage)
    reranker.prepare(train, dataset)
    report = reranker.fit(train, dev)
    return {"state": {k: v.detach().clone() for k, v in reranker.module.state_dict().items()},
            "losses": [e.loss for e in report.epochs], "dev": [e.dev_score for e in report.epochs],
            "dropout": reranker.model_config.dropout}


def train_addax(data, encoder: str) -> dict:
    """One epoch of 32 pairs (8 steps) of a tiny ADDAX (random 2-layer BERT ``encoder``, default dropout)."""
    from pipeline.core.datasets import load_local
    from pipeline.engine.protocols import make_protocol
    from rerankers import reranker_class
    from rerankers.training.data import RankingData

    dataset = load_local(data)
    fold = make_protocol(dataset, None, 7)[0]
    reranker = reranker_class("addax").from_options(
        {"encoder": encoder, "max_query_length": 8, "max_doc_length": 16, "hidden_dim": 8, "hash_hidden": 8,
         "epochs": 1, "batch_size": 8, "max_examples_per_epoch": 32}, seed=7)
    train = RankingData.from_dataset(dataset, fold.train, dataset.first_stage)
    reranker.prepare(train, dataset)
    report = reranker.fit(train, None)
    return {"losses": [e.loss for e in report.epochs]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- a cache file damaged in place

def change_in_place(path: Path, offset: int | None = None, keep_mtime: bool = True) -> None:
    """Flip one bit of ``path`` (at ``offset``, default its middle) and restore its access and modification
    times, as a sync tool or ``touch -r`` would."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x04
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size


# ------------------------------------------------- toy collections with a shipped first-stage run

def toy_dataset(name: str, queries: int, candidates: int, relevant, score) -> Dataset:
    """``queries`` queries of ``candidates`` documents each, one of them relevant (``relevant(ids)`` picks it),
    which the shipped run scores ``score(rank)`` in the order of their ids."""
    qs, docs, qrels, run = {}, {}, [], {}
    for number in range(queries):
        qid = f"q{number}"
        qs[qid] = Query(qid, f"query {number}")
        ids = [f"{qid}-d{i}" for i in range(candidates)]
        for doc_id in ids:
            docs[doc_id] = Doc(doc_id, f"text of {doc_id}")
        chosen = relevant(ids)
        qrels += [Qrel(qid, d, int(d == chosen)) for d in ids]
        run[qid] = [ScoredDoc(qid, d, score(rank)) for rank, d in enumerate(ids)]
    return Dataset(name, qs, qrels, lambda: docs.values(), name, {}, run, _store=docs)


class Noise:
    """A given checkpoint whose scores carry no information (seeded by the query and document ids)."""

    name = "noise"

    def score(self, query, docs):
        return [random.Random(f"{query.query_id}/{doc.doc_id}").random() for doc in docs]

    def fit(self, train, dev=None, state_path=None):
        return None

    def save(self, path):
        Path(path).write_text("noise")

    @classmethod
    def load(cls, path):
        return cls()


def graded_dataset(queries: int = 60) -> Dataset:
    """``queries`` queries of 10 candidates with one relevant each, which the shipped run ranks 1st to 5th."""
    rng = random.Random(7)
    return toy_dataset("graded-toy", queries, 10, lambda ids: ids[rng.randrange(5)], lambda rank: 10.0 - rank)
