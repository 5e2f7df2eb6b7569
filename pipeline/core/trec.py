"""The former name of :mod:`pipeline.core.formats` (the TREC-style file readers and writers: topics, qrels,
runs, documents), kept so that ``from pipeline.core.trec import read_run`` goes on working. New code imports
from :mod:`pipeline.core.formats`."""
from __future__ import annotations

from .formats import *  # noqa: F401,F403 - the same names, one home
from .formats import __all__  # noqa: F401
