"""Hugging Face model directories (``save_pretrained`` layout) for the transformer re-rankers.

A trained transformer re-ranker can be written as a directory that the Hugging Face tools read as they are,
so that it can be pushed to the Hub and used without this project, and read back by this project with
identical scores:

* Cross-encoder: a standard sequence-classification model (``config.json`` with ``num_labels: 1``, the
  weights in ``model.safetensors``, the tokenizer's files) that
  ``AutoModelForSequenceClassification.from_pretrained(directory)`` loads; its one logit is the project's
  score. Plus ``neural_rerank.json`` with the project's configs.
* ADDAX (and its ablations): the fine-tuned encoder saved with ``save_pretrained`` (a standard encoder and
  tokenizer), ``addax_config.json`` with the model, encoder and training configs, and the layers around the
  encoder (MAGS, the hashing denoiser, the query MLP) in ``addax_head.safetensors``.
* Bi-encoder: the fine-tuned encoder and its tokenizer, and ``neural_rerank.json`` (the pooling has no
  weights; its ``scale`` is in the config).

This module holds what the three share: the JSON description written beside the weights (``format``,
``kind``, the re-ranker's name and class, its configs, seed, the description of the encoder it was trained
on, library versions), reading it back with clear :class:`~pipeline.core.errors.CheckpointError` s, head
weights in safetensors and the directory written atomically. The cross-encoder's head conversions are
:mod:`rerankers.hf_export.heads`.
The transformer re-rankers' ``save_pretrained`` / ``from_pretrained`` are written once over it, in
:class:`rerankers.hf_export.pretrained.PretrainedExport` (the cross-encoder adds its head conversions);
:func:`load_pretrained` reads any export without knowing its model beforehand.
"""
from __future__ import annotations

import json
import logging
import platform
from pathlib import Path
from typing import Any, Mapping

from pipeline.core import filecheck
from pipeline.core.atomic import atomic_directory, atomic_write
from pipeline.core.errors import CheckpointError, CorruptCacheError, PipelineError

from infra.checkpoints import project_version
# the head conversions lived here before their own module: importable from here as before
from .heads import (  # noqa: F401
    HEAD_KINDS, LINEAR_SCALE_EXPONENT, collapse_two_labels, read_linear_head, relabel, write_linear_head,
)

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
EXPORT_KIND = "neural-rerank-pretrained"
#: the description of the cross-encoder's and the bi-encoder's exports (and the default of a new model)
CONFIG_FILE = "neural_rerank.json"
#: ADDAX's description and head weights
ADDAX_CONFIG_FILE = "addax_config.json"
ADDAX_HEAD_FILE = "addax_head.safetensors"
#: every description file an export may have, looked for in this order by :func:`find_description`
CONFIG_FILES = (CONFIG_FILE, ADDAX_CONFIG_FILE)
#: the size and SHA-256 of every other file of an export, written last, checked whenever it is read
CHECKSUM_FILE = "neural_rerank_checksums.json"


def library_versions() -> dict[str, str]:
    """Versions of the project and of the libraries the weights were written with (recorded, not checked).

    Returns:
        Name -> version string.
    """
    import torch
    import transformers

    return {"project": project_version(), "torch": str(torch.__version__),
            "transformers": str(transformers.__version__), "python": platform.python_version()}


def write_description(directory: Path, filename: str, description: Mapping[str, Any]) -> None:
    """Write ``description`` as ``directory/filename`` with the format and kind added, atomically.

    Args:
        directory: the export directory.
        filename: the description file's name.
        description: plain JSON values.
    """
    body = {"format": EXPORT_FORMAT, "kind": EXPORT_KIND, **description}
    with atomic_write(Path(directory) / filename) as handle:
        json.dump(body, handle, indent=2, sort_keys=True)
        handle.write("\n")


