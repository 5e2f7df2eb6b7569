"""Cross-encoder heads in Hugging Face sequence classifiers: a linear head on ``[CLS]`` written into and
read back from a classifier's tanh layer, a two-label head collapsed into one label, the label renamed.

The project's score is the classifier's logit with one label, and ``logit[1] - logit[0]`` with two (the
log-odds of the relevant class). An exported model always has one label whose logit is that score, so every
consumer (``AutoModelForSequenceClassification``, sentence-transformers' ``CrossEncoder``, which applies a
sigmoid to one label) gets the project's number:

* a two-label head becomes one label with weight ``w1 - w0`` and bias ``b1 - b0`` (equal up to float
  rounding; ``sigmoid`` of it is the two-class softmax's probability of the relevant class);
* a fresh linear head on the final ``[CLS]`` state (the project's ``head=new``) has no counterpart in the
  Hugging Face classes, which put a ``tanh`` layer before their classifier (BERT's pooler, RoBERTa's
  ``classifier.dense``). It is written in that layer's linear range: the layer's first row is the head's
  weight times ``2**-20`` (zero bias, the other rows zero) and the classifier multiplies that unit by
  ``2**20`` and adds the head's bias. Powers of two scale floats exactly, and ``tanh(z)`` equals ``z`` to
  float32 precision while ``|z| < 4e-4``, i.e. for scores up to about 400 in magnitude, so the Hugging Face
  model gives the project's score up to float rounding, and this project reads the exact head back
  (``neural_rerank.json`` says it is linear). The scaled row is far below float16's range: use that model in
  float32 or bfloat16, and fine-tune it further with this project (whose restored head is the plain one),
  not as a Hugging Face classifier (its tiny row would take steps far larger than itself).
"""
from __future__ import annotations

from pipeline.core.errors import PipelineError

#: a linear head on ``[CLS]`` is written into the tanh layer scaled by 2**-LINEAR_SCALE_EXPONENT (module docstring)
LINEAR_SCALE_EXPONENT = 20
#: how a cross-encoder export's head is to be read back (``head.kind`` of ``neural_rerank.json``)
HEAD_KINDS = ("classifier", "linear")


def _head_layers(classifier):
    """``(tanh layer, output layer)`` of a Hugging Face sequence classifier whose head is
    ``output(tanh(layer(h[CLS])))``: BERT's pooler and classifier, or RoBERTa's ``classifier.dense`` and
    ``classifier.out_proj``. Others are a :class:`PipelineError` (checked by scoring, see the caller)."""
    import torch.nn as nn

    base = classifier.base_model
    pooler = getattr(base, "pooler", None)
    output = getattr(classifier, "classifier", None)
    if pooler is not None and isinstance(getattr(pooler, "dense", None), nn.Linear) and isinstance(output, nn.Linear):
        return pooler.dense, output
    if output is not None and isinstance(getattr(output, "dense", None), nn.Linear) \
            and isinstance(getattr(output, "out_proj", None), nn.Linear):
        return output.dense, output.out_proj
    raise PipelineError(f"{type(classifier).__name__}: its classification head is neither BERT's (pooler + "
                        f"classifier) nor RoBERTa's (dense + out_proj), so a linear head on [CLS] cannot be "
                        f"written into it")


def write_linear_head(classifier, weight, bias) -> None:
    """Make one-label ``classifier``'s logit ``weight . h[CLS] + bias`` (see the module docstring).

    Args:
        classifier: a Hugging Face sequence classifier with a BERT- or RoBERTa-style head.
        weight: ``[1, d]``.
        bias: ``[1]``.
    """
    import torch

    inner, outer = _head_layers(classifier)
    scale = 2.0 ** -LINEAR_SCALE_EXPONENT
    with torch.no_grad():
        inner.weight.zero_()
        inner.bias.zero_()
        inner.weight[0] = weight.reshape(-1).to(inner.weight.dtype) * scale
        outer.weight.zero_()
        outer.weight[0, 0] = 2.0 ** LINEAR_SCALE_EXPONENT
        outer.bias.copy_(bias.reshape(-1).to(outer.bias.dtype))


def read_linear_head(classifier):
    """``(weight [1, d], bias [1])`` of the linear head that :func:`write_linear_head` wrote (exact: the
    scaling is by powers of two).

    Args:
        classifier: the classifier :func:`write_linear_head` wrote into.

    Returns:
        ``(weight [1, d], bias [1])``.
    """
    inner, outer = _head_layers(classifier)
    scale = 2.0 ** LINEAR_SCALE_EXPONENT
    return (inner.weight[0].detach().clone() * scale).reshape(1, -1), outer.bias.detach().clone().reshape(1)


def collapse_two_labels(classifier) -> None:
    """Turn a two-label ``classifier`` into one label whose logit is ``logit[1] - logit[0]``: its output
    layer (the only ``nn.Linear`` with two outputs outside the encoder) is replaced by the difference of
    its rows, and the config says one label.

    Args:
        classifier: a two-label Hugging Face sequence classifier (changed in place).
    """
    import torch
    import torch.nn as nn

    prefix = getattr(classifier, "base_model_prefix", "")
    found = [(name, module) for name, module in classifier.named_modules()
             if isinstance(module, nn.Linear) and module.out_features == 2
             and not (prefix and (name == prefix or name.startswith(prefix + ".")))]
    if len(found) != 1:
        raise PipelineError(f"{type(classifier).__name__}: cannot find its two-label output layer (found "
                            f"{[name for name, _ in found]})")
    name, layer = found[0]
    single = nn.Linear(layer.in_features, 1, bias=layer.bias is not None)
    with torch.no_grad():
        single.weight.copy_(layer.weight[1:2] - layer.weight[0:1])
        if layer.bias is not None:
            single.bias.copy_(layer.bias[1:2] - layer.bias[0:1])
    parent_name, _, attribute = name.rpartition(".")
    parent = classifier.get_submodule(parent_name) if parent_name else classifier
    setattr(parent, attribute, single.to(layer.weight.device, layer.weight.dtype))
    relabel(classifier)


def relabel(classifier) -> None:
    """Give ``classifier``'s config one label named ``relevance`` (what the exported logit is).

    Args:
        classifier: a Hugging Face sequence classifier (changed in place).
    """
    config = classifier.config
    config.num_labels = 1
    config.id2label = {0: "relevance"}
    config.label2id = {"relevance": 0}
    if hasattr(classifier, "num_labels"):
        classifier.num_labels = 1
