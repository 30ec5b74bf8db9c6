"""The rank-space HSMM forward (Yang et al. 2022's construction applied to the HSMM; the derivation is
docs/semimarkov-rank-space.md).

The merged factor p(z_k, d_k, x_seg | z_{k-1}) = sum_r U[z_{k-1}, r] V[z_k, r] w_r(s_k, d_k) puts the
duration and the emission on the rank node; marginalizing every state node leaves a semi-Markov chain
over rank nodes: the rank-to-rank transition H = V^T U (R x R, once per batch), the first segment's
rank weights start @ U, the end weights 1^T V. The forward of ``forward.py`` then runs with K = R:
O(N R^2) once + O(T (D R + R^2)), independent of N.
"""

from __future__ import annotations

import torch

from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE
from zoo.inference.numerics import gumbel_noise, safe_log
from zoo.inference.semimarkov.engine import SemiMarkovEngine, one_frame_log_partition
from zoo.inference.semimarkov.exact import ExactEngine
from zoo.inference.semimarkov.factors import EdgeSemiMarkov, RankSpaceSemiMarkov
from zoo.inference.semimarkov.forward import (
    Problem,
    backtrack,
    factorized_choice,
    forward,
)
from zoo.inference.semimarkov.viterbi import best_segmentations
from zoo.inference.semiring import MatrixStep


def rank_transition(f: RankSpaceSemiMarkov) -> torch.Tensor:
    """H = V^T U: R x R, H[r, r'] = sum_j V[j, r] U[j, r'] (state node j marginalized)."""
    return f.V.T @ f.U


def rank_problem(f: RankSpaceSemiMarkov) -> Problem:
    """The semi-Markov chain over rank nodes."""
    step = MatrixStep(prob=rank_transition(f))
    return Problem(
        f.cumulative(), f.duration, safe_log(f.start @ f.U), step, final=safe_log(f.V.sum(0))
    )


def frame_shifted_dense(f: RankSpaceSemiMarkov, lengths: torch.Tensor) -> tuple[EdgeSemiMarkov, torch.Tensor]:
    """The per-segment form (``f.dense()``) with each frame's best rank emission taken out, and what
    that takes from every segmentation's score: (B,) float64. Each segmentation covers each frame once,
    with one rank node a segment, so all score the same less, and every state-level answer but log Z
    and the best score is unchanged. Unshifted, the segment scores reach hundreds of nats, each rounded
    at eps times that in float32: marginals were 1.3e-5 from float64 on 40-dimensional Gaussian frames."""
    best = f.emission.detach().amax(-1, keepdim=True)  # B x T x 1 (a frame with no finite entry: 0)
    best = torch.where(torch.isfinite(best), best, 0.0)
    shifted = RankSpaceSemiMarkov(f.start, f.U, f.V, f.duration, f.emission - best)
    inside = torch.arange(f.max_length, device=lengths.device) < lengths.unsqueeze(-1)
    return shifted.dense(), (best.squeeze(-1).double() * inside).sum(-1)


def next_start_labels(seg: torch.Tensor) -> torch.Tensor:
    """For each frame, the label at the next segment start after it (-1 if none): ... x T."""
    T = seg.shape[-1]
    pos = torch.arange(T, device=seg.device)
    nxt = torch.where(seg >= 0, pos, T)
    nxt = torch.cat([nxt[..., 1:], torch.full_like(nxt[..., :1], T)], -1)
    nxt = nxt.flip(-1).cummin(-1).values.flip(-1)
    return torch.where(nxt < T, seg.gather(-1, nxt.clamp_max(T - 1)), -1)


