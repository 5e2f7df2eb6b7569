"""Pooling over interaction matrices: k-max (Match-SRNN, MV-LSTM), Gaussian kernels (KNRM), matching
histograms (DRMM), dynamic max pooling (MatchPyramid) and the IDF-weighted max and mean of a normalised
similarity matrix (HCAN's relevance matching, eq. 1)."""

from __future__ import annotations

import torch

from .masking import (
    _broadcast_mask, interaction_mask, lengths_from_mask, masked_max, masked_mean, masked_softmax,
    masked_softmax_with_null, masked_sum,
)
from .similarity import cosine_matrix, dot_matrix


def kmax_pooling(
    x: torch.Tensor, k: int, dim: int = -1, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Keep the ``k`` largest values along ``dim``, sorted descending (MV-LSTM, PACRR).

    Masked entries are never selected while real ones remain. When a slice
    has fewer than ``k`` real values (or ``dim`` is shorter than ``k``), the
    real values come first, in descending order, and the remaining slots are
    0, so the output always has size ``k`` along ``dim`` whatever the padding.

    Args:
        x: any shape.
        k: number of values to keep (>= 1).
        dim: axis to pool.
        mask: optional bool broadcastable to ``x`` (trailing singleton dims added).

    Returns:
        ``x`` with ``dim`` replaced by size ``k``.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    dim = dim % x.dim()
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    else:
        mask = _broadcast_mask(mask, x)
    size = x.shape[dim]
    if size < k:
        # Pad with masked slots so topk can always return k entries.
        pad_shape = list(x.shape)
        pad_shape[dim] = k - size
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
        mask = torch.cat([mask, mask.new_zeros(pad_shape)], dim=dim)
    filled = x.masked_fill(~mask, float("-inf"))
    values, idx = filled.topk(k, dim=dim, largest=True, sorted=True)
    picked_real = mask.gather(dim, idx)
    return values.masked_fill(~picked_real, 0.0)


def kernel_mus_sigmas(
    n_kernels: int, sigma: float = 0.1, exact_sigma: float = 1e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel centres and widths of K-NRM (Xiong et al., SIGIR 2017, Sec. 3.2).

    The first kernel is the exact-match kernel (mu=1, sigma=``exact_sigma``);
    the other ``n_kernels-1`` centres split [-1, 1] into equal bins and sit in
    the middle of each: for 11 kernels, mu = 1, 0.9, 0.7, ..., -0.9.

    Args:
        n_kernels: total number of kernels, exact-match one included (>= 2).
        sigma: width of the soft-match kernels.
        exact_sigma: width of the exact-match kernel.

    Returns:
        ``(mus [K], sigmas [K])`` float32 tensors.
    """
    if n_kernels < 2:
        raise ValueError("n_kernels must be >= 2 (exact match + at least one soft kernel)")
    bin_size = 2.0 / (n_kernels - 1)
    mus = [1.0] + [1.0 - bin_size / 2 - i * bin_size for i in range(n_kernels - 1)]
    sigmas = [exact_sigma] + [sigma] * (n_kernels - 1)
    return torch.tensor(mus), torch.tensor(sigmas)


def gaussian_kernel_pooling(
    sim_matrix: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
    mus: torch.Tensor,
    sigmas: torch.Tensor,
    min_soft_tf: float = 1e-10,
    scale: float = 1.0,
) -> torch.Tensor:
    """K-NRM kernel pooling -> soft-TF log-sum features (Xiong et al. 2017, eq. 4-5).

    ``K_k(M_i) = sum_j exp(-(M_ij - mu_k)^2 / (2 sigma_k^2))`` over real document
    positions j, and the feature is ``phi_k = sum_i scale * log(max(K_k(M_i), min_soft_tf))``
    over real query positions i.

    Args:
        sim_matrix: ``[B, Lq, Ld]`` (typically cosine similarities).
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.
        mus: ``[K]`` kernel centres.
        sigmas: ``[K]`` kernel widths.
        min_soft_tf: floor before the log, so a kernel nothing falls into adds
            log(min_soft_tf) instead of -inf.
        scale: multiplier on each log term (the original K-NRM code used 0.01
            to keep the initial logits small; the paper has none, so 1.0 here).

    Returns:
        ``[B, K]`` features.
    """
    mus = mus.to(sim_matrix).view(1, 1, 1, -1)
    sigmas = sigmas.to(sim_matrix).view(1, 1, 1, -1)
    kernel_values = torch.exp(-((sim_matrix.unsqueeze(-1) - mus) ** 2) / (2 * sigmas**2))
    soft_tf = masked_sum(kernel_values, d_mask.unsqueeze(1), dim=2)  # [B, Lq, K]
    log_tf = torch.log(soft_tf.clamp_min(min_soft_tf)) * scale
    return masked_sum(log_tf, q_mask, dim=1)


def matching_histogram(
    sim: torch.Tensor,
    q_mask: torch.Tensor,
    d_mask: torch.Tensor,
    bins: int,
    mode: str = "lch",
    exact_tol: float = 1e-6,
) -> torch.Tensor:
    """DRMM matching histogram per query term (Guo et al., CIKM 2016, Sec. 3.1).

    The range [-1, 1) is split into ``bins - 1`` equal bins and the last bin
    holds exact matches only (sim >= 1 - ``exact_tol``, since the cosine of a
    vector with itself is 1 only up to rounding). E.g. ``bins=5``:
    [-1,-0.5), [-0.5,0), [0,0.5), [0.5,1), [1,1].

    Args:
        sim: ``[B, Lq, Ld]`` similarities in [-1, 1].
        q_mask: ``[B, Lq]`` bool; padded query rows get an all-zero histogram.
        d_mask: ``[B, Ld]`` bool; padded document cells are not counted.
        bins: number of bins, exact-match bin included (>= 2).
        mode: ``"ch"`` raw counts, ``"nh"`` counts / document length,
            ``"lch"`` log(1 + count) (the paper's best, log-count histogram).
        exact_tol: tolerance that sends near-1 similarities to the exact bin.

    Returns:
        ``[B, Lq, bins]`` float.
    """
    if bins < 2:
        raise ValueError("bins must be >= 2")
    soft_bins = bins - 1
    idx = torch.floor((sim.clamp(-1.0, 1.0) + 1.0) / 2.0 * soft_bins).long().clamp(0, soft_bins - 1)
    idx = torch.where(sim >= 1.0 - exact_tol, torch.full_like(idx, bins - 1), idx)
    cells = interaction_mask(q_mask, d_mask).to(sim.dtype)
    counts = sim.new_zeros(sim.shape[:2] + (bins,))
    counts.scatter_add_(2, idx, cells)
    if mode == "ch":
        return counts
    if mode == "nh":
        doc_len = d_mask.sum(dim=-1).clamp_min(1).to(sim.dtype).view(-1, 1, 1)
        return counts / doc_len
    if mode == "lch":
        return torch.log1p(counts)
    raise ValueError(f"unknown histogram mode {mode!r} (use 'ch', 'nh' or 'lch')")


def _dynamic_max_pool_last_axis(x: torch.Tensor, lengths: torch.Tensor, size: int) -> torch.Tensor:
    # Window r over a row of real length n is [floor(r*n/P), ceil((r+1)*n/P)),
    # the formula of adaptive max pooling, so P windows always cover the n
    # real positions (repeating some when n < P) and never reach padding.
    # Gathering at most ceil(L/P)+1 positions per window keeps the memory at
    # O(P * window) instead of the O(P * L) of a dense window-membership mask.
    batch, length = x.shape[0], x.shape[-1]
    leading = x.shape[1:-1]
    ones = (1,) * len(leading)
    real = lengths.clamp(0, length).view(batch, 1)
    slots = torch.arange(size, device=x.device).view(1, size)
    start = (slots * real) // size
    end = ((slots + 1) * real + size - 1) // size
    width = max(1, min(length, -(-length // size) + 1))
    index = start.unsqueeze(-1) + torch.arange(width, device=x.device).view(1, 1, width)
    inside = index < end.unsqueeze(-1)  # [B, P, W]
    index = index.clamp_max(max(length - 1, 0))
    flat = index.view(batch, *ones, size * width).expand(batch, *leading, size * width)
    gathered = x.gather(-1, flat).view(batch, *leading, size, width)
    gathered = gathered.masked_fill(~inside.view(batch, *ones, size, width), torch.finfo(x.dtype).min)
    pooled = gathered.amax(dim=-1)
    empty = (end <= start).view(batch, *ones, size)  # only rows with no real position at all
    return pooled.masked_fill(empty, 0.0)


def masked_dynamic_max_pool2d(
    x: torch.Tensor, q_mask: torch.Tensor, d_mask: torch.Tensor, output_size: tuple[int, int]
) -> torch.Tensor:
    """Dynamic max pooling of each pair's real sub-matrix to a fixed grid (MatchPyramid, Pang et al. 2016).

    MatchPyramid (AAAI 2016, Sec. 3.2, eq. 5, after Socher et al. 2011)
    pools a feature map whose size depends on the two texts' lengths into a
    fixed ``Pq x Pd`` grid, with pooling windows of size about ``n/Pq`` by
    ``m/Pd`` for real lengths ``n`` and ``m``. Here window ``(r, c)`` covers
    rows ``[floor(r*n/Pq), ceil((r+1)*n/Pq))`` and columns
    ``[floor(c*m/Pd), ceil((c+1)*m/Pd))`` of the real region only: the same
    windows as ``F.adaptive_max_pool2d(x[b, :, :n, :m], output_size)``, so a
    text shorter than the grid has its rows/columns repeated, and the result
    never depends on how much padding the batch adds.

    Args:
        x: ``[B, C, Lq, Ld]`` feature maps (e.g. convolved interaction matrices).
        q_mask: ``[B, Lq]`` bool; real tokens must form a prefix of each row.
        d_mask: ``[B, Ld]`` bool; same convention.
        output_size: ``(Pq, Pd)``, both >= 1.

    Returns:
        ``[B, C, Pq, Pd]``; a pair with no real query or document token gets zeros.
    """
    rows, cols = output_size
    if rows < 1 or cols < 1:
        raise ValueError(f"output_size must be positive, got {output_size}")
    if x.dim() != 4:
        raise ValueError(f"x must be [B, C, Lq, Ld], got shape {tuple(x.shape)}")
    pooled = _dynamic_max_pool_last_axis(x, lengths_from_mask(d_mask), cols)  # [B, C, Lq, Pd]
    pooled = _dynamic_max_pool_last_axis(pooled.transpose(-1, -2), lengths_from_mask(q_mask), rows)
    return pooled.transpose(-1, -2).contiguous()


def relevance_matching_features(u_q: torch.Tensor, u_c: torch.Tensor, q_mask: torch.Tensor, d_mask: torch.Tensor,
                                idf: torch.Tensor, softmax_over: str = "context",
                                null_logit: torch.Tensor | None = None) -> torch.Tensor:
    """IDF-weighted max and mean of the normalised similarity matrix, eq. 1.

    ``S = U_q U_c^T``; ``S~`` = S softmax-normalised over the context (``softmax_over="context"``, for each
    query phrase) or over the query (for each context phrase, the released code); then for each query phrase i
    ``Max_i = max_j S~_ij`` and ``Mean_i = mean_j S~_ij`` over the real context phrases j, and
    ``o_RM = {wgt(q) * Max, wgt(q) * Mean}``.

    Args:
        u_q: ``[B, Lq, F]`` query phrase vectors of one level.
        u_c: ``[B, Ld, F]`` context phrase vectors of the same level.
        q_mask: ``[B, Lq]`` bool.
        d_mask: ``[B, Ld]`` bool.
        idf: ``[B, Lq]`` weights of the query phrases of this level.
        softmax_over: ``"context"``, ``"query"`` or ``"none"`` (the cosine matrix itself, no softmax;
            ``null_logit`` must then be None).
        null_logit: optional scalar logit of an extra "no match" entry that takes part in every softmax (and
            is dropped afterwards).

    Returns:
        ``[B, 2, Lq]``: weighted Max then weighted Mean; 0 at query padding.
    """
    cells = interaction_mask(q_mask, d_mask)
    norm_dim = 2 if softmax_over == "context" else 1
    if softmax_over == "none":
        norm_sim = cosine_matrix(u_q, u_c, q_mask, d_mask)
    elif null_logit is None:
        norm_sim = masked_softmax(dot_matrix(u_q, u_c), cells, dim=norm_dim)
    else:  # one extra slot along the normalised axis, always real, holding the null logit
        norm_sim = masked_softmax_with_null(dot_matrix(u_q, u_c), cells, norm_dim, null_logit)
    max_sim = masked_max(norm_sim, cells, dim=2)
    mean_sim = masked_mean(norm_sim, cells, dim=2)
    weights = idf.masked_fill(~q_mask, 0.0)
    return torch.stack([weights * max_sim, weights * mean_sim], dim=1)
