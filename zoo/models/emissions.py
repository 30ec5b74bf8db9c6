"""Emission distributions of the HMM and HSMM families, one per observation type.

Each emission module maps C components (the N states of a softmax or low-rank HMM, or the R rank
components of a rank-space HMM), given as hidden vectors C x D, to the log-probability of each
observation under each component, B x T x C. Components are embedded by the model; the module owns
the observation side (word embeddings, key embeddings) and the normalization.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from zoo.inference.precision import full_width

NORMALIZER_CHUNK = 2**26  # logits per chunk of the categorical normalizer (256 MiB in float32)


def _chunk_logsumexp(hidden: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    return torch.logsumexp(torch.addmm(bias, hidden, weight.T), -1)


class CategoricalEmission(nn.Module):
    """p(x = w | c) = softmax_w(h_c . e_w + b_w) over a vocabulary of V words.

    The normalizer log sum_w exp(h_c . e_w + b_w) is computed once per call (C x V logits, in
    row chunks of at most ``NORMALIZER_CHUNK`` logits, recomputed in the backward so that C x V is
    never held for autograd); the observed words are then scored by one B*T x D @ D x C product.
    No B x T x C x V or per-token C x V tensor is formed.

    Args:
        vocab_size: V.
        dim: D, the size of the component hidden vectors and of the word embeddings.
    """

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.word = nn.Parameter(torch.randn(vocab_size, dim) / dim**0.5)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def log_normalizer(self, hidden: Tensor) -> Tensor:
        """log sum_w exp(h_c . e_w + b_w): C. hidden: C x D."""
        rows = max(1, NORMALIZER_CHUNK // self.vocab_size)
        if hidden.shape[0] <= rows:
            return _chunk_logsumexp(hidden, self.word, self.bias)
        return torch.cat(
            [
                checkpoint(_chunk_logsumexp, h, self.word, self.bias, use_reentrant=False)
                for h in hidden.split(rows)
            ]
        )

    def forward(self, hidden: Tensor, tokens: Tensor) -> Tensor:
        """log p(tokens[b, t] | c): B x T x C. hidden: C x D; tokens: B x T long in 0..V-1."""
        if tokens.dtype not in (torch.long, torch.int32, torch.int64):
            raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"tokens must lie in 0..{self.vocab_size - 1} (vocab_size={self.vocab_size}), "
                f"got values in {int(tokens.min())}..{int(tokens.max())}"
            )
        tokens = tokens.long()
        lse = self.log_normalizer(hidden)
        scores = self.word[tokens] @ hidden.T + self.bias[tokens].unsqueeze(-1)  # B x T x C
        return scores - lse

    def table(self, hidden: Tensor) -> Tensor:
        """The full table log p(w | c): C x V (for inspection and tests; materializes C x V)."""
        return torch.log_softmax(hidden @ self.word.T + self.bias, -1)


class BernoulliEmission(nn.Module):
    """Factored Bernoulli over K keys (Chiu et al. 2021, music): p_ck = sigmoid(h_c . e_k + b_k),

        log p(x | c) = sum_k x_k log p_ck + (1 - x_k) log(1 - p_ck)
                     = x . l_c + sum_k log sigmoid(-l_ck)           (l = logits),

    computed as one B*T x K @ K x C product plus a per-component constant.

    Args:
        num_keys: K (88 piano keys for the music data; configurable for tests).
        dim: D, the size of the component hidden vectors and of the key embeddings.
    """

    def __init__(self, num_keys: int, dim: int):
        super().__init__()
        self.num_keys = num_keys
        self.key = nn.Parameter(torch.randn(num_keys, dim) / dim**0.5)
        self.bias = nn.Parameter(torch.full((num_keys,), -2.0))  # most keys are off in a frame

    def logits(self, hidden: Tensor) -> Tensor:
        """l_ck = log p_ck - log(1 - p_ck): C x K. hidden: C x D."""
        return hidden @ self.key.T + self.bias

    def forward(self, hidden: Tensor, frames: Tensor) -> Tensor:
        """log p(frames[b, t] | c): B x T x C. hidden: C x D; frames: B x T x K, values in {0, 1}."""
        if frames.dim() != 3 or frames.shape[-1] != self.num_keys:
            raise ValueError(
                f"frames must have shape B x T x {self.num_keys} (num_keys), got {tuple(frames.shape)}"
            )
        logits = self.logits(hidden)
        return frames.to(logits.dtype) @ logits.T + F.logsigmoid(-logits).sum(-1)

    def table(self, hidden: Tensor) -> Tensor:
        """p(x_k = 1 | c): C x K (for inspection and tests)."""
        return torch.sigmoid(self.logits(hidden))


MEDIAN_SAMPLES = 31


def median_frame(x: Tensor, lengths: Tensor) -> Tensor:
    """Each sequence's median frame, per feature: B x F. x: B x T x F; lengths: B (>= 1).

    The median of `MEDIAN_SAMPLES` frames evenly spaced over each sequence's own frames (all of them,
    some twice, when it is shorter): an outlier frame does not move it, and it sorts 31 values where the
    median of every frame sorted T (4.8 ms of a 6.5 ms emission at B = 32, T = 200, F = 40; now 1 ms)."""
    batch, steps, width = x.shape
    ends = lengths.to(device=x.device, dtype=torch.float32).clamp(min=1).view(batch, 1)
    spaced = (torch.arange(MEDIAN_SAMPLES, device=x.device, dtype=torch.float32) + 0.5) / MEDIAN_SAMPLES
    index = (spaced * ends).long().clamp(max=steps - 1)  # B x K, inside each length
    return x.gather(1, index.unsqueeze(-1).expand(batch, MEDIAN_SAMPLES, width)).median(1).values


class GaussianEmission(nn.Module):
    """Diagonal-covariance Gaussians over F-dimensional frames (Chiu et al. 2021's HSMM on video features):

        log p(x | c) = -1/2 sum_f [ (x_f - mu_cf)^2 / s_cf + log s_cf + log 2 pi ],

    mu_c = A h_c + a and s_c = min_variance + softplus(B h_c + b) from each component's hidden vector,
    computed as two matrix products (x^2 / s, x mu / s) accumulated onto a per-component constant; no
    B x T x C x F tensor is formed. The products expand the square, so both x and mu are first shifted
    by each sequence's median frame (`median_frame`; an exact identity): features far from 0 (an offset
    of 1000 in float32) would otherwise lose nats to cancellation. Frames far from their sequence's
    median still lose |x - median|^2 / s * 2^-24 nats in float32: standardize features with several
    distant regimes. The products run in float32 under autocast too (bfloat16's 2^-8 cost the bundled
    smartwatch HSMM up to 2 nats on 50 frames); the moments' layers follow the caller's precision.

    Args:
        feature_dim: F.
        dim: D, the size of the component hidden vectors.
        min_variance: a floor on every variance (keeps the likelihood bounded when a component
            collapses onto a few frames).
    """

    def __init__(self, feature_dim: int, dim: int, min_variance: float = 1e-3):
        super().__init__()
        self.feature_dim = feature_dim
        self.min_variance = min_variance
        self.mean = nn.Linear(dim, feature_dim)
        self.scale = nn.Linear(dim, feature_dim)
        nn.init.normal_(self.mean.weight, std=1.0 / dim**0.5)  # means spread over standardized data
        nn.init.zeros_(self.scale.weight)
        nn.init.constant_(self.scale.bias, 0.5413)  # softplus(0.5413) = 1: unit variances at init

    def moments(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """Means and variances: C x F each. hidden: C x D."""
        return self.mean(hidden), self.min_variance + F.softplus(self.scale(hidden))

    def forward(self, hidden: Tensor, features: Tensor, lengths: Tensor | None = None) -> Tensor:
        """log p(features[b, t] | c): B x T x C. hidden: C x D; features: B x T x F float; lengths: B,
        the frames each sequence's shift is the median of (None: all T)."""
        if features.dim() != 3 or features.shape[-1] != self.feature_dim:
            raise ValueError(
                f"features must have shape B x T x {self.feature_dim} (feature_dim), "
                f"got {tuple(features.shape)}"
            )
        mean, var = self.moments(hidden)  # in the caller's precision (bfloat16 under autocast)
        with torch.autocast(features.device.type, enabled=False):  # the products expand the square
            return self._log_density(*(full_width(t) for t in (mean, var)), features, lengths)

    def _log_density(self, mean: Tensor, var: Tensor, features: Tensor, lengths: Tensor | None) -> Tensor:
        """``forward`` from the moments (C x F each), in their dtype."""
        precision = var.reciprocal()  # C x F
        x = features.to(mean.dtype)
        B, T, _ = x.shape
        if lengths is None:
            lengths = torch.full((B,), T, device=x.device)
        shift = median_frame(x.detach(), lengths)  # B x F (log p does not depend on the shift)
        x = x - shift.unsqueeze(1)  # B x T x F
        centred = mean - shift.unsqueeze(1)  # B x C x F
        log_norm = var.log().sum(-1) + self.feature_dim * math.log(2 * math.pi)  # C
        const = (centred.square() * precision).sum(-1) + log_norm  # B x C
        # -1/2 (x^2 @ P^T - 2 x @ (c P)^T + const) as two products accumulated in place, no other pass
        # over B x T x C (the four passes of the plain expression took 2-10x the products' time)
        out = torch.baddbmm((-0.5 * const).unsqueeze(1), x, (centred * precision).transpose(1, 2))
        out.view(B * T, -1).addmm_(x.square().view(B * T, -1), precision.T, alpha=-0.5)
        return out  # B x T x C
