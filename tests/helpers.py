"""Helpers shared by the test modules (the re-ranker ones, and those of the benchmark scripts).

Each module keeps its own constants (``VOCAB``, ``WORDS``, model settings) and passes them in explicitly,
typically by binding them once with :func:`functools.partial` at the top of the module.
"""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch

from pipeline.core.atomic import write_text
from pipeline.core.datasets import Dataset
from pipeline.core.records import Doc, Qrel, Query, ScoredDoc
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


def assert_padding_never_changes_a_score(score, pad, columns, extra_q=3, extra_d=9, garbage_alone=None):
    """The contract every word-level model keeps: a pair scores the same alone (padded to its own length) as
    inside a batch padded ``extra_q`` / ``extra_d`` positions wider, whose padding holds random ids that only
    the masks hide.

    Args:
        score: the model's scores of one padded batch, e.g. ``lambda batch: model(*batch)``.
        pad: the module's ``pad_batch`` (``pad(*columns, extra_q=..., extra_d=...)``).
        columns: the pairs as parallel lists (queries, docs[, idfs]) as ``random_pairs`` returns them.
        extra_q, extra_d: the extra padding of the batch.
        garbage_alone: passed to ``pad`` as ``garbage`` for the pairs alone (``None``: ``pad``'s default).

    Example:
        >>> assert_padding_never_changes_a_score(lambda b: model(*b), pad_batch, random_pairs(6, seed=2))  # doctest: +SKIP
    """
    alone_options = {} if garbage_alone is None else {"garbage": garbage_alone}
    with torch.no_grad():
        alone = torch.cat([score(pad(*[[value] for value in pair], **alone_options)) for pair in zip(*columns)])
        batched = score(pad(*columns, extra_q=extra_q, extra_d=extra_d))
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


class NothingToLearn:
    """The parts of a test's plugin re-ranker that has nothing to learn (its subclass sets ``name`` and
    ``score``): ``fit`` does nothing, ``save`` writes a marker checkpoint naming the re-ranker (the model cache
    needs one), ``load`` gives a fresh instance. ``tests/test_config.py`` keeps a standalone plugin written
    as the README shows."""

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


def ctrl_c_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child a test sends SIGINT to: Ctrl-C's default disposition, as a command started
    at a terminal has it. A test suite started in the background by a shell without job control inherits
    SIGINT *ignored*, and Python then never raises KeyboardInterrupt in the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
