"""How texts become a word-level re-ranker's inputs: the text options (:class:`TextConfig`: lengths,
embeddings, vocabulary size) and what is prepared once from the collection (:class:`PreparedVocabulary`:
the vocabulary, the IDF statistics and the embeddings, kept on disk under the home's ``cache/vocabulary`` and
read back by the next preparation with the same key). :class:`rerankers.neural.WordReranker` inherits them."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pipeline.core.errors import CheckpointError
from pipeline.core.vocabulary import IDFStatistics, Vocabulary, ngrams, tokenize

from infra.checkpoints import load_checkpoint, save_checkpoint
from .embeddings import load_embeddings

# the word-level base's logger: these messages were written under it before they moved here
log = logging.getLogger("rerankers.neural")


@dataclass
class TextConfig:
    """How texts become tensors (each can be set with ``--set name=value``)."""

    max_query_length: int = 16
    max_doc_length: int = 64
    embeddings: str = "glove-6b-50d"   # glove-6b-50d | word2vec | random | path to a GloVe/word2vec text file
    embedding_dim: int = 300           # for word2vec and random (GloVe files fix their own)
    freeze_embeddings: bool = False
    max_vocabulary: int = 400_000
    oov_init: str = "positive"          # rows of words the embeddings lack: positive | symmetric (embeddings.py)


class PreparedVocabulary:
    """The vocabulary, IDF statistics and embeddings of a collection, and the fresh module built on them (a
    mixin of :class:`~rerankers.neural.WordReranker`, which sets ``text_config``, ``phrase_lengths``,
    ``seed`` and ``name`` and defines ``_tokens`` and ``build_module``)."""

    def prepare(self, train, dataset) -> None:
        """Vocabulary and IDF over ``dataset``'s documents and queries, embeddings, and a fresh module.

        The three are kept on disk (:meth:`_prepared_path`, under the home's ``cache/vocabulary``) and read
        back by the next preparation with the same key: the same documents and queries, phrase lengths and text
        options (and training queries for ``word2vec``), e.g. every fold of a k-fold dataset, a retraining
        with other model options or seeds of GloVe models. Tokenizing and counting a collection is most of a
        small model's start-up (~15 s for Microblog's 170k tweets on an idle core); a first run still pays it.

        Args:
            train: the training set (its queries and candidates train ``word2vec`` embeddings).
            dataset: the collection whose documents and queries give the vocabulary and IDF.
        """
        import torch

        config = self.text_config
        docs = list(dataset.docs_iter())
        path = self._prepared_path(train, dataset, docs)
        cached = self._read_prepared(path) if path is not None else None
        if cached is not None:
            self.vocab, self.idf, weights = cached
            log.info("%s: vocabulary, IDF and embeddings read from %s", self.name, path)
        else:
            doc_tokens = [self._tokens(doc) for doc in docs]
            query_tokens = [tokenize(q.text) for q in dataset.queries.values()]
            self.vocab = Vocabulary.build([*query_tokens, *doc_tokens], max_size=config.max_vocabulary)
            phrases = [g for tokens in query_tokens for n in self.phrase_lengths if n > 1 for g in ngrams(tokens, n)]
            self.idf = IDFStatistics.build(doc_tokens, phrases, max_n=max(self.phrase_lengths))
            train_texts = [tokenize(q.text) for q in train.queries.values()]
            # each candidate document once: a document in many candidate lists would otherwise be repeated in
            # the corpus (over-weighted, and word2vec's training time grows with depth x queries)
            candidate_ids = dict.fromkeys(h.doc_id for hits in train.candidates.values() for h in hits)
            train_texts += [self._tokens(train.docs[doc_id]) for doc_id in candidate_ids]
            weights = load_embeddings(config.embeddings, self.vocab, train_texts, config.embedding_dim, self.seed,
                                      config.oov_init)
            if path is not None:
                self._write_prepared(path, weights)
        torch.manual_seed(self.seed)
        self.embedding_shape = tuple(weights.shape)
        self.module = self.build_module(torch.from_numpy(weights))
        log.info("%s: vocabulary %d, embeddings %s %s", self.name, len(self.vocab), config.embeddings, weights.shape)

    #: bump when what :meth:`prepare` computes changes, so older cached preparations are not read
    PREPARED_VERSION: ClassVar[int] = 1

    def _prepared_path(self, train, dataset, docs) -> Path | None:
        """Where :meth:`prepare`'s vocabulary, IDF and embeddings for ``(train, dataset)`` are kept, or
        ``None`` with ``PIPELINE_PREPARED_CACHE=0``. The key holds everything the three depend on, the texts
        themselves included (a hash of every document's and query's id and text, a fraction of a second
        for Microblog), so a dataset built in memory under a reused name or fingerprint never reads another's."""
        import hashlib
        import json
        import os

        from pipeline.core.home import home

        if os.environ.get("PIPELINE_PREPARED_CACHE", "1") == "0":
            return None
        texts = hashlib.sha1()
        for doc in docs:
            texts.update(f"{doc.doc_id}\t{doc.text}\n".encode("utf-8", "surrogatepass"))
        for query in dataset.queries.values():
            texts.update(f"{query.query_id}\t{query.text}\n".encode("utf-8", "surrogatepass"))
        config = self.text_config
        key = {"version": self.PREPARED_VERSION, "texts": texts.hexdigest(), "tokens": type(self)._tokens.__qualname__, "phrases": list(self.phrase_lengths),
               "embeddings": config.embeddings, "dim": config.embedding_dim, "max_vocabulary": config.max_vocabulary,
               "oov_init": config.oov_init, "seed": self.seed}
        if config.embeddings == "word2vec":  # trained on the training queries and their candidates
            key["train"] = sorted(train.queries), sorted({h.doc_id for hits in train.candidates.values() for h in hits})
        elif Path(config.embeddings).is_file():
            stat = Path(config.embeddings).stat()
            key["file"] = [str(Path(config.embeddings).resolve()), stat.st_size, stat.st_mtime_ns]
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return home() / "cache" / "vocabulary" / f"{digest}.pt"

    def _read_prepared(self, path: Path):
        """``(vocab, idf, weights)`` from ``path``, or ``None`` when it is missing or damaged (then rebuilt)."""
        if not path.is_file():
            return None
        try:
            payload = load_checkpoint(path, "cached vocabulary")
            return (Vocabulary(list(payload["vocab"])), IDFStatistics.from_json(payload["idf"]),
                    payload["embeddings"].numpy())
        except (CheckpointError, KeyError, ValueError, TypeError, AttributeError) as error:
            log.warning("%s: ignoring the cached vocabulary %s (%s); rebuilding it", self.name, path, error)
            return None

    def _write_prepared(self, path: Path, weights) -> None:
        import torch

        try:
            save_checkpoint(path, {"vocab": self.vocab.tokens, "idf": self.idf.to_json(),
                                   "embeddings": torch.from_numpy(weights)})
        except OSError as error:  # a read-only home only costs the next run the rebuild
            log.warning("%s: could not cache the vocabulary in %s (%s)", self.name, path, error)
