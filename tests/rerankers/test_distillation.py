"""Tests for rerankers.training.distillation: the teacher option, the listwise distillation loss, the teacher's
scores (each pair scored once) and training a cross-encoder towards a teacher's ordering. A tiny random BERT
with the MiniLM tokenizer is both the teacher (as a zero-shot bi-encoder) and the student's encoder."""
from __future__ import annotations

import itertools

import pytest
import torch

from pipeline.core.errors import ConfigError, PipelineError
from rerankers.cross_encoder import CrossEncoderReranker
from rerankers.training.config import TrainConfig
from rerankers.training.data import RankingData
from rerankers.training.distillation import Teacher, distillation_loss, parse_teacher
from rerankers.training.loop import Trainer
from tests.helpers import one_torch_thread, tiny_dataset  # noqa: F401  (autouse fixture)
from tests.helpers import ENCODER_WORDS as WORDS, make_tiny_encoder


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    return make_tiny_encoder(tmp_path_factory.mktemp("tinybert"))


def test_teacher_option_names_a_model_or_a_reranker_and_model():
    assert parse_teacher("all-MiniLM-L6-v2") == ("bi-encoder", "all-MiniLM-L6-v2")
    assert parse_teacher("cross-encoder:models/ce.pt") == ("cross-encoder", "models/ce.pt")
    assert parse_teacher("/tmp/enc:v2") == ("bi-encoder", "/tmp/enc:v2")     # a path, not a re-ranker
    with pytest.raises(ConfigError, match="RERANKER:MODEL"):
        parse_teacher("bi-encoder:")


def test_options_are_checked_where_they_are_set():
    assert TrainConfig(loss="softmax", teacher="all-MiniLM-L6-v2", distill_weight=0.5).distill_weight == 0.5
    with pytest.raises(PipelineError, match="needs a teacher"):
        TrainConfig(loss="softmax", distill_weight=0.5)
    with pytest.raises(PipelineError, match="loss softmax or hinge"):
        TrainConfig(loss="pointwise", teacher="all-MiniLM-L6-v2", distill_weight=0.5)
    with pytest.raises(PipelineError, match=r"\[0, 1\]"):
        TrainConfig(loss="softmax", teacher="all-MiniLM-L6-v2", distill_weight=1.5)
    with pytest.raises(PipelineError, match="distill_temperature"):
        TrainConfig(loss="softmax", teacher="x", distill_weight=0.5, distill_temperature=0)


def test_options_that_check_each_other_may_come_in_any_order():
    from pipeline.core.options import apply_overrides

    for order in (["distill_weight", "teacher", "loss"], ["loss", "teacher", "distill_weight"]):
        config = TrainConfig()
        values = {"distill_weight": "0.5", "teacher": "all-MiniLM-L6-v2", "loss": "softmax"}
        apply_overrides([config], {name: values[name] for name in order})
        assert (config.distill_weight, config.teacher, config.loss) == (0.5, "all-MiniLM-L6-v2", "softmax")
    with pytest.raises(ConfigError, match="option distill_weight='0.5': .*needs a teacher"):
        apply_overrides([TrainConfig()], {"distill_weight": "0.5", "loss": "softmax"})


def test_the_loss_is_zero_on_agreement_and_its_gradient_follows_the_teacher():
    teacher = torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    assert float(distillation_loss(teacher.clone(), teacher)) == pytest.approx(0.0, abs=1e-7)
    # the same softmax at a shifted scale is no disagreement: only the order within a group is taught
    assert float(distillation_loss(teacher + 5.0, teacher)) == pytest.approx(0.0, abs=1e-6)
    student = torch.zeros(2, 3, requires_grad=True)
    loss = distillation_loss(student, teacher, temperature=2.0)
    loss.backward()
    # descending the gradient raises the teacher's favourite of each group the most
    assert torch.equal((-student.grad).argmax(dim=1), teacher.argmax(dim=1))
    manual = (torch.softmax(teacher / 2, -1) * (torch.log_softmax(teacher / 2, -1) - torch.log_softmax(
        torch.zeros(2, 3) / 2, -1))).sum(-1).mean() * 4
    assert float(loss.detach()) == pytest.approx(float(manual), rel=1e-5)


