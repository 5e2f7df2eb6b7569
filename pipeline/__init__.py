"""The experiment layer and command lines of the re-ranking pipeline.

``from pipeline import Reranker`` gives the plain-strings API (:class:`pipeline.api.Reranker`); it is
imported on first use, so ``import pipeline`` stays light (no torch).
"""
from __future__ import annotations

import importlib

__all__ = ["Reranker", "Result"]


def __getattr__(name: str):
    """``Reranker`` and ``Result`` from :mod:`pipeline.api`, imported on first access (PEP 562)."""
    if name in __all__:
        # imported by name at first access, not at import: every ``import pipeline.core...`` runs this file,
        # and the core layer must not pull in the experiment layer (tests/test_architecture.py)
        return getattr(importlib.import_module("pipeline.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
