"""The ``lsh`` recipe of binary codes: random hyperplanes over a trained float encoder's token vectors,
optionally centred on the collection's mean token vector, and the choice among several draws by their
agreement with the float scores."""

from __future__ import annotations

import hashlib
import logging
import random
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.core.datasets import Dataset
from pipeline.core.errors import PipelineError

from .model import TokenCodeEncoder, _autocast, maxsim, tokenize
from .options import CodeOptions
from .training import TrainingSource

log = logging.getLogger(__name__)

def random_hyperplanes(count: int, dim: int, seed: int) -> torch.Tensor:
    """``[count, dim]`` unit normals of random hyperplanes: stacked random orthogonal bases of R^dim (QR of
    Gaussian matrices), so that within each block of ``dim`` bits the hyperplanes are orthogonal. Orthogonal
    blocks rank better than independent Gaussian normals (measured by ``benchmarks/lsh_draws.py``, 512 bits
    over 128-d ColBERT vectors: BENCHMARKS.md)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = [torch.linalg.qr(torch.randn(dim, dim, generator=generator))[0] for _ in range(-(-count // dim))]
    return torch.cat(blocks)[:count]


def hashed_from_float(float_model: "TokenCodeEncoder", bits: int, alpha: float, seed: int,
                      sample: torch.Tensor | None = None) -> "TokenCodeEncoder":
    """A binary encoder that hashes ``float_model``'s token vectors with ``bits`` random hyperplanes
    (sign random projections, Charikar's SimHash): same transformer, one linear head ``R W`` (``W``, ``b``:
    the float projection, ``R``: :func:`random_hyperplanes`). ``sign(R W h)`` is the code of the float
    vector ``W h`` (its norm does not change a sign); the query side is ``R W h`` L2-normalised, so the
    asymmetric score ``q . sign(R d) / sqrt(bits)`` estimates the float model's cosine (up to a constant
    factor) with a variance that shrinks as ``bits`` grows. The float model's transformer is shared, not
    copied.

    With ``sample`` (``[T, float_dim]`` unit token vectors of documents, :func:`center_sample`), the
    encoder is centred (:func:`recentre`): codes ``sign(R (v - mu))`` with ``mu`` the sample's mean, scored by
    :func:`~indexes.codes.model.centred_similarity`."""
    projection = float_model.project
    hyperplanes = random_hyperplanes(bits, projection.out_features, seed).to(projection.weight.device)
    head = "linear" if sample is None else "centred"
    model = TokenCodeEncoder(float_model.transformer, bits, True, alpha, float_model.skip_ids.tolist(), head=head,
                             float_dim=projection.out_features)
    with torch.no_grad():
        if sample is None:
            model.project.weight.copy_(hyperplanes @ projection.weight)
            model.project.bias.copy_(hyperplanes @ projection.bias)
        else:
            model.project.load_state_dict(projection.state_dict())
            model.hyperplanes.copy_(hyperplanes)
            recentre(model, sample)
    return model.to(projection.weight.device)


@torch.no_grad()
def recentre(model: "TokenCodeEncoder", sample: torch.Tensor) -> None:
    """Give a centred head the center of ``sample`` (``[T, float_dim]`` unit token vectors): ``center`` their
    mean and ``decode_norm`` the mean ``|R^T b|`` of their codes ``b``
    (see :func:`~indexes.codes.model.centred_similarity`)."""
    sample = sample.to(model.center.device).float()
    model.center.copy_(sample.mean(dim=0))
    codes = model.binary_codes(model.hash_unit_vectors(sample), hard=True)
    model.decode_norm.copy_((codes @ model.hyperplanes).norm(dim=1).mean())


def centring_summary(model: "TokenCodeEncoder", documents: int, tokens: int) -> dict:
    """What a centred head's center came from and what it is, for encoder and index metadata."""
    return {"documents": documents, "tokens": tokens, "center_norm": round(float(model.center.norm()), 5),
            "decode_norm": round(float(model.decode_norm), 5)}


#: documents whose token vectors give a centred hash head its center: a seeded uniform sample of the
#: collection (its first documents are not enough: on Vaswani the first 512 give a center that loses up to
#: .01 nDCG@10 more than the whole collection's, BENCHMARKS.md)
CENTER_DOCS = 2048


@torch.no_grad()
def center_sample(model: "TokenCodeEncoder", tokenizer, dataset: Dataset, options: "CodeOptions",
                  device=None, documents: int = CENTER_DOCS) -> tuple[torch.Tensor, int]:
    """``([T, float_dim] unit token vectors, number of documents)`` of ``documents`` documents of ``dataset``
    drawn uniformly (reservoir sampling, seeded by ``options.seed``, one pass over the texts, encoding only
    the sample) under ``model`` (a float encoder, or a centred one: both give the unit float vectors as
    their query vectors). No label and no query is used."""
    model.eval()
    rng = random.Random(options.seed)
    texts: list[str] = []
    for seen, doc in enumerate(dataset.docs_iter()):
        if len(texts) < documents:
            texts.append(doc.text)
        elif (slot := rng.randrange(seen + 1)) < documents:
            texts[slot] = doc.text
    if not texts:
        raise PipelineError(f"dataset {dataset.name!r} has no documents to centre the codes on")
    parts = []
    for start in range(0, len(texts), options.encode_batch_size):
        ids, att = tokenize(tokenizer, texts[start : start + options.encode_batch_size], options.max_doc_length, device)
        with _autocast(device):
            vectors, mask = model.encode_queries(ids, att)
        parts.append(vectors.float()[mask])
    return torch.cat(parts), len(texts)