def training_data():
    dataset = tiny_dataset(WORDS, num_queries=12)
    return dataset, RankingData.from_dataset(dataset, dataset.splits["train"], dataset.first_stage)


def test_the_teacher_scores_each_pair_once_as_the_reranker_scores_it(tiny_encoder):
    _, train = training_data()
    teacher = Teacher(tiny_encoder)
    query = next(iter(train.queries.values()))
    docs = [train.docs[h.doc_id] for h in train.candidates[query.query_id]]
    units = [(query, docs[:2], [1.0, 0.0]), (query, docs[1:], [1.0, 0.0, 0.0])]
    direct = teacher.reranker.score(query, docs)
    calls = []
    score_many = teacher.reranker.score_many
    teacher.reranker.score_many = lambda items, *rest: calls.append(items) or score_many(items, *rest)
    first = teacher.group_scores(units)
    assert first == [pytest.approx(direct[:2]), pytest.approx(direct[1:])]
    assert len(calls) == 1 and len(calls[0][0][1]) == len(docs)     # one call, each document once
    assert teacher.group_scores(units) == first and len(calls) == 1   # the second batch is remembered


def agreement(student, teacher, train) -> float:
    """The share of every training query's candidate pairs that the student orders as the teacher does."""
    same = total = 0
    for query_id, query in train.queries.items():
        docs = [train.docs[h.doc_id] for h in train.candidates[query_id]]
        s, t = student.score(query, docs), teacher.reranker.score(query, docs)
        for i, j in itertools.combinations(range(len(docs)), 2):
            total += 1
            same += (s[i] - s[j]) * (t[i] - t[j]) > 0
    return same / total


def trained_student(tiny_encoder, **distillation):
    dataset, train = training_data()
    settings = dict(encoder=tiny_encoder, max_query_length=8, max_doc_length=16, learning_rate=1e-3, epochs=15,
                    batch_size=3, negatives=2, loss="softmax", **distillation)
    student = CrossEncoderReranker.from_options(settings, seed=3)
    student.prepare(train, dataset)
    return student, student.fit(train), train


def test_a_cross_encoder_distilled_from_a_teacher_learns_its_ordering(tiny_encoder):
    teacher = Teacher(tiny_encoder)
    distilled, report, train = trained_student(tiny_encoder, teacher=tiny_encoder, distill_weight=1.0)
    labels_only, _, _ = trained_student(tiny_encoder)
    assert report.epochs[-1].loss < report.epochs[0].loss
    # the random teacher's order is not the judgments': only distillation teaches it
    assert agreement(distilled, teacher, train) > 0.7
    assert agreement(distilled, teacher, train) > agreement(labels_only, teacher, train) + 0.1


def test_the_trainer_mixes_the_two_losses_by_the_weight(tiny_encoder):
    dataset, train = training_data()
    settings = dict(encoder=tiny_encoder, max_query_length=8, max_doc_length=16, loss="softmax", negatives=2,
                    teacher=tiny_encoder, distill_weight=0.25, distill_temperature=2.0)
    student = CrossEncoderReranker.from_options(settings, seed=3)
    student.prepare(train, dataset)
    trainer = Trainer(student, student.train_config, seed=3)
    import random

    units = trainer.epoch_units(train, random.Random(0))[:4]
    scores = torch.randn(len(units) * 3)
    teacher = torch.tensor(Teacher(tiny_encoder).group_scores(units))
    expected = 0.75 * trainer.task_loss(scores, units) + 0.25 * distillation_loss(scores.view(4, 3), teacher, 2.0)
    assert float(trainer.loss(scores, units)) == pytest.approx(float(expected), rel=1e-5)
