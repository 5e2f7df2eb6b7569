"""Documents encoded into resumable shards, as the dense and the code indexes build: each shard (one
``shard-NNNNN.npz`` of ``shard_size`` documents, written atomically) is kept in a folder beside the index
until the index is assembled, so an interrupted build resumes after its last finished shard. A manifest
(the index's name and the options the shards depend on) tells whether the shards of an earlier build fit
this one."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from pipeline.core.atomic import atomic_write
from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError
from pipeline.core.progress import progress_switch
from pipeline.core.records import Doc

log = logging.getLogger(__name__)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter).

    Args:
        items: any iterable.
        size: the list length.

    Yields:
        Lists of up to ``size`` items, in order.

    Example:
        >>> list(chunks(range(5), 2))
        [[0, 1], [2, 3], [4]]
    """
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def prepare_shards(shards: Path, manifest: dict, manifest_file: str, force: bool) -> None:
    """Keep the folder ``shards`` of an interrupted build only when it was written for ``manifest`` (and not
    ``force``); else start it afresh, with ``manifest`` in ``manifest_file``.

    Args:
        shards: the shards' folder.
        manifest: what the build is for (its options and documents' identity).
        manifest_file: the manifest's file name inside ``shards``.
        force: start afresh whatever the folder holds.
    """
    if shards.is_dir():
        try:
            previous = json.loads((shards / manifest_file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if force or previous != manifest:
            shutil.rmtree(shards)
    if not shards.is_dir():
        shards.mkdir(parents=True)
        with atomic_write(shards / manifest_file) as handle:
            json.dump(manifest, handle)


def encode_shards(dataset: Dataset, shards: Path, size: int, encode: Callable[[list[Doc]], dict[str, np.ndarray]],
                  description: str, progress: bool = True, fits: Callable[[Any], bool] | None = None,
                  rank: int = 0, world: int = 1) -> tuple[list[Path], int]:
    """Encode ``dataset``'s documents into the shards of folder ``shards``, keeping each shard an earlier
    build wrote for the same documents.

    Args:
        dataset: the collection (its documents in their order).
        shards: the folder (see :func:`prepare_shards`).
        size: documents per shard.
        encode: a chunk of documents -> the arrays saved beside their ``doc_ids``.
        description: the progress bar's text.
        progress: show the bar (``TQDM_DISABLE=1`` still hides it).
        fits: whether a stored shard with the right ids also fits otherwise (e.g. its vectors' width).
        rank: this process's rank under torchrun; it encodes the shards ``number % world == rank``.
        world: the number of processes.

    Returns:
        ``(every shard's path in order, how many of this rank's shards were kept)``; the other ranks' shards
        are listed too, written by them.

    Example:
        >>> files, kept = encode_shards(dataset, folder, 1000, lambda docs: {"vectors": vectors(docs)},
        ...                             "encoding")  # doctest: +SKIP
    """
    from pipeline.core.progress import tqdm

    total = len(dataset._store) if dataset._store is not None else None
    shard_files: list[Path] = []
    resumed = 0
    with tqdm(total=total, desc=description, unit="doc", **progress_switch(progress)) as bar:
        for number, chunk in enumerate(chunks(dataset.docs_iter(), size)):
            shard = shards / f"shard-{number:05d}.npz"
            shard_files.append(shard)
            if number % world != rank:  # another rank's shard (under torchrun)
                continue
            ids = [doc.doc_id for doc in chunk]
            if shard.is_file():
                try:
                    with np.load(shard, allow_pickle=False) as stored:
                        same = stored["doc_ids"].tolist() == ids and (fits is None or fits(stored))
                except (OSError, ValueError, KeyError):  # a damaged shard is encoded again
                    same = False
                if same:
                    resumed += 1
                    bar.update(len(chunk))
                    continue
                log.warning("%s: documents changed since the interrupted build; re-encoding from here", shard)
                for stale in shards.glob("shard-*.npz"):
                    stale_number = int(stale.stem.split("-")[1])
                    if stale_number >= number and stale_number % world == rank:  # this rank's only
                        stale.unlink()
            arrays = encode(chunk)
            with atomic_write(shard, "wb") as handle:
                np.savez(handle, doc_ids=np.array(ids, dtype=str), **arrays)
            bar.update(len(chunk))
    if not shard_files:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to index")
    if resumed:
        log.info("resumed %s: %d of %d shards were already encoded", shards.name, resumed, len(shard_files))
    return shard_files, resumed