def draw_seeds(first: int, count: int) -> list[int]:
    """The hyperplane seeds ``hash_draws=count`` tries: ``first`` (the single draw's seed, so one draw is the
    draw of before) and ``count - 1`` seeds derived from it by hashing, so that pools started from different
    seeds do not share draws."""
    derived = [int(hashlib.sha1(f"hyperplanes:{first}:{i}".encode()).hexdigest()[:8], 16) for i in range(1, count)]
    return [first, *derived]


#: training queries and candidates per query :func:`hyperplane_agreement` scores (BM25's top non-relevant
#: documents and up to a quarter of them judged relevant)
AGREEMENT_QUERIES = 64
AGREEMENT_DOCS = 24


def kendall_tau(first: torch.Tensor, second: torch.Tensor) -> float:
    """Kendall's tau-a of two score vectors over the same items (ties count as disagreement-free zeros)."""
    a = torch.sign(first[:, None] - first[None, :])
    b = torch.sign(second[:, None] - second[None, :])
    pairs = len(first) * (len(first) - 1)
    return float((a * b).sum() / pairs) if pairs else 1.0


def agreement_sample(source: TrainingSource, negatives: dict[str, list[str]], seed: int,
                     queries: int = AGREEMENT_QUERIES, docs: int = AGREEMENT_DOCS) -> list[tuple[str, list[str]]]:
    """``(query text, document texts)`` of up to ``queries`` training queries (seeded sample): each with its
    first judged-relevant documents (at most a quarter of ``docs``) and BM25's top non-relevant ones."""
    store = source.dataset.doc_store()
    qrels = source.dataset.qrels_dict()
    chosen = sorted(source.query_ids)
    random.Random(seed).shuffle(chosen)
    sample = []
    for qid in chosen:
        relevant = sorted(d for d, r in qrels.get(qid, {}).items() if r > 0 and d in store)[: max(1, docs // 4)]
        pool = relevant + [d for d in negatives.get(qid, []) if d in store][: docs - len(relevant)]
        if len(pool) >= 2:
            sample.append((source.dataset.queries[qid].text, [store[d].text for d in pool]))
        if len(sample) == queries:
            break
    return sample


@torch.no_grad()
def hyperplane_agreement(float_model: "TokenCodeEncoder", tokenizer, sample: Sequence[tuple[str, list[str]]],
                         bits: int, seeds: Sequence[int], options: "CodeOptions", device=None,
                         center_vectors: torch.Tensor | None = None) -> list[float]:
    """For each seed, the mean Kendall tau, over ``sample``'s queries, between the float model's MaxSim
    scores of the query's documents and the scores of their ``bits``-bit hashed codes under that seed's
    hyperplanes (:func:`hashed_from_float`: normalised ``R x`` for query tokens, ``sign(R x)`` for document
    tokens, ``x`` the float projections; centred codes with ``center_vectors``, see :func:`hashed_from_float`).
    No relevance label is used: the draw is judged only by how well its codes reproduce the float ranking,
    which is all that hashing can lose. Each text is encoded once."""
    float_model.eval()
    if center_vectors is None:
        planes = [random_hyperplanes(bits, float_model.dim, seed).to(float_model.project.weight.device) for seed in seeds]
        hashed = [None] * len(seeds)
    else:
        hashed = [hashed_from_float(float_model, bits, options.alpha, seed, center_vectors) for seed in seeds]
        planes = [model.hyperplanes for model in hashed]
    taus = np.zeros((len(seeds), len(sample)))
    for column, (query, docs) in enumerate(sample):
        q_ids, q_att = tokenize(tokenizer, [query], options.max_query_length, device)
        d_ids, d_att = tokenize(tokenizer, docs, options.max_doc_length, device)
        with _autocast(device):
            q, q_mask = float_model.project_tokens(q_ids, q_att)
            d, d_mask = float_model.project_tokens(d_ids, d_att)
        q, d = q.float(), d.float()
        reference = maxsim(F.normalize(q, dim=-1) * q_mask[..., None], q_mask,
                           F.normalize(d, dim=-1) * d_mask[..., None], d_mask)[0]
        for row, (plane, model) in enumerate(zip(planes, hashed)):
            if model is not None:  # centred: unit float queries against sign(R (v - mu))
                unit_q = F.normalize(q, dim=-1) * q_mask[..., None]
                codes = model.binary_codes(model.hash_unit_vectors(F.normalize(d, dim=-1)), hard=True)
                taus[row, column] = kendall_tau(reference, model.score(unit_q, q_mask, codes, d_mask)[0])
                continue
            hashed_q = F.normalize(q @ plane.T, dim=-1) * q_mask[..., None]
            codes = float_model.binary_codes(d @ plane.T, hard=True) * d_mask[..., None]  # what the index stores
            taus[row, column] = kendall_tau(reference, maxsim(hashed_q, q_mask, codes, d_mask)[0])
    return taus.mean(axis=1).tolist()


