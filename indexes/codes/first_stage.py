"""The registered factories of the learned-code first stages, ``codes`` and ``colbert``, and their options
classes: light to import (reading a first stage's options class needs no torch, so a bad ``--fs-set`` is
answered fast); the search itself is :mod:`indexes.codes.search`, imported when a first stage is built."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.core.datasets import Dataset

from ..options import FirstStageOptions, FirstStageSettings
from .options import CodeOptions, code_option


class _KindFromName(FirstStageOptions):
    @classmethod
    def from_options(cls, options):
        """As :meth:`FirstStageOptions.from_options`; ``kind`` is the first stage's name, not an option."""
        from pipeline.core.errors import ConfigError

        if "kind" in options and options["kind"] != cls.kind:
            raise ConfigError(f"kind is the first stage's name ({cls.kind}), not an option; use --first-stage "
                              f"{'colbert' if cls.kind == 'codes' else 'codes'}")
        return super().from_options(options)


@dataclass(frozen=True)
class CodesOptions(CodeOptions, _KindFromName):
    """The options of the ``codes`` first stage: :class:`CodeOptions` (kind ``codes``) with
    ``from_options`` / ``to_options``."""


@dataclass(frozen=True)
class ColbertOptions(CodeOptions, _KindFromName):
    """The options of the ``colbert`` first stage: :class:`CodeOptions` of kind ``colbert`` (so that a
    binary-codes option such as ``hash_head=lsh`` is refused by name)."""

    kind: str = code_option("colbert", "codes (binary) | colbert (float)", cli=False)


def _code_first_stage(kind: str, dataset: Dataset, settings: FirstStageSettings):
    from ..base import BM25Settings
    from .search import _code_first_stage as build

    options = settings.options
    if options is not None:  # colbert's options class is a subclass: the index code takes the base class
        options = CodeOptions(**{f.name: getattr(options, f.name) for f in dataclasses.fields(CodeOptions)})
    # the index code reads its options from the settings object it has always taken
    return build(kind, dataset, BM25Settings(threads=settings.threads, index_root=settings.index_root, codes=options))


def codes_first_stage(dataset: Dataset, settings: FirstStageSettings):
    """``codes``: binary per-token codes in a faiss binary index.

    Args:
        dataset: the dataset whose documents are indexed.
        settings: the options (:class:`CodesOptions`; none given: the dataset's most recent index of this
            kind, or one built with the defaults) and the index root.

    Returns:
        A :class:`indexes.codes.search.CodeRetriever`.
    """
    return _code_first_stage("codes", dataset, settings)


def colbert_first_stage(dataset: Dataset, settings: FirstStageSettings):
    """``colbert``: L2-normalised float token vectors in a faiss float index.

    Args:
        dataset: the dataset whose documents are indexed.
        settings: the options (:class:`ColbertOptions`, none given as in :func:`codes_first_stage`) and the
            index root.

    Returns:
        A :class:`indexes.codes.search.CodeRetriever`.
    """
    return _code_first_stage("colbert", dataset, settings)


codes_first_stage.Options = CodesOptions
colbert_first_stage.Options = ColbertOptions