def rank_space_sample(f: RankSpaceSemiMarkov, lengths, n: int, generator=None) -> torch.Tensor:
    """Exact samples n x B x T: (segmentation, ranks) backwards from the rank forward, then every
    state independently given the ranks, p(z_k = j | r_k, r_{k+1}) ~ V[j, r_k] U[j, r_{k+1}]
    (V[j, r_m] for the last segment). O(T (D R + R^2)) plus O(N) per segment."""
    problem = rank_problem(f)
    fw = forward(problem, lengths)
    log_h = safe_log(rank_transition(f))
    choice = factorized_choice(problem, fw.ends, lambda r: log_h.T[r], fw.offsets)
    ranks, _ = backtrack(fw.ends, problem.final, choice, lengths, f.max_duration, n, True, None, generator)
    start = ranks >= 0
    log_v, log_u = safe_log(f.V), safe_log(f.U)
    following = next_start_labels(ranks)
    logits = log_v.T[ranks.clamp_min(0)] + torch.where(
        (following >= 0).unsqueeze(-1), log_u.T[following.clamp_min(0)], 0.0
    )
    states = (logits + gumbel_noise(logits.shape, logits, generator)).argmax(-1)
    return torch.where(start, states, -1)


def rank_space_argmax(f: RankSpaceSemiMarkov, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """The best (segmentation, rank components) with every state node summed out: the max-product
    forward over rank nodes, O(T (D R + R^2)), then the walk back. Returns the score (B,), log of
    pi[r_1] W_{r_1} prod_k H[r_{k-1}, r_k] W_{r_k} f[r_m], and the segmentation B x T labelled by the
    rank component of each segment (at its start, -1 elsewhere). Not the Viterbi over states (a max of
    sums, which rank nodes do not carry): the segments' emission and duration models are the rank
    components, so this is the decoding that scales with N."""
    with torch.no_grad():
        log_h = safe_log(rank_transition(f)).T
        return best_segmentations(rank_problem(f), lengths, lambda r: log_h[r])


@register_engine("semimarkov", "rank-space")
class RankSpaceEngine(SemiMarkovEngine):
    """Rank-space HSMM: log Z over rank nodes; state-level operations (which rank nodes do not carry)
    run exactly on the materialized per-segment form (B x (T-1) x D x N x N: small sizes)."""

    name = "rank-space"
    factor_types = (RankSpaceSemiMarkov,)
    capabilities = {
        "log_partition": (NATIVE, "DP over rank nodes: O(N R^2) once + O(T (D R + R^2))"),
        "segment_marginals": (FALLBACK, "autograd on the materialized per-segment form, O(T D N^2 R)"),
        "marginals": (FALLBACK, "from the segment marginals"),
        "entropy": (FALLBACK, "on the materialized per-segment form"),
        "log_prob": (NATIVE, "per-segment scores gathered in O(R); log Z over rank nodes"),
        "argmax": (FALLBACK, "Viterbi on the materialized per-segment form"),
        "sample": (NATIVE, "ranks and segments backwards from the rank forward, then each state given "
                   "its two ranks: O(T (D R + R^2)) + O(N) a segment"),
        "rsample": (FALLBACK, "Gumbel-softmax FFBS on the materialized per-segment form"),
    }

    def log_partition(self, factors, lengths, probe=None, second_order=False):
        if probe is not None:  # on the per-segment form, log-sum-exp throughout
            dense, taken = frame_shifted_dense(factors, lengths)
            log_z = ExactEngine().log_partition(dense, lengths, probe)
            return (log_z.double() + taken).to(log_z.dtype)
        log_z = one_frame_log_partition(factors, lengths)  # D = 1: the rank-space HMM it equals
        return forward(rank_problem(factors), lengths)[0] if log_z is None else log_z

    def entropy(self, factors, lengths):
        return ExactEngine().entropy(frame_shifted_dense(factors, lengths)[0], lengths)

    def argmax(self, factors, lengths):
        dense, taken = frame_shifted_dense(factors, lengths)
        score, segmentation = ExactEngine().argmax(dense, lengths)
        return (score.double() + taken).to(score.dtype), segmentation

    def sample(self, factors, lengths, n, generator=None):
        with torch.no_grad():
            return rank_space_sample(factors, lengths, n, generator)

    def rsample(self, factors, lengths, temperature, generator=None):
        dense, _ = frame_shifted_dense(factors, lengths)
        return ExactEngine().rsample(dense, lengths, temperature, generator)
