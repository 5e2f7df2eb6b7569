"""A cross-encoder as a Hugging Face sequence classifier: such a model scored whole, its own head included
(:class:`PretrainedHeadModel`), and a cross-encoder re-ranker written as one (:class:`ClassifierExport`, a
mixin of :class:`rerankers.cross_encoder.CrossEncoderReranker`; the head conversions it writes with are
:mod:`rerankers.hf_export.heads`)."""
from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from pipeline.core.errors import PipelineError
from pipeline.core.records import Doc, Query

from ..blocks.first_token import classifier_logits, scoring_only

#: numbers of labels a sequence-classification head may have to give a relevance score
SCORABLE_LABELS = (1, 2)


class PretrainedHeadModel(nn.Module):
    """A Hugging Face ``...ForSequenceClassification`` model used whole (its pooling and classifier): the
    relevance score is its logit (one label) or ``logit[1] - logit[0]`` (two labels).

    The model sits under ``encoder`` so that all of it, head included, counts as pre-trained (see
    :attr:`~rerankers.transformer_base.TransformerReranker.pretrained_prefixes`): it was trained with the
    rest, so it gets the encoder's fine-tuning step, not ``head_learning_rate``.
    """

    def __init__(self, classifier: nn.Module):
        super().__init__()
        labels = classifier.config.num_labels
        if labels not in SCORABLE_LABELS:
            raise PipelineError(f"a sequence-classification head with {labels} labels gives no relevance score "
                                f"(1 label: the logit; 2: logit[1] - logit[0])")
        self.encoder = classifier
        self.labels = labels

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """Relevance scores ``[B]`` of the pairs in ``input_ids [B, L]`` (``attention_mask`` True = real). Scoring a
        BERT classifier computes only its first position's output
        (:func:`~rerankers.blocks.first_token.classifier_logits`); training runs the full forward."""
        logits = classifier_logits(self.encoder, input_ids, attention_mask, token_type_ids) \
            if scoring_only(self) else None
        if logits is None:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            logits = self.encoder(input_ids=input_ids, attention_mask=attention_mask.long(), **extra).logits
        return logits[:, 0] if self.labels == 1 else logits[:, 1] - logits[:, 0]


class ClassifierExport:
    """``save_pretrained`` of a cross-encoder re-ranker (a mixin of
    :class:`~rerankers.cross_encoder.CrossEncoderReranker`, whose ``module`` is a :class:`PretrainedHeadModel`
    or a linear head on ``[CLS]``): a standard Hugging Face sequence classifier with one label."""

    def save_pretrained(self, directory) -> Path:
        """Write the model as a standard Hugging Face sequence-classification directory (config with one
        label, ``model.safetensors``, the tokenizer's files) whose logit is this re-ranker's score, plus
        ``neural_rerank.json`` with the project's configs; atomically (an existing ``directory`` is replaced
        as a whole). A two-label head becomes its logit difference, a linear head on ``[CLS]`` is written
        into the classifier's tanh layer (see :mod:`rerankers.hf_export.heads`); the written model is checked
        to score a probe batch as this one does. :meth:`~rerankers.cross_encoder.CrossEncoderReranker.load` /
        ``--model DIR`` read it back exactly.

        Args:
            directory: the directory to write (replaced as a whole if it exists).

        Returns:
            The directory written.

        Raises:
            PipelineError: the model is not prepared or is int8-quantized, or the export scores probe pairs
                differently.

        Example:
            >>> reranker.save_pretrained("my-cross-encoder")   # doctest: +SKIP
        """
        import copy

        from . import CONFIG_FILE, write_description, write_directory
        from .heads import LINEAR_SCALE_EXPONENT, collapse_two_labels

        self._export_ready()
        if isinstance(self.module, PretrainedHeadModel):
            classifier, kind, labels = copy.deepcopy(self.module.encoder), "classifier", self.module.labels
            if labels == 2:
                collapse_two_labels(classifier)
        else:
            classifier, kind, labels = self._linear_head_classifier(), "linear", 1
        self._check_export(classifier)
        description = {**self.export_description(),
                       "head": {"kind": kind, "labels_before_export": labels,
                                "scale_exponent": LINEAR_SCALE_EXPONENT if kind == "linear" else None}}

        def write(target: Path) -> None:
            classifier.save_pretrained(target)
            self.tokenizer.save_pretrained(target)
            write_description(target, CONFIG_FILE, description)

        return write_directory(directory, write)

    def _linear_head_classifier(self):
        """The encoder's ``...ForSequenceClassification`` (one label) holding the fine-tuned encoder and the
        linear head on ``[CLS]`` in its tanh layer's linear range."""
        import copy

        import transformers

        from .heads import relabel, write_linear_head

        encoder = self.module.encoder
        config = copy.deepcopy(encoder.config)
        config.num_labels = 1
        try:
            classifier = transformers.AutoModelForSequenceClassification.from_config(config)
        except ValueError as error:  # no sequence-classification class for this model type
            raise PipelineError(f"{self.name}: encoder {self.encoder_config.encoder!r} has no Hugging Face "
                                f"sequence-classification class to export to ({error})") from None
        relabel(classifier)
        missing, unexpected = classifier.base_model.load_state_dict(encoder.state_dict(), strict=False)
        # a RoBERTa classifier's encoder has no pooler (its head replaces it): the AutoModel's is not needed
        unexpected = [key for key in unexpected if not key.startswith("pooler.")]
        if missing or unexpected:
            raise PipelineError(f"{self.name}: the encoder's weights do not fit {type(classifier).__name__} "
                                f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
        write_linear_head(classifier, self.module.head.weight, self.module.head.bias)
        return classifier.to(self._device())

    def _check_export(self, classifier) -> None:
        """Score probe pairs with ``classifier`` as a one-label model and with this re-ranker: a head the
        conversion cannot express (another architecture's head layout) is a PipelineError, never a silently
        different model."""
        import torch

        probe = Query("probe", "what is the capital of france")
        docs = [Doc("p1", "paris is the capital and largest city of france"), Doc("p2", "a river runs north")]
        batch = self.tensors(self.encode([(probe, doc) for doc in docs]))
        training = self.module.training
        self.module.eval()
        classifier.eval()
        try:
            with torch.no_grad():
                expected = self.module(**batch)
                found = PretrainedHeadModel(classifier)(**batch)
        finally:
            self.module.train(training)
        if not torch.allclose(found, expected, rtol=1e-4, atol=1e-4):
            raise PipelineError(f"{self.name}: the exported {type(classifier).__name__} scores probe pairs "
                                f"{found.tolist()} instead of {expected.tolist()}; its head layout cannot hold "
                                f"this model's head")
