"""The locality-constrained hashing denoiser of ADDAX (Sec. 3.2 of the ADDAX paper; see :mod:`rerankers.addax`
for the reference and the choices): encoder MLP, ``tanh(alpha B)`` codes, decoder MLP, and the quantisation
(L1) and reconstruction (L2) losses.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .layers import positionwise

__all__ = ["HashingDenoiser"]


class HashingDenoiser(nn.Module):
    """Locality-constrained hashing denoiser (Sec. 3.2): encoder MLP, ``tanh(alpha B)`` codes, decoder MLP.

    ``forward(features, mask, losses)`` returns the codes ``B^D`` ``[B, t, h]`` and, when ``losses``, the
    per-document quantisation loss L1 and reconstruction loss L2 (``[B]`` each, over real positions).
    """

    def __init__(self, dim: int, hidden: int, code_dim: int, alpha: float = 5.0, reduction: str = "sum"):
        """
        Args:
            dim: size of the encoder states ``H^D`` it hashes.
            hidden: width of the encoder and decoder MLPs.
            code_dim: ``h``, the code length.
            alpha: the slope of ``tanh(alpha B)``.
            reduction: ``sum`` or ``mean`` of the squared errors over real positions (and code bits).
        """
        super().__init__()
        self.alpha, self.reduction = alpha, reduction
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, code_dim), nn.Tanh())                     # F_en
        self.decoder = nn.Sequential(nn.Linear(code_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, dim))                                     # F_de

    def hash(self, latent: torch.Tensor) -> torch.Tensor:
        """F_h: ``B^D = tanh(alpha B)``.

        Args:
            latent: ``B``, the encoder's output.

        Returns:
            The relaxed codes, shaped like ``latent``.
        """
        return torch.tanh(self.alpha * latent)

    def _reduce(self, squared: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.to(squared.dtype)
        total = (squared.sum(dim=-1) * weights).sum(dim=-1)
        if self.reduction == "mean":
            total = total / (weights.sum(dim=-1).clamp(min=1.0) * squared.shape[-1])
        return total

    def quantization_loss(self, codes: torch.Tensor, latent: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """L1 = ||B^D - sgn(B)||_F^2 per document.

        Args:
            codes: ``B^D`` ``[B, t, h]``.
            latent: ``B`` ``[B, t, h]``.
            mask: ``[B, t]`` bool, True on real positions.

        Returns:
            ``[B]`` losses.
        """
        return self._reduce((codes - torch.sign(latent).detach()) ** 2, mask)

    def reconstruction_loss(self, codes: torch.Tensor, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """L2 = ||F_de(B^D) - H^D||_F^2 per document.

        Args:
            codes: ``B^D`` ``[B, t, h]``.
            features: ``H^D`` ``[B, t, dim]``.
            mask: ``[B, t]`` bool, True on real positions.

        Returns:
            ``[B]`` losses.
        """
        return self._reduce((positionwise(self.decoder, mask, codes) - features) ** 2, mask)

    def forward(self, features: torch.Tensor, mask: torch.Tensor, losses: bool = False):
        """Hash the real positions of ``features``.

        Args:
            features: ``H^D`` ``[B, t, dim]``.
            mask: ``[B, t]`` bool, True on real positions.
            losses: also compute L1 and L2.

        Returns:
            ``(codes [B, t, h], L1 [B], L2 [B])``; the losses are ``None`` without ``losses``.
        """
        latent = positionwise(self.encoder, mask, features)                           # B = F_en(H^D)
        codes = self.hash(latent)                                                      # B^D
        if not losses:
            return codes, None, None
        return codes, self.quantization_loss(codes, latent, mask), self.reconstruction_loss(codes, features, mask)
