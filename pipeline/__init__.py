"""The experiment layer and command lines of the re-ranking pipeline.

``from pipeline import Reranker`` gives the plain-strings API (:class:`pipeline.api.Reranker`); it is
imported on first use, so ``import pipeline`` stays light (no torch).
"""
from __future__ import annotations

__all__ = ["Reranker", "Result"]


def __getattr__(name: str):
    """``Reranker`` and ``Result`` from :mod:`pipeline.api`, imported on first access (PEP 562)."""
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
