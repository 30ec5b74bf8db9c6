"""The semi-Markov forward over K nodes, shared by the exact, low-rank, rank-space and randomized DPs,
and the backward pass that samples or decodes from it.

For K nodes (states, or rank nodes in the rank-space DP) with cumulative frame scores C (B x (T+1) x K),
duration log-potentials dur (B x K x D), first-segment log-potentials init (B x K):

    alpha[0]    = init                                   (mass entering a segment that starts at 0)
    beta[t, j]  = lse_{d=1..min(D,t)} alpha[t-d, j] + dur[j, d-1] + C[t, j] - C[t-d, j]
    alpha[t]    = step(t, beta[t])                       (the transition, t = 1..T-1)
    log Z       = lse_j beta[L, j] + final[j]

The duration window is a log-sum-exp over D entries of a B x D x K block (O(D K) a frame; the segment
emissions, differences of float64 cumulative sums cast back to the working dtype, are gathered for all
frames at once, B x T x D x K, so that the backward scatters them back once instead of once a frame);
the transition ``step`` is the only place K x K (or its low-rank / randomized replacement) enters, and
it runs as a guarded product (``zoo.inference.logmatmul``: one matrix product in probability space,
the entries float underflow could have touched recomputed by a log-sum-exp). So the exact DP costs
O(T (D N + N^2)), the low-rank one O(T (D N + N R)), the rank-space one O(T (D R + R^2)); no
B x T x D x N x N tensor is ever formed.
The ``Max`` semiring gives the Viterbi forward (with each segment's best duration, which
``viterbi.best_segmentations`` walks back through), ``Entropy`` the entropy (``zoo.inference.semiring``);
``backtrack`` samples (Gumbel-max) from the forward's ends, or decodes the per-segment form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.numerics import NEG, at_positions, gumbel_noise
from zoo.inference.semimarkov.factors import Cumulative
from zoo.inference.semiring import Entropy, Log, Max, Semiring

SHIFT_EVERY = 32  # frames between the shifts of the forward's log values (Log and Max)


@dataclass
class Problem:
    """The operands of one semi-Markov forward over K nodes.

    Attributes:
        cum: the cumulative frame log-potentials, B x (T+1) x K (``factors.Cumulative``; C[:, 0] = 0).
        duration: B x K x D duration log-potentials.
        init: B x K log-potentials of the first segment's node.
        step: ``step(t, beta, live)`` -> B x K, the mass entering segments that start at frame t (log);
            ``live`` (B,) marks the sequences longer than t (the others are junk). Its ``max`` and
            ``entropy`` (where the backend has them) are the same step in the other semirings.
        final: K or B x K log end weights, or None.
    """

    cum: Cumulative
    duration: Tensor
    init: Tensor
    step: Callable[[int, Tensor], Tensor]
    final: Tensor | None = None

    @property
    def max_length(self) -> int:
        return self.cum.shape[1] - 1


def segment_windows(cum: Cumulative, D: int, dtype: torch.dtype, probe: Tensor | None = None) -> Tensor:
    """The emission (plus probe) of every segment by its end: B x T x D x K, [:, t-1, i] for the segment
    of duration d = D - i ending at frame t (starting at t - d; rows with t - d < 0 are never read).

    Built by one gather for all frames, so its backward is one scatter-add: slicing ``cum`` frame by
    frame would give every frame's backward a zero tensor of the size of ``cum`` (O(T^2 K) in all).
    """
    B, T1, K = cum.shape
    T = T1 - 1
    ends = torch.arange(1, T + 1, device=cum.device).view(T, 1)
    durations = torch.arange(D, 0, -1, device=cum.device).view(1, D)
    starts = (ends - durations).clamp_min(0)  # T x D
    out = cum.span((slice(None), slice(1, None), None), (slice(None), starts), dtype)
    if probe is not None:  # probe B x T x D x K: segment (start, duration, node)
        out = out + probe[:, starts, (durations - 1).expand(T, D)]
    return out


class Forward(NamedTuple):
    """What ``forward`` returns: the semiring's answer (B,); ends, the semiring's values ... x B x (T+1) x K,
    ends[..., t, :] = beta[t] (ends[..., 0, :] = -inf; junk past each length); in ``Max`` also durations,
    B x (T+1) x K long: [:, t, j] the duration of the best segment ending at frame t with node j (the
    Viterbi's back-pointers; row 0 unused), else None; in ``Log`` and ``Max`` offsets, B x (T+1) float64:
    the values are shifted as the forward goes (``SHIFT_EVERY``), beta[t] = ends[:, t] + offsets[:, t]
    (values of one frame compare as they are, values of different frames only with their offsets)."""

    answer: Tensor
    ends: Tensor
    durations: Tensor | None
    offsets: Tensor | None = None


def forward(
    problem: Problem, lengths: Tensor, probe: Tensor | None = None, semiring: Semiring = Log
) -> Forward:
    """Run the forward in a semiring (``zoo.inference.semiring``).

    Args:
        problem: the operands.
        lengths: (B,) in 1..T.
        probe: optional B x T x D x K log-potentials added to each segment (s, d, node) (a zero probe's
            gradient is the segment marginals).
        semiring: ``Log`` (sum-product: log Z), ``Max`` (Viterbi: the best score) or ``Entropy`` (the
            entropy over segmentations: the forward carries each node's conditional entropy of the past,
            Fu et al. 2022, Alg. 3, over segments; ``problem.step`` then needs ``entropy``).
    Returns:
        ``Forward``: the answer, the values ending a segment at each frame, and (``Max``) the best
        durations.
    """
    cum, dur = problem.cum, problem.duration
    B, T1, K = cum.shape
    T, D = T1 - 1, dur.shape[-1]
    dur_rev = dur.transpose(1, 2).flip(1)  # B x D x K, row i holds duration D - i
    shifting = semiring is not Entropy  # (the entropy's pairs run in float64, unshifted)
    frames = best_frames(cum) if shifting else None  # taken out of every path: log Z less their sum
    # per end frame: B x D x K (one backward for all)
    segments = segment_windows(cum if frames is None else frames.less, D, dur.dtype, probe).unbind(1)
    alphas = [semiring.lift(problem.init)]
    betas = [semiring.lift(dur.new_full((B, K), float("-inf")))]
    best = [torch.zeros(B, K, dtype=torch.long, device=cum.device)] if semiring is Max else None
    # log values are shifted as they go: unshifted, they grow with the frame (1e5 nats and more for long
    # Gaussian HSMMs) until float32 rounds away the differences between them (at T = 2,000, frames a
    # thousand nats down: marginals 4 % off, log Z 9 nats, a best path 0.9 nats below the best).
    # offsets[t] is what beta_t lacks (with the best frames' sum).
    offset = dur.new_zeros(B, 1, dtype=torch.float64) if shifting else None
    offsets, pins = [offset], dur.new_zeros(B, 1)
    for t in range(1, T + 1):
        n = min(D, t)
        window = torch.stack(alphas[t - n : t], -2) if n > 1 else alphas[t - 1].unsqueeze(-2)
        # row i of the window: a segment starting at s = t - n + i, of duration d = n - i
        scores = semiring.mul(window, dur_rev[:, D - n :] + segments[t - 1][:, D - n :])
        if best is None:
            beta = semiring.sum(scores, -2)
        else:  # max with indices: as fast as amax on these B x n x K windows
            beta, row = scores.max(-2)
            best.append(n - row)
        betas.append(beta)
        offsets.append(offset)
        if t < T:
            alphas.append(semiring.step(problem.step, t, beta, lengths > t))
            if offset is not None and t % SHIFT_EVERY == 0:  # every alpha a later window reads
                shift = shift_window(alphas, D, lengths > t)
                offset, pins = offset + shift.value, pins + shift.pin
    ends = torch.stack(betas, -2)
    last = at_positions(betas, lengths)  # not ends[..., rows, lengths, :]: O(T^2) differentiated again
    if problem.final is not None:
        last = semiring.mul(last, problem.final)
    durations = torch.stack(best, -2) if best is not None else None
    answer = semiring.result(semiring.sum(last, -1))
    if offset is None:
        return Forward(answer, ends, durations)
    rows = torch.arange(B, device=cum.device)
    at_length = at_positions(offsets, lengths).squeeze(-1) + frames.sums[rows, lengths]
    return Forward(unshifted(answer, at_length, pins), ends, durations, torch.cat(offsets, -1) + frames.sums)


class BestFrames(NamedTuple):
    """Each frame's best log-potential over the K nodes, taken out of every node's (the same for every
    path: each covers every frame once): ``sums`` B x (T+1) float64, its running sums (0 first), and
    ``less`` the ``Cumulative`` without them. With emissions far apart the forward's values then grow
    only by what a path loses to each frame's best, not by the emissions themselves."""

    sums: Tensor
    less: Cumulative


def best_frames(cum: Cumulative) -> BestFrames:
    """``BestFrames`` of cumulative frame log-potentials (a frame with no finite entry counts 0)."""
    sums = cum.sums.detach()  # a constant of every path: no gradient
    frame = sums[:, 1:] - sums[:, :-1]  # B x T x K float64: each frame's finite entries
    if cum.dead is not None:
        frame = frame.masked_fill(cum.dead[:, 1:] > cum.dead[:, :-1], float("-inf"))
    best = frame.amax(-1)
    best = torch.nn.functional.pad(torch.where(torch.isfinite(best), best, 0.0).cumsum(1), (1, 0))
    return BestFrames(best, Cumulative(cum.sums - best.unsqueeze(-1), cum.dead))


class WindowShift(NamedTuple):
    """A shift of the forward's window (``shift_window``): ``value`` B x 1 float64, and ``pin`` B x 1,
    0 in value, whose gradient is the shift's (where ``counted``, else 0): added to log Z, it restores
    the gradient's mass in a backward. Adding c to every value of the window adds c to the log Z of
    the sequences that read it, so the gradient with respect to the window sums to log Z's; float32
    rounding moves that sum a little at each frame back and nothing else restored it (d log Z / d unary,
    1 at each frame, was 9e-6 off near the start of 20,000). With the shift's gradient and the pin, the
    sum is back to its value at every shift."""

    value: Tensor
    pin: Tensor


def shift_window(values: list[Tensor], D: int, counted: Tensor) -> WindowShift:
    """Shift the last D of the B x K log values in ``values`` (those a later D-window reads; replaced in
    the list) by one common max to 0, an all -inf row by NEG. ``counted`` (B,) bool: the sequences whose
    log Z reads the shifted values (``WindowShift``)."""
    window = values[-D:]
    top = torch.stack(window).amax((0, -1)).unsqueeze(-1).clamp_min(NEG)  # B x 1
    values[-D:] = [value - top for value in window]
    pin = torch.where(counted.unsqueeze(-1), top - top.detach(), 0.0)
    return WindowShift(top.detach().double(), pin)


def unshifted(answer: Tensor, offset: Tensor, pins: Tensor) -> Tensor:
    """The answer (B,) of shifted values with its offset (B,) float64 added back (in float64, then cast)
    and the shifts' pins (B x 1, ``WindowShift``)."""
    return (answer.double() + offset).to(answer.dtype) + pins.squeeze(-1)


def factorized_choice(
    problem: Problem, ends: Tensor, columns: Callable[[Tensor], Tensor], offsets: Tensor | None = None
):
    """The backward step of a factorized model: logits over (d, i) of the segment before (t, j).

    ``columns(j)`` -> ... x K: log trans(:, j); ``offsets``: the forward's (``Forward``), for ends of
    different frames. Returns ``choice(t, j)`` for ``backtrack``.
    """
    cum, dur, init = problem.cum, problem.duration, problem.init
    B, _, K = cum.shape
    D = dur.shape[-1]
    dd = torch.arange(1, D + 1, device=cum.device)

    def choice(t: Tensor, j: Tensor) -> Tensor:
        S = t.shape[0]
        b = torch.arange(B, device=cum.device).view(1, B, 1).expand(S, B, D)
        s = t.unsqueeze(-1) - dd  # S x B x D
        valid, sc = s >= 0, s.clamp_min(0)
        jj = j.unsqueeze(-1).expand(S, B, D)
        emit = cum.span((b, t.unsqueeze(-1).expand(S, B, D), jj), (b, sc, jj), dur.dtype)
        seg = emit + dur[b, jj, dd - 1]
        prev = ends[b, sc] + columns(j).unsqueeze(-2)  # S x B x D x K
        first = init[b, jj]  # S x B x D
        slot0 = torch.arange(K, device=cum.device) == 0
        start = torch.where(slot0, first.unsqueeze(-1), float("-inf"))
        logits = torch.where((s == 0).unsqueeze(-1), start, prev) + seg.unsqueeze(-1)
        if offsets is not None:  # each frame's ends in the frame of t (the first segment's offset is 0)
            shift = offsets[b, sc] - offsets[b[..., 0], t].unsqueeze(-1)  # S x B x D
            logits = logits + shift.to(logits.dtype).unsqueeze(-1)
        return torch.where(valid.unsqueeze(-1), logits, float("-inf"))

    return choice


def backtrack(
    ends: Tensor,
    final: Tensor | None,
    choice: Callable[[Tensor, Tensor], Tensor],
    lengths: Tensor,
    max_duration: int,
    num_samples: int,
    noise: bool,
    temperature: float | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Walk back from each sequence's end, picking the last segment's node, then (duration, previous
    node) jointly, until frame 0: exact sampling with Gumbel-max noise (``noise=True``, from
    sum-product ``ends``), or decoding (``noise=False``, from max-product ``ends``).

    Args:
        ends: B x (T+1) x K from ``forward``.
        final: K or B x K log end weights, or None.
        choice: ``choice(t, j)`` -> S x B x D x K logits over (duration d, previous node i) of the
            segment ending at t with node j; at a start s = t - d = 0 slot i = 0 holds the first
            segment's score and the others are -inf.
        temperature: also return the relaxed segment indicators S x B x T x D x K (see
            docs/semimarkov-api.md, ``rsample``).
    Returns:
        segmentations S x B x T (node at each segment start, -1 elsewhere) and the relaxed tensor or None.
    """
    B, T1, K = ends.shape
    T, D, S = T1 - 1, max_duration, num_samples
    dev = ends.device
    hard = torch.full((S, B, T), -1, dtype=torch.long, device=dev)
    t = lengths.view(1, B).expand(S, B).clone()
    logits = ends[torch.arange(B, device=dev), lengths].expand(S, B, K)
    if final is not None:
        logits = logits + final
    if noise:
        logits = logits + gumbel_noise((S, B, K), ends, generator)
    j = logits.argmax(-1)
    active = torch.ones(S, B, dtype=torch.bool, device=dev)
    sidx = torch.arange(S, device=dev).view(S, 1)
    bidx = torch.arange(B, device=dev).view(1, B)
    walked = []  # each segment's (end t, node j, still active, its noise)
    with torch.no_grad():  # the walk: its picks need no graph
        while bool(active.any()):
            lg = choice(t, j)
            drawn = gumbel_noise(lg.shape, ends, generator) if noise else None
            flat = (lg if drawn is None else lg + drawn).flatten(-2).argmax(-1)
            d, i = flat // K + 1, flat % K
            s = t - d
            hard[sidx, bidx, s.clamp_min(0)] = torch.where(active, j, hard[sidx, bidx, s.clamp_min(0)])
            walked.append((t, j, active, drawn))
            active = active & (s > 0)
            t = torch.where(active, s, t)
            j = torch.where(active, i, j)
    if temperature is None:
        return hard, None
    return hard, relaxed_segments(ends, logits, choice, walked, T, D, temperature)


def relaxed_segments(ends: Tensor, logits: Tensor, choice, walked: list, T: int, D: int, temperature: float):
    """``backtrack``'s relaxed segment indicators S x B x T x D x K along the walk it took: every
    segment's logits by one call of ``choice`` (one gather of each operand, whose backward is one
    scatter: a call a segment wrote a zero gradient of each whole operand a segment, O(T^2)), its
    relaxed (duration, previous node) pi, the relaxed node ``state`` carried back, and one scatter."""
    S, B, K = logits.shape
    dd = torch.arange(1, D + 1, device=ends.device)
    t, j, active, drawn = (list(x) for x in zip(*walked))
    lg = choice(torch.cat(t), torch.cat(j))  # (segments S) x B x D x K
    if drawn[0] is not None:
        lg = lg + torch.cat(drawn)
    pis = torch.softmax(lg.flatten(-2) / temperature, -1).view(len(walked), S, B, D, K).unbind(0)
    state, places, weights = torch.softmax(logits / temperature, -1), [], []
    for pi, t_k, active_k in zip(pis, t, active):
        weight = pi.sum(-1) * active_k.unsqueeze(-1)  # relaxed duration, 0 once finished
        places.append(((t_k.unsqueeze(-1) - dd).clamp_min(0) * D + dd - 1).unsqueeze(-1).expand(S, B, D, K))
        weights.append(weight.unsqueeze(-1) * state.unsqueeze(-2))
        state = torch.where(active_k.unsqueeze(-1), pi.sum(-2), state)
    soft = ends.new_zeros(S, B, T * D, K).scatter_add(2, torch.cat(places, 2), torch.cat(weights, 2))
    return soft.view(S, B, T, D, K)
