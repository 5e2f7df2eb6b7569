"""Paired significance tests between two runs' per-query values, and the correction of several p-values for
multiple comparisons. :func:`pipeline.core.evaluation.compare` tests runs against a baseline with them."""
from __future__ import annotations

from typing import Sequence

from .errors import PipelineError


def correct_pvalues(pvalues: Sequence[float], method: str = "holm") -> list[float]:
    """Adjust p-values for multiple comparisons.

    Args:
        pvalues: the raw p-values.
        method: ``holm`` (step-down), ``bonferroni`` or ``none``.

    Returns:
        The adjusted p-values, in the order given.

    Raises:
        PipelineError: an unknown method.

    Example:
        >>> correct_pvalues([0.01, 0.04], "holm")
        [0.02, 0.04]
    """
    n = len(pvalues)
    if method == "none" or n == 0:
        return list(pvalues)
    if method == "bonferroni":
        return [min(1.0, p * n) for p in pvalues]
    if method != "holm":
        raise PipelineError(f"unknown correction {method!r}; expected holm, bonferroni or none")
    order = sorted(range(n), key=lambda i: pvalues[i])
    adjusted = [0.0] * n
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (n - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def paired_test(a: Sequence[float], b: Sequence[float], test: str = "ttest") -> float:
    """Two-sided p-value of a paired test.

    Args:
        a: one run's per-query values.
        b: the other's, for the same queries in the same order.
        test: ``ttest`` or ``wilcoxon``.

    Returns:
        The p-value; 1.0 when the samples are identical or fewer than 2.

    Raises:
        PipelineError: an unknown test.
    """
    from scipy import stats

    if len(a) < 2 or all(x == y for x, y in zip(a, b)):
        return 1.0
    if test == "ttest":
        return float(stats.ttest_rel(a, b).pvalue)
    if test == "wilcoxon":
        return float(stats.wilcoxon(a, b).pvalue)
    raise PipelineError(f"unknown test {test!r}; expected ttest or wilcoxon")
