"""What every semi-Markov backend shares: operations derived from log Z, and the segmentation format.

A backend (``SemiMarkovEngine`` subclass) supplies ``log_partition(factors, lengths, probe)``, where
``probe`` is an optional B x T x D x N zero tensor added to every segment's score; from it the base
class derives segment marginals (the probe's gradient), frame-state marginals (segment marginals
spread over their frames with one cumulative sum), and ``log_prob``. Entropy, Viterbi and sampling
are per backend (the exact engine's on the dense form by default). Each backend declares in
``capabilities`` how each operation is computed; the README's capability table is generated from it.

Segmentation format (docs/semimarkov-api.md): ... x B x T long, the state of the segment that starts
at frame t, -1 elsewhere and past each length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain import LinearChain
from zoo.inference.chain.scaled import ZeroProbability
from zoo.inference.engines import Engine
from zoo.inference.numerics import needs_grad
from zoo.inference.semimarkov.factors import SemiMarkovFactors


def check_covered(log_z: Tensor, lengths: Tensor, max_duration: int) -> Tensor:
    """Raise if some sequence has no segmentation of non-zero potential (log Z = -inf)."""
    bad = torch.isneginf(log_z.detach())
    if bool(bad.any()):
        idx = bad.nonzero().flatten().tolist()
        raise ValueError(
            f"no segmentation covers batch elements {idx} (lengths {lengths[bad].tolist()}) with segments "
            f"of length 1..D = 1..{max_duration} and non-zero potentials: log Z = -inf; check the "
            "duration and transition potentials (e.g. only even durations allowed for an odd length)"
        )
    return log_z


def frames_from_segments(segments: Tensor) -> Tensor:
    """B x T x D x N segment marginals -> B x T x N frame marginals, by a difference array and a cumsum,
    both in float64: in float32, each entry's rounding went on into every later frame's sum, 1.5e-5
    off by frame 5,000. The sums' rounding leaves about 1e-16 (of either sign) where no segment of
    non-zero mass covers a frame (past a length, a state a -inf unary forbids): the same cumsum over
    counts of such segments, exact in integers, makes those frames exactly 0."""
    frames = _covering_sums(segments, torch.float64)
    covered = _covering_sums(segments > 0, torch.int32) > 0
    return torch.where(covered, frames.clamp_min(0), 0.0).to(segments.dtype)


def _covering_sums(segments: Tensor, dtype: torch.dtype) -> Tensor:
    """B x T x N sums, in ``dtype``, over the segments covering each frame: + at a segment's start,
    - after its end, then a cumsum over frames."""
    T, D = segments.shape[1], segments.shape[2]
    diff = torch.nn.functional.pad(segments.sum(2, dtype=dtype), (0, 0, 0, D + 1))  # + at starts
    for d in range(1, D + 1):  # - where each segment of duration d ends
        diff[:, d : T + d] -= segments[:, :, d - 1].to(dtype)
    return diff.cumsum(1)[:, :T]


def to_frame_states(segmentation: Tensor, lengths: Tensor | None = None) -> Tensor:
    """Segmentation (... x B x T, states at segment starts) -> per-frame states, -1 past each length."""
    T = segmentation.shape[-1]
    lengths = None if lengths is None else torch.as_tensor(lengths)
    pos = torch.arange(T, device=segmentation.device)
    last = torch.where(segmentation >= 0, pos, -1).cummax(-1).values
    frames = segmentation.gather(-1, last.clamp_min(0))
    if lengths is not None:
        frames = torch.where(pos < lengths.view(-1, 1).to(segmentation.device), frames, -1)
    return frames


def parse_segmentation(seg: Tensor, lengths: Tensor, num_states: int, max_duration: int):
    """Segments of ... x B x T segmentations, one entry per frame (valid where ``start``).

    Returns (b, s, d, prev, z, start, too_long), all ... x B x T: d clamped to 1..D (``too_long`` marks a
    segment longer than D), prev = -1 for the first segment.
    """
    B, T = seg.shape[-2:]
    dev = seg.device
    pos = torch.arange(T, device=dev)
    valid = pos < lengths.view(B, 1)
    seg = torch.where(valid, seg, -1)
    if bool(((seg < -1) | (seg >= num_states)).any()):
        raise ValueError(
            f"segmentation entries must be states in 0..N-1 = 0..{num_states - 1} at segment starts and "
            f"-1 elsewhere, got values in {int(seg.min())}..{int(seg.max())}"
        )
    if bool((seg[..., 0] < 0).any()):
        raise ValueError(
            "frame 0 must start a segment: segmentation[..., 0] must be a state in 0..N-1, got -1"
        )
    start = seg >= 0
    nxt = torch.where(start, pos, T)
    nxt = torch.cat([nxt[..., 1:], torch.full_like(nxt[..., :1], T)], -1)
    next_start = nxt.flip(-1).cummin(-1).values.flip(-1)
    end = torch.minimum(next_start, lengths.view(B, 1))
    d = end - pos
    last = torch.where(start, pos, -1).cummax(-1).values
    prev_idx = torch.cat([torch.full_like(last[..., :1], -1), last[..., :-1]], -1)
    prev = torch.where(prev_idx >= 0, seg.gather(-1, prev_idx.clamp_min(0)), -1)
    b = torch.arange(B, device=dev).view(B, 1).expand(seg.shape)
    too_long = start & (d > max_duration)
    return b, pos.expand(seg.shape), d.clamp(1, max_duration), prev, seg.clamp_min(0), start, too_long


def segmentation_score(factors: SemiMarkovFactors, seg: Tensor, lengths: Tensor) -> Tensor:
    """score(segmentation): ... x B (-inf for a segment longer than D)."""
    b, s, d, prev, z, start, too_long = parse_segmentation(
        seg, lengths, factors.num_states, factors.max_duration
    )
    scores = factors.segment_scores(b, s, d, prev, z)
    scores = torch.where(too_long, float("-inf"), scores)
    return torch.where(start, scores, 0.0).sum(-1)


def on_one_frame_chain(factors, lengths: Tensor, answer, probe: Tensor | None = None):
    """``answer(chain)`` on the linear chain a D = 1 HSMM equals (``factors.one_frame_chain``), on its
    own backend; None where there is none, or where a sequence has no path (the semi-Markov DP then
    gives its -inf, which ``check_covered`` names)."""
    chain = factors.one_frame_chain(probe)
    if chain is None:
        return None
    try:
        return answer(LinearChain(chain, lengths))
    except ZeroProbability:
        return None


def one_frame_log_partition(factors, lengths: Tensor, probe: Tensor | None = None) -> Tensor | None:
    """log Z of the chain a D = 1 HSMM equals (``on_one_frame_chain``), or None."""
    return on_one_frame_chain(factors, lengths, lambda chain: chain.log_partition, probe)


class SemiMarkovEngine(Engine):
    """Base class of the semi-Markov backends; see the module docstring."""

    def log_partition(
        self, factors, lengths: Tensor, probe: Tensor | None = None, second_order: bool = False
    ) -> Tensor:
        """log Z (B,); ``probe`` (B x T x D x N) added to every segment's score; ``second_order``: twice
        differentiable without overflow (``logmatmul.threshold``), for a double backward."""
        raise NotImplementedError

    def checked(self, log_z: Tensor, factors, lengths: Tensor) -> Tensor:
        return check_covered(log_z, lengths, factors.max_duration)

    def differentiated(self, log_z: Tensor, factors, lengths: Tensor) -> Tensor:
        """The log Z that marginals are the gradient of, checked (the randomized engine also refuses an
        estimate of 0, whose marginals are undefined)."""
        return self.checked(log_z, factors, lengths)

    def segment_marginals(self, factors, lengths: Tensor) -> Tensor:
        """p(segment (s, d, j)): B x T x D x N, the gradient of log Z w.r.t. a zero segment probe."""
        differentiable = needs_grad(*vars(factors).values())
        B, T, D, N = factors.batch, factors.max_length, factors.max_duration, factors.num_states
        with torch.enable_grad():
            probe = torch.zeros(
                B, T, D, N, dtype=self._dtype(factors), device=factors.device, requires_grad=True
            )
            log_z = self.log_partition(factors, lengths, probe, second_order=differentiable)
            log_z = self.differentiated(log_z, factors, lengths)
            (grad,) = torch.autograd.grad(log_z.sum(), probe, create_graph=differentiable)
        return grad

    @staticmethod
    def _dtype(factors) -> torch.dtype:
        for v in vars(factors).values():
            if isinstance(v, Tensor) and v.is_floating_point():
                return v.dtype
        return torch.get_default_dtype()

    def marginals(self, factors, lengths: Tensor) -> Tensor:
        """p(frame t in a segment with state j): B x T x N."""
        return frames_from_segments(self.segment_marginals(factors, lengths))

    def log_prob(self, factors, lengths: Tensor, seg: Tensor, log_z: Tensor | None = None) -> Tensor:
        """log p(seg) = score - log Z, clamped at 0; ``log_z``: this engine's (checked) log Z where it
        is known (computed here otherwise)."""
        if log_z is None:
            log_z = self.checked(self.log_partition(factors, lengths), factors, lengths)
        return (segmentation_score(factors, seg, lengths) - log_z).clamp_max(0.0)

    def entropy(self, factors, lengths: Tensor) -> Tensor:
        raise NotImplementedError

    def argmax(self, factors, lengths: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def sample(self, factors, lengths: Tensor, n: int, generator=None) -> Tensor:
        raise NotImplementedError

    def rsample(self, factors, lengths: Tensor, temperature: float, generator=None) -> Tensor:
        raise NotImplementedError
