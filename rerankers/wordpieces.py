"""Word pieces for the transformer re-rankers: special tokens around cached ids, padding, distinct rows, and
the tokenizer's fingerprint (:class:`rerankers.transformer_base.TransformerReranker` and its models use them)."""
from __future__ import annotations

import hashlib
import json
from typing import Hashable, Sequence

from pipeline.core.errors import PipelineError

__all__ = ["SpecialTokens", "pad_ids", "unique_rows", "tokenizer_fingerprint"]


def _find(sequence: list[int], part: list[int], start: int = 0) -> int:
    for index in range(start, len(sequence) - len(part) + 1):
        if sequence[index : index + len(part)] == part:
            return index
    raise PipelineError(f"tokenizer: cannot locate {part} in its own output {sequence}")


class SpecialTokens:
    """Where a tokenizer puts its special tokens around one text and around a pair of texts.

    Probed once from the tokenizer's own output for the texts ``"a"`` and ``"b"`` (transformers 5 no longer
    offers ``build_inputs_with_special_tokens``), so ids cached without special tokens can be wrapped
    without tokenizing again.

    Args:
        tokenizer: a ``transformers`` tokenizer.

    Raises:
        PipelineError: the tokenizer's output does not contain the probe texts' ids.
    """

    def __init__(self, tokenizer):
        a = tokenizer("a", add_special_tokens=False)["input_ids"]
        b = tokenizer("b", add_special_tokens=False)["input_ids"]
        single = tokenizer("a")["input_ids"]
        at = _find(single, a)
        self.single_prefix, self.single_suffix = single[:at], single[at + len(a):]
        pair = tokenizer("a", "b")
        ids = pair["input_ids"]
        types = pair.get("token_type_ids") or [0] * len(ids)
        at_a = _find(ids, a)
        at_b = _find(ids, b, at_a + len(a))
        self.pair_prefix, self.pair_middle, self.pair_suffix = ids[:at_a], ids[at_a + len(a):at_b], ids[at_b + len(b):]
        self.pair_types = (types[:at_a], types[at_a], types[at_a + len(a):at_b], types[at_b], types[at_b + len(b):])

    @property
    def prefix_length(self) -> int:
        """Special tokens before a single text (1 for ``[CLS]``)."""
        return len(self.single_prefix)

    def single(self, ids: list[int]) -> list[int]:
        """Ids of one text with its special tokens.

        Args:
            ids: the text's word-piece ids, without special tokens.

        Returns:
            The input ids (``[CLS] ids [SEP]`` for BERT).
        """
        return [*self.single_prefix, *ids, *self.single_suffix]

    def pair(self, first: list[int], second: list[int]) -> tuple[list[int], list[int]]:
        """Ids and token-type ids of ``first`` and ``second`` as one input.

        Args:
            first: the first text's word-piece ids, without special tokens.
            second: the second text's.

        Returns:
            ``(ids, token_type_ids)`` (``[CLS] first [SEP] second [SEP]`` for BERT).
        """
        prefix_t, first_t, middle_t, second_t, suffix_t = self.pair_types
        ids = [*self.pair_prefix, *first, *self.pair_middle, *second, *self.pair_suffix]
        types = [*prefix_t, *([first_t] * len(first)), *middle_t, *([second_t] * len(second)), *suffix_t]
        return ids, types

    def extra(self, pair: bool) -> int:
        """How many special tokens are added to one text or to a pair.

        Args:
            pair: count those of a pair instead of one text.

        Returns:
            The number of special tokens.
        """
        if pair:
            return len(self.pair_prefix) + len(self.pair_middle) + len(self.pair_suffix)
        return len(self.single_prefix) + len(self.single_suffix)


def pad_ids(sequences: Sequence[Sequence[int]], pad_id: int):
    """Right-pad id lists into one tensor.

    Args:
        sequences: id lists.
        pad_id: the tokenizer's padding id.

    Returns:
        ``(ids [N, L] long, mask [N, L] bool)`` (True = real token; ``L`` at least 1).

    Example:
        >>> ids, mask = pad_ids([[5, 6], [7]], 0)
        >>> ids.tolist(), mask.tolist()
        ([[5, 6], [7, 0]], [[True, True], [True, False]])
    """
    import torch

    width = max(1, max(map(len, sequences)))
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.bool)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = True
    return ids, mask


def unique_rows(keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """Distinct keys of a batch (the two-tower models encode each text once).

    Args:
        keys: one key per pair.

    Returns:
        ``(firsts, index)``: the first position of each distinct key, and each key's distinct row.

    Example:
        >>> unique_rows(["q1", "q2", "q1"])
        ([0, 1], [0, 1, 0])
    """
    rows: dict[Hashable, int] = {}
    firsts, index = [], []
    for position, key in enumerate(keys):
        if key not in rows:
            rows[key] = len(firsts)
            firsts.append(position)
        index.append(rows[key])
    return firsts, index


def tokenizer_fingerprint(tokenizer) -> str:
    """A short digest of the tokenizer's vocabulary (a checkpoint must be read with the same one).

    Args:
        tokenizer: a ``transformers`` tokenizer.

    Returns:
        16 hex digits.
    """
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha1(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