def read_description(directory: str | Path, filename: str) -> dict:
    """The description ``directory/filename`` written by :func:`write_description`.

    Args:
        directory: the export directory.
        filename: the description file's name.

    Returns:
        The description, format and kind included.

    Raises:
        CheckpointError: a missing directory, a directory without the file, unreadable JSON or another
            format; the message names the directory.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory, so not a Hugging Face export of a re-ranker")
    verify_export(directory)
    path = directory / filename
    if not path.is_file():
        found = ", ".join(name for name in CONFIG_FILES if (directory / name).is_file()) or "neither"
        raise CheckpointError(f"{directory}: not a Hugging Face export of this re-ranker: it has no {filename} "
                              f"(description files found: {found})")
    try:
        description = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not a readable export description ({error})") from None
    if not isinstance(description, dict) or description.get("kind") != EXPORT_KIND:
        raise CheckpointError(f"{path}: not an export description of this project (kind "
                              f"{description.get('kind') if isinstance(description, dict) else None!r})")
    if description.get("format") != EXPORT_FORMAT:
        raise CheckpointError(f"{path}: export format {description.get('format')!r}; this version reads "
                              f"format {EXPORT_FORMAT}")
    for key in ("reranker", "model_config", "encoder_config", "train_config"):
        if key not in description:
            raise CheckpointError(f"{path}: export description lacks {key!r}")
    return description


def verify_export(directory: str | Path, full: bool | None = None) -> None:
    """Check the files of export ``directory`` against its :data:`CHECKSUM_FILE` (sizes and SHA-256, whatever
    the files' modification times; see :func:`pipeline.core.filecheck.check` for ``full`` and the size line).

    A changed weight or config value (``num_hidden_layers`` edited by hand) is a :class:`CheckpointError`
    naming the file; an export written before checksums existed loads with a warning, as do files added
    beside the recorded ones (a model card), which are not verified.

    Args:
        directory: the export directory.
        full: hash every file (``None``: as :func:`pipeline.core.filecheck.check` decides).

    Raises:
        CheckpointError: a file that does not match its recorded size or digest.

    Example:
        >>> verify_export("exported/cross-encoder")  # doctest: +SKIP
    """
    directory = Path(directory)
    try:
        unlisted = filecheck.check_manifest(directory, CHECKSUM_FILE, "exported model", full)
    except CorruptCacheError as error:
        raise CheckpointError(f"{directory}: the exported model is damaged ({getattr(error, 'reason', error)}); "
                              f"export it again with python -m pipeline.export") from None
    if unlisted is None:
        _warn_once(directory, f"{directory}: no {CHECKSUM_FILE} (exported before checksums were written): its "
                              f"files are not verified; export it again to add them")
    elif unlisted:
        _warn_once(directory, f"{directory}: files added after the export are not verified: "
                              f"{', '.join(unlisted[:5])}{' ...' if len(unlisted) > 5 else ''}")


_WARNED: set[str] = set()


def _warn_once(directory: Path, message: str) -> None:
    key = f"{directory.resolve()}:{message}"
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message)


def find_description(directory: str | Path) -> tuple[str, dict]:
    """The description of the export in ``directory``, whichever model wrote it.

    Args:
        directory: the export directory.

    Returns:
        ``(filename, description)``.

    Raises:
        CheckpointError: the directory holds no export description; the message names it.
    """
    directory = Path(directory)
    for filename in CONFIG_FILES:
        if (directory / filename).is_file():
            return filename, read_description(directory, filename)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory, so not a Hugging Face export of a re-ranker")
    raise CheckpointError(f"{directory}: not a Hugging Face export of a re-ranker (none of "
                          f"{', '.join(CONFIG_FILES)} in it)")


def export_class(directory: Path, description: Mapping[str, Any], base: type | None = None) -> type:
    """The re-ranker class the export was written by, which must be ``base`` or a subclass of it (so that
    ``AddaxReranker.from_pretrained`` reads an ablation's export as that ablation); without ``base``, any
    registered class that reads exports (has ``from_pretrained``).

    Args:
        directory: the export directory, for messages.
        description: the export's description.
        base: the class the caller reads with (``None``: any).

    Returns:
        The class.

    Raises:
        CheckpointError: a model this installation does not know, a class that is not ``base`` or a subclass
            of it, or one that reads no exports.
    """
    from rerankers import reranker_class

    name = description.get("reranker")
    try:
        found = reranker_class(str(name))
    except PipelineError as error:
        raise CheckpointError(f"{directory}: holds a {name!r} model, which this installation does not know "
                              f"({error})") from None
    if base is not None and (found is None or not issubclass(found, base)):
        raise CheckpointError(f"{directory}: holds a {name!r} model, not {base.name!r}")
    if found is None or not callable(getattr(found, "from_pretrained", None)):
        raise CheckpointError(f"{directory}: holds a {name!r} model, which cannot be read from a directory")
    return found


def load_pretrained(directory: str | Path):
    """The re-ranker exported to ``directory`` (cross-encoder, bi-encoder, ADDAX or an ablation), read back
    with its own class's ``from_pretrained``.

    Args:
        directory: the export directory.

    Returns:
        The re-ranker, in eval mode, ready to score.

    Raises:
        CheckpointError: the directory holds no export of a re-ranker; the message names it.

    Example:
        >>> reranker = load_pretrained("exported/cross-encoder")   # doctest: +SKIP
    """
    directory = Path(directory)
    _, description = find_description(directory)
    # by name through the registry: importing the model modules here would make an import circle
    return export_class(directory, description).from_pretrained(directory)


# -- weights ----------------------------------------------------------------------------------------


def save_weights(path: Path, state: Mapping[str, Any]) -> None:
    """Tensors ``state`` as a safetensors file (contiguous CPU copies: safetensors refuses shared storage).

    Args:
        path: the file to write.
        state: name -> tensor.
    """
    from safetensors.torch import save

    tensors = {key: value.detach().cpu().contiguous().clone() for key, value in state.items()}
    with atomic_write(path, "wb") as handle:
        handle.write(save(tensors, metadata={"format": "pt"}))


def load_weights(path: Path) -> dict:
    """The tensors of safetensors file ``path``.

    Args:
        path: the file.

    Returns:
        Name -> tensor.

    Raises:
        CheckpointError: the file is missing or unreadable.
    """
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckpointError(f"{path.parent}: export lacks its head weights {path.name}")
    try:
        return load_file(str(path))
    except Exception as error:  # noqa: BLE001 - safetensors raises its own and OS errors for damaged files
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(error).__name__}: {error})") from None


def clear_encoder_caches() -> None:
    """Forget the encoders read so far (:mod:`infra.encoders` reads each location once per process): a
    directory just written may have been read before under the same name, with other weights."""
    from infra import encoders

    encoders._pretrained_config.cache_clear()
    encoders._load_pretrained.cache_clear()


def write_directory(directory: str | Path, write) -> Path:
    """Call ``write(temporary_directory)``, record every file's size and SHA-256 in :data:`CHECKSUM_FILE`
    and move the result to ``directory`` atomically (an existing ``directory`` is replaced as a whole only
    when the new one is complete).

    Args:
        directory: the directory to write.
        write: a function that writes the export's files into the folder it is given.

    Returns:
        ``directory``, as a path.
    """
    directory = Path(directory)
    with atomic_directory(directory) as temporary:  # which also gives every file the umask's modes
        write(temporary)
        filecheck.write_manifest(temporary, CHECKSUM_FILE)
    clear_encoder_caches()
    return directory
