"""Distillation from a teacher re-ranker's scores: training that keeps what a zero-shot model knew.

A cross-encoder or ADDAX starts from a pre-trained encoder but puts fresh layers on top, and a few thousand
judged pairs teach those layers less than the encoder's pre-training taught the zero-shot bi-encoder
(BENCHMARKS.md, DL: the zero-shot bi-encoder combined with BM25 is above every model trained here). With
``--set teacher=all-MiniLM-L6-v2 --set distill_weight=0.5`` each training group's loss becomes::

    (1 - distill_weight) * task loss + distill_weight * T^2 * KL(softmax(t / T) || softmax(s / T))

``t`` the teacher's scores of the group's documents (its positive and sampled negatives), ``s`` the
student's, ``T`` = ``distill_temperature``: the listwise knowledge distillation of Hinton et al.
("Distilling the Knowledge in a Neural Network", arXiv:1503.02531; the ``T^2`` keeps the gradient's scale
across temperatures), as used to train re-rankers from a stronger ranker's scores (Hofstätter et al.,
"Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation",
arXiv:2010.02666). Only the teacher's ordering *within* a group matters, so its score scale (the
bi-encoder's 20 x cosine) needs no calibration against the student's logits.

Choices: the teacher is any registered re-ranker with a loadable model, written ``RERANKER:MODEL`` or just
``MODEL`` for the bi-encoder (``teacher=all-MiniLM-L6-v2``: the packaged zero-shot model); it scores in
evaluation mode, without gradients, on the CPU, each (query, document) once per training (a cache), so a
teacher costs one forward pass per distinct training pair. Groups need two documents or more, so the loss
must be ``softmax`` or ``hinge`` (:class:`~rerankers.training.config.TrainConfig` checks it).
"""
from __future__ import annotations

from typing import Sequence

from pipeline.core.errors import ConfigError

__all__ = ["DEFAULT_TEACHER_RERANKER", "Teacher", "distillation_loss", "parse_teacher"]

#: the re-ranker a ``teacher`` without ``RERANKER:`` is loaded with
DEFAULT_TEACHER_RERANKER = "bi-encoder"


def parse_teacher(spec: str) -> tuple[str, str]:
    """``(re-ranker name, model)`` of a ``teacher`` option.

    Args:
        spec: ``RERANKER:MODEL`` or ``MODEL`` (the bi-encoder's model: an encoder name or directory, or a
            checkpoint).

    Returns:
        The re-ranker's registry name and the model to load it from.

    Raises:
        ConfigError: an empty model.

    Example:
        >>> parse_teacher("all-MiniLM-L6-v2")
        ('bi-encoder', 'all-MiniLM-L6-v2')
        >>> parse_teacher("cross-encoder:models/ce.pt")
        ('cross-encoder', 'models/ce.pt')
    """
    name, separator, model = spec.partition(":")
    # a Windows drive letter or a bare path is a model, not a re-ranker name
    if not separator or "/" in name or "\\" in name or len(name) == 1:
        name, model = DEFAULT_TEACHER_RERANKER, spec
    if not model.strip():
        raise ConfigError(f"teacher={spec!r}: expected MODEL or RERANKER:MODEL (e.g. all-MiniLM-L6-v2)")
    return name, model


class Teacher:
    """A loaded teacher re-ranker and the scores it gave, each (query, document) scored once.

    Args:
        spec: the ``teacher`` option (:func:`parse_teacher`).

    Example:
        >>> teacher = Teacher("all-MiniLM-L6-v2")                  # doctest: +SKIP
        >>> teacher.group_scores(units)                            # doctest: +SKIP
        [[12.1, 4.3, 7.9], ...]
    """

    def __init__(self, spec: str):
        self.spec = spec
        self.reranker_name, self.model = parse_teacher(spec)
        self._reranker = None
        self._scores: dict[tuple[str, str], float] = {}

    @property
    def reranker(self):
        """The teacher, loaded on first use (a :class:`~pipeline.core.errors.ConfigError` names an unknown
        re-ranker; a missing model is the re-ranker's own :class:`~pipeline.core.errors.CheckpointError`)."""
        if self._reranker is None:
            from rerankers import reranker_class

            self._reranker = reranker_class(self.reranker_name).load(self.model)
        return self._reranker

    def group_scores(self, units: Sequence) -> list[list[float]]:
        """The teacher's scores of every unit's documents, in unit order.

        Args:
            units: training units ``(query, docs, labels)``.

        Returns:
            One list of scores per unit, as long as its documents.
        """
        missing: dict[str, tuple] = {}
        for query, docs, _ in units:
            new = [doc for doc in docs if (query.query_id, doc.doc_id) not in self._scores]
            if new:
                known = missing.setdefault(query.query_id, (query, {}))[1]
                known.update((doc.doc_id, doc) for doc in new)
        if missing:
            items = [(query, list(docs.values())) for query, docs in missing.values()]
            score_many = getattr(self.reranker, "score_many", None)
            scored = (score_many(items) if score_many is not None else
                      [self.reranker.score(query, docs) for query, docs in items])
            for (query, docs), scores in zip(items, scored):
                self._scores.update(((query.query_id, doc.doc_id), float(s)) for doc, s in zip(docs, scores))
        return [[self._scores[(query.query_id, doc.doc_id)] for doc in docs] for query, docs, _ in units]


def distillation_loss(student, teacher, temperature: float = 1.0):
    """Mean over groups of ``T^2 * KL(softmax(teacher / T) || softmax(student / T))``.

    Args:
        student: the student's scores ``[groups, documents]`` (with their graph).
        teacher: the teacher's scores, the same shape (no gradient flows into them).
        temperature: ``T`` > 0.

    Returns:
        A scalar tensor; 0 when the two orderings' softmax distributions agree.

    Example:
        >>> import torch
        >>> round(float(distillation_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([[2.0, 0.0]]))), 6)
        0.0
        >>> float(distillation_loss(torch.tensor([[0.0, 2.0]]), torch.tensor([[2.0, 0.0]]))) > 0
        True
    """
    import torch.nn.functional as F

    targets = F.softmax(teacher.detach().float() / temperature, dim=-1)
    log_student = F.log_softmax(student.float() / temperature, dim=-1)
    return F.kl_div(log_student, targets, reduction="batchmean") * temperature ** 2
