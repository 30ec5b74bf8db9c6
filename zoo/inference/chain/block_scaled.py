"""log Z of a scaled chain in probability space: products rescaled and verified once a block of
positions, recomputed by the guarded log-space steps only where the verification fails; without
gradients (``log_partition``), or with a probability-space backward where every block passes
(``differentiable_log_partition``, one shared matrix of log-potentials).

A ``scaled.ScaledChain`` with shared matrices steps as p_t = ((p_{t-1} @ P_1) * W_t) @ P_2 * F_t (one
or two products; W_t and F_t the exp of that point's log-factors minus their max over states, made
for a block, or for the whole chain when it is small, before the block's loop). Inside a block a
product is two kernels (``mm`` and ``mul`` into preallocated buffers): no log, exp, max or host
synchronization, against about ten kernels a step for the guarded forward, which also keeps what
its backward needs.

Why a block is right when it passes. Underflow, flushed to zero or not, moves an entry of p = h * F
by at most tiny (1 + h) (tiny in F, times h; tiny in the product), and a term of the next product
by tiny max(P) (1 + h), so a product entry h' >= bound = K tiny / eps (2 + max(P) h_max), with h_max
the largest entry of the product's input at that position (the previous product's output; F, W <= 1)
or the one carried into the block, is right to float precision whatever was lost
(``zoo.inference.logmatmul`` makes the same argument with h_max = 1). Each position is held to its
own input's scale: p may grow by 2^100 inside a block (near-uniform transitions over many states).
One reduction per product gives each position's smallest and largest h over the live rows: after
each block, or after the last one where every block's h is kept (small chains: fewer kernels). A
block with an entry below its position's bound (a forbidden transition, a left-to-right topology,
emissions hundreds of nats apart) is recomputed by ``scaled.guarded_step``, the guarded forward's
step, from the exact log of its start; first, where it failed only by the error a small divisor at
its start scaled up, it is retried in probability space from that exact log
(``_Forward._adaptive``). A block cannot
overflow: it starts at max 1, each product grows the max by at most its matrix's largest column
sum (W, F <= 1), and a block is at most ``GROWTH_BITS`` of growth long. Each log Z is read off
exact logs: log h + log F at the sequence's last position (h passed the bound, so its log is exact).

Shapes: B batch, T positions, K states (or rank nodes), M a product's output size.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Sequence

import torch
from torch import Tensor

from zoo.inference.chain import scaled
from zoo.inference.numerics import NEG
from zoo.inference.precision import in_full_precision

MAX_BLOCK = 32  # positions between checks: the check's cost amortized, a failed block recomputed
GROWTH_BITS = 120  # the most a block may grow the forward's maximum: 2^120 < float32's 2^128
CACHED_FACTORS = 2**18  # up to this many B x T x K elements, every block's factors are made at once
KEPT_WORKSPACE = 2**20  # up to this many elements, a forward's buffers are kept for the next call


def log_partition(chain: scaled.ScaledChain, lengths: Tensor) -> Tensor:
    """log Z (B,) of a chain with shared matrices, no autograd graph (see the module docstring)."""
    with torch.inference_mode():
        x0, n0 = scaled.normalized(chain.u[:, 0])
        if chain.u.shape[1] == 1:
            log_z = _log_z(chain, lengths, x0, n0)
        else:
            log_z = _log_z(chain, lengths, *_Forward(chain, lengths, x0, n0).run())
    return log_z.clone()


def differentiable_log_partition(chain: scaled.ScaledChain, lengths: Tensor) -> Tensor | None:
    """log Z (B,) with a backward in probability space (``_Backward``), for one shared matrix of
    log-potentials and no end weights (the HMM / CRF layout); None where a block fails its check
    (then the guarded forward with its own backward is the way, see ``scaled.log_partition``)."""
    if chain.u.shape[1] == 1:
        return None
    with torch.no_grad():
        detached = scaled.ScaledChain(chain.u.detach(), chain.left.detach(), left_is_log=True)
        x0, n0 = scaled.normalized(detached.u[:, 0])
        forward = _Forward(detached, lengths, x0, n0, keep=True)
        ends = forward.run()
        if ends is None:
            return None
        log_z = _log_z(detached, lengths, *ends)
    return _Backward.apply(chain.u, chain.left, log_z, forward)


def _log_z(chain: scaled.ScaledChain, lengths: Tensor, last: Tensor, scale: Tensor) -> Tensor:
    """log Z (B,) from each sequence's exact log forward vector at its end (B x K) and its scale."""
    log_end = scaled.log_end(chain)
    last = last if log_end is None else last + log_end
    top = last.amax(-1, keepdim=True).clamp_min(NEG)  # torch.logsumexp costs 5x more at these sizes
    end = (last - top).exp().sum(-1).log() + top.squeeze(-1)
    scaled.check_alive(torch.minimum(scale, end))
    return scale + end


class _Backward(torch.autograd.Function):
    """The backward of a kept block forward, in probability space: with g_t = d log Z / d p_t,

        d log Z / d u_t = g_t o p_t (the marginals), g_{t-1} = ((g_t o F_t) @ P^T) / d_t,
        d log Z / d log Psi = P o sum_t p'_{t-1}^T (g_t o F_t)   (one (T B) x K by (T B) x K product),

    d_t the divisor of a block starting at t (else 1), p' the divided vector; g starts at 1 / sum(p)
    at each sequence's last position. Two kernels a step. Its accuracy rests on the forward's check:
    every h >= the bound, so g <= K max(P) / bound (no overflow for max(P) = 1) and what underflows in
    g o F moves a marginal by at most tiny max(p)."""

    @staticmethod
    def forward(ctx, u, left, log_z, forward):
        ctx.forward = forward
        return log_z.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    @in_full_precision  # a backward called under autocast or TF32 (the forward ran in full float32)
    def backward(ctx, grad):
        fw = ctx.forward
        vectors, P, lengths = fw.vectors, fw.mats[0].scaled, fw.lengths
        T, B, K = vectors.shape
        factors = fw.cached[1]
        last, rows = lengths - 1, torch.arange(B, device=lengths.device)
        start = grad / vectors[last, rows].sum(-1)  # d log Z / d p at each end, B (times ones)
        g_all = torch.zeros_like(vectors)  # g_t, T x B x K
        gh_all = vectors.new_empty(T - 1, B, K)  # g_t o F_t
        g_views, gh_views, PT = g_all.unbind(0), gh_all.unbind(0), P.T
        ends = set(last.tolist())
        for t in range(T - 1, -1, -1):
            g = g_views[t]
            if t in ends:
                g.copy_(torch.where((last == t).unsqueeze(-1), start.unsqueeze(-1), g))
            if t == 0:
                break
            gh = torch.mul(g, factors[t - 1], out=gh_views[t - 1])
            g_prev = torch.mm(gh, PT, out=g_views[t - 1])
            if t in fw.divisors:
                g_prev.div_(fw.divisors[t])
        grad_u = (g_all * vectors).transpose(0, 1)
        grad_left = None
        if ctx.needs_input_grad[1]:
            before = vectors[:-1].clone()  # p'_{t-1}: divided where a block starts at t
            for t, divisor in fw.divisors.items():
                before[t - 1] /= divisor
            grad_left = P * (before.reshape(-1, K).T @ gh_all.reshape(-1, K))
        return grad_u, grad_left, None, None


class _Forward:
    """One forward in blocks: ``run`` returns each sequence's exact log forward vector at its last
    position (B x K) and its log scale (B,). A block's factors, products and checks are computed
    per block (its tensors stay in cache), its checks' results read once for all blocks."""

    def __init__(self, chain: scaled.ScaledChain, lengths: Tensor, x0: Tensor, n0: Tensor, keep=False):
        """``keep``: keep every p_t (``vectors``, T x B x K) and factor for a backward (``_Backward``);
        ``run`` then returns None where a block fails instead of recomputing it."""
        u = chain.u
        B, T, K = u.shape
        self.chain, self.lengths, self.x0, self.T = chain, lengths, x0, T
        self.mats = chain.matrices()
        # each matrix's largest entry (the bound) and largest column sum (the growth of a product)
        extremes = torch.stack([torch.stack([m.scaled.amax(), m.scaled.sum(-2).amax()]) for m in self.mats])
        self.peaks, growth = zip(*extremes.tolist())
        info = torch.finfo(u.dtype)
        self.unit_bound, self.tiny = info.tiny / info.eps, info.tiny
        self.bridge = None
        if len(self.mats) > 1:  # the weights between the two products (B x (T-1) x M) and their max
            self.bridge = scaled.Bridge.of(self.mats[0].shift, chain.log_weights, u)
            self.bridge_steps = self.bridge.scaled.unbind(1)
        self.size = _block_length(growth)
        self.starts = list(range(1, T, self.size))
        small = B * T * K <= CACHED_FACTORS
        cache_factors = keep or small
        widths = tuple(m.scaled.shape[-1] for m in self.mats)
        # block i's h goes to slot i % slots: small chains keep every block's (checked at once after
        # the loop, a few kernels in all), larger ones two (checked a block at a time, in cache)
        self.slots = max(len(self.starts), 2) if small else 2
        self.at_once = self.slots >= len(self.starts)
        self.work = _Workspace.of(u, self.size, widths, cache_factors and not keep, self.slots)
        self.h, self.h_blocks = self.work.h, self.work.h_blocks
        self.keep, self.vectors = keep, None
        # where p_t goes, by t: two buffers taking turns, or with ``keep`` its own row of ``vectors``
        self.ring = self.work.ring * ((T + 1) // 2)
        if keep:
            self.vectors = u.new_empty(T, B, K)
            torch.exp(x0, out=self.vectors[0])
            self.ring = self.vectors.unbind(0)
        self.scale_steps = u.new_zeros(T, B)  # scale_t = their cumsum up to t
        self.scale_steps[0] = n0
        self.cached = None  # with cache_factors: (B x T-1 x K factors, their views by position, top)
        if cache_factors:
            factors, views, top = self._factors(1, T, self.work.factors)
            self.cached = factors, views, top
            self._offsets(top, 1, T)
        self.divisors: dict[int, Tensor] = {}  # block start -> the max (B x 1) its p was divided by
        self.tails: dict[int, tuple[Tensor, Tensor]] = {}  # block start -> (last h, the block's top)
        self.guarded_logs: dict[int, Tensor] = {}  # exact log p_t where the guarded steps made it
        last = (lengths - 1).tolist()
        self.first_end = min(last) + 1  # from here on, rows past their length are left out
        self.end_positions = set(last)
        self.rows = torch.arange(B, device=lengths.device)
        self.ends = x0  # B x K: each row becomes the exact log p at its last position

    def _offsets(self, top: Tensor, a: int, b: int) -> None:
        """The log scale each position's factors add: top (B x k x 1), plus the bridge's max."""
        offsets = top.squeeze(-1)
        if self.bridge is not None:
            offsets = offsets + self.bridge.top[:, a - 1 : b - 1].squeeze(-1)
        self.scale_steps[a:b] = offsets.T

    def _later_at(self, positions: Tensor) -> Tensor:
        """``_later`` at one position (>= 1) a row: B x K."""
        later = self.chain.u[self.rows, positions] + self.mats[-1].shift
        if len(self.mats) == 1 and self.chain.log_weights is not None:
            later += self.chain.log_weights[self.rows, positions - 1]
        return later

    def _later(self, a: int, b: int, out: Tensor | None = None) -> Tensor:
        """The log-factors after the last product at positions a..b-1: B x (b - a) x K, a new tensor
        or ``out`` (u_t + the last product's column shifts + the log-weights of a one-product step)."""
        later = torch.add(self.chain.u[:, a:b], self.mats[-1].shift, out=out)
        if len(self.mats) == 1 and self.chain.log_weights is not None:
            later += self.chain.log_weights[:, a - 1 : b - 1]
        return later

    def _factors(self, a: int, b: int, out: tuple[Tensor, Sequence[Tensor]] | None = None):
        """p's factors F_t = exp(later_t - top_t) <= 1 at positions a..b-1 (B x k x K, into ``out``'s
        buffer where given), their views by position and top (B x k x 1): an F below tiny is set to 0
        before the exp (the error the bound allows; a subnormal exp is 100x slower). Small chains
        make them for all positions at once (fewer kernels), larger ones a block at a time (they
        stay in cache)."""
        if self.cached is not None:
            _, views, top = self.cached
            return None, views[a - 1 : b - 1], top[:, a - 1 : b - 1]
        later = self._later(a, b, None if out is None else out[0])  # made in place, in order: an exp
        top = later.amax(-1, keepdim=True).clamp_min_(NEG)  # that writes transposed costs 1.5x more
        later.sub_(top)
        torch.nn.functional.threshold_(later, math.log(self.tiny), -math.inf)
        return later.exp_(), later.unbind(1) if out is None else out[1], top

    def run(self) -> tuple[Tensor, Tensor] | None:
        """Every block in probability space, checked together (one host synchronization); from the
        first block that fails, block by block (``_adaptive``)."""
        v, stats = self.x0.exp(), []
        for i, a in enumerate(self.starts):
            v, stat = self._lazy(v, a, i % self.slots, check=not self.at_once)
            stats.append(stat)
        if self.at_once:
            by_block = self._checks_at_once()
        else:
            values = torch.cat(stats).tolist()
            cuts = [0, *itertools.accumulate(len(stat) for stat in stats)]
            by_block = [values[i:j] for i, j in zip(cuts, cuts[1:])]
        failed, carried = self._first_failure(by_block)
        if failed is not None and self.keep:
            return None
        if failed is not None:
            self._adaptive(failed, by_block[failed], carried)
        if self.divisors:
            starts = torch.tensor(list(self.divisors), device=v.device)
            logs = torch.cat(list(self.divisors.values()), -1).T.log()
            self.scale_steps.index_add_(0, starts, logs)
        return self.ends, self.scale_steps.cumsum(0)[self.lengths - 1, self.rows]

    def _lazy(self, v: Tensor, a: int, slot: int, check: bool = True) -> tuple[Tensor, Tensor | None]:
        """Positions a..b-1 of a block in probability space from v (B x K, max 1): (the next block's
        start, divided by its max; with ``check``, the block's check values, not yet read: each
        product's smallest and largest h at each position over the rows inside their length, and
        the smallest divisor)."""
        b = min(a + self.size, self.T)
        _, factors, top = self._factors(a, b)
        if self.cached is None:
            self._offsets(top, a, b)
        ring, h = self.ring, self.h[slot]
        if self.bridge is None:
            P = self.mats[0].scaled
            for j, t in enumerate(range(a, b)):
                v = torch.mul(torch.mm(v, P, out=h[0][j]), factors[j], out=ring[t])
        else:
            P1, P2 = self.mats[0].scaled, self.mats[1].scaled
            for j, t in enumerate(range(a, b)):
                v = torch.mm(v, P1, out=h[0][j]) * self.bridge_steps[t - 1]
                v = torch.mul(torch.mm(v, P2, out=h[1][j]), factors[j], out=ring[t])
        last_h = h[-1][b - a - 1]
        self.tails[a] = (last_h if self.at_once else last_h.clone(), top)
        self._lazy_ends(a, b, slot, top)
        if b < self.T:
            divisor = v.amax(-1, keepdim=True).clamp_min_(self.tiny)
            v, self.divisors[b] = v / divisor, divisor
        if not check:
            return v, None
        n = b - a
        stats = self._extremes([buf if n == len(buf) else buf[:n] for buf in self.h_blocks[slot]], a, b)
        stats.append(self.divisors[b].amin(0) if b < self.T else v.new_ones(1))
        return v, torch.cat(stats)

    def _checks_at_once(self) -> list[list[float]]:
        """Every block's check values, as ``_lazy`` makes them, from the h of every block (kept in
        their slots): one reduction a product and one host synchronization for all blocks."""
        T, P = self.T, len(self.mats)
        stats = self._extremes([buffer[: T - 1] for buffer in self.work.h_all], 1, T)
        if self.divisors:
            stats.append(torch.cat(list(self.divisors.values()), -1).amin(0))
        values = torch.cat(stats).tolist()
        rows = [values[i * (T - 1) : (i + 1) * (T - 1)] for i in range(2 * P)]  # low_1, high_1, ...
        smallest = [*values[2 * P * (T - 1) :], 1.0]
        return [
            [x for row in rows for x in row[a - 1 : min(a + self.size, T) - 1]] + [smallest[i]]
            for i, a in enumerate(self.starts)
        ]

    def _extremes(self, blocks: list[Tensor], a: int, b: int) -> list[Tensor]:
        """[min h_1, max h_1, (min h_2, max h_2)], each (b - a,): at each of positions a..b-1 (each
        product's h there: ``blocks``, (b - a) x B x M), over the rows inside their length (one pass
        a product before the first length ends)."""
        live = None
        if b > self.first_end:
            live = (torch.arange(a, b, device=self.lengths.device).unsqueeze(-1) < self.lengths).unsqueeze(-1)
        out = []
        for block in blocks:
            low = high = block
            if live is not None:
                low, high = torch.where(live, block, math.inf), torch.where(live, block, 0.0)
            out += [low.amin((1, 2)), high.amax((1, 2))]  # aminmax(dim=) is 20x slower on a CPU
        return out

    def _lazy_ends(self, a: int, b: int, slot: int, top: Tensor) -> None:
        """The exact log p = log h + log F of the rows that end in the block (h passes the bound)."""
        if not any(a <= e < b for e in self.end_positions):
            return
        if self.first_end == self.T:  # every row ends at T - 1: slices, not gathers
            h_end = self.h_blocks[slot][-1][b - a - 1]
            self.ends = self._log_p(h_end, self._later(b - 1, b)[:, 0], top[:, -1])
            return
        last, rows = self.lengths - 1, self.rows
        at = last.clamp(a, b - 1)
        exact = self._log_p(self.h_blocks[slot][-1][at - a, rows], self._later_at(at), top[rows, at - a])
        self.ends = torch.where(((last >= a) & (last < b)).unsqueeze(-1), exact, self.ends)

    def _check(self, values: list[float], carried: float) -> float | None:
        """The module docstring's bound at each position of a block ([min h_1, max h_1, ...] by
        position, then the smallest divisor): every product's smallest entry against the largest
        entry of its input (the previous product's output, F and W <= 1) or the h_max ``carried`` into
        the block, whichever is larger. None where it fails, else the h_max the next block carries."""
        if math.isnan(sum(values)):  # every value is >= 0: their sum is NaN only where one is
            return None
        lows, highs, smallest = self._split_check(values)
        n = len(lows[0])
        block_max = max(map(max, highs))

        def passes(low: float, m, peak: float, h_in: float) -> bool:
            return low >= self.unit_bound * m.rows * (2 + peak * h_in)

        # the whole block against its largest entry first (one comparison a product), position by
        # position only where that fails: p may grow by 2^100 inside a block
        largest = max(carried, block_max)
        if not all(passes(min(low), m, peak, largest) for low, m, peak in zip(lows, self.mats, self.peaks)):
            h_in = carried
            for j in range(n):
                for low, m, peak, high in zip(lows, self.mats, self.peaks, highs):
                    if not passes(low[j], m, peak, h_in):
                        return None
                    h_in = max(carried, high[j])
        return max(1.0, block_max) / smallest

    def _first_failure(self, values: list[list[float]]) -> tuple[int | None, float]:
        """The index of the first block whose check fails (None if none) and the h_max carried into it."""
        carried = 1.0
        for i, block in enumerate(values):
            passed = self._check(block, carried)
            if passed is None:
                return i, carried
            carried = passed
        return None, carried

    def _adaptive(self, first: int, values: list[float], carried: float) -> None:
        """From block ``first`` (which failed with check ``values`` and ``carried`` h_max) on, block by
        block. A failed block is retried once in probability space from the exact log of its start,
        where its carried h_max was above 1 and none of its entries was 0: a small divisor at the
        previous block's end (peaked emissions shrink the forward's maximum by -log P(i -> j) a step)
        scales what that block lost to underflow by 1 / divisor, and a start from exact logs carries
        none of it. Else, or where the retry fails, it is recomputed by the guarded steps from the
        exact log of its start; after a failed attempt the next 1, then 2, 4, ... blocks go guarded
        directly (a left-to-right topology fails every block, with zeros)."""
        backoff, wait, start = 1, 0, None
        for i in range(first, len(self.starts)):
            a = self.starts[i]
            b = min(a + self.size, self.T)
            passed, attempted = None, i == first
            if i > first and wait == 0:
                v, stat = self._lazy(start, a, i % self.slots)
                values, attempted = stat.tolist(), True
                passed = self._check(values, carried)
            scaled_up = passed is None and attempted and carried > 1.0
            if scaled_up and min(map(min, self._split_check(values)[0])) > 0:  # and no zero entry
                x, shift = scaled.normalized(self._start_log(a))
                v, stat = self._lazy(x.exp(), a, i % self.slots)
                self.scale_steps[a] += shift
                passed = self._check(stat.tolist(), 1.0)
            if passed is not None:
                backoff, carried, start = 1, passed, v
                continue
            if i > first and wait == 0:
                wait, backoff = backoff, 2 * backoff
            elif i > first:
                wait -= 1
            start, carried = self._guarded(a, b).exp(), 1.0  # max 1: the next block starts from it
            if b < self.T:
                self.divisors[b] = start.new_ones(start.shape[0], 1)

    def _split_check(self, values: list[float]) -> tuple[list[list[float]], list[list[float]], float]:
        """A block's check values -> (each product's smallest entries by position, its largest, the
        smallest divisor)."""
        *row, smallest = values
        n = len(row) // (2 * len(self.mats))
        lows = [row[2 * p * n : (2 * p + 1) * n] for p in range(len(self.mats))]
        highs = [row[(2 * p + 1) * n : (2 * p + 2) * n] for p in range(len(self.mats))]
        return lows, highs, smallest

    def _start_log(self, a: int) -> Tensor:
        """The exact log of the vector block a starts from: log p_{a-1} divided as the block's start was."""
        x = self._exact_log(a - 1)
        return x - self.divisors[a].log() if a in self.divisors else x

    def _exact_log(self, t: int) -> Tensor:
        """log p_t (B x K), exact: x0, the guarded steps' vector, or log h_t + log F_t at a block's
        last position (h passed the bound at every row inside a length, so its log is exact there)."""
        if t == 0:
            return self.x0
        if t in self.guarded_logs:
            return self.guarded_logs[t]
        h, top = self.tails[self.starts[(t - 1) // self.size]]
        return self._log_p(h, self._later(t, t + 1)[:, 0], top[:, -1])

    def _log_p(self, h: Tensor, later: Tensor, top: Tensor) -> Tensor:
        """log p = log h + log F = log h + later - top, exact where h passed the bound."""
        return h.clamp_min(self.tiny).log() + later - top

    def _guarded(self, a: int, b: int) -> Tensor:
        """Positions a..b-1 by the guarded steps, from the exact log p_{a-1} divided as the block's
        start was; returns the exact log p_{b-1} (max 0)."""
        chain, mats, last = self.chain, self.mats, self.lengths - 1
        x, shift = scaled.normalized(self._start_log(a))
        for t in range(a, b):
            live = self.lengths > t
            w = chain.log_weights[:, t - 1] if chain.log_weights is not None else None
            x, n = scaled.normalized(scaled.guarded_step(x, mats, w, chain.u[:, t], live))
            scaled.check_alive(n, live)
            self.scale_steps[t] = shift + n
            shift = 0
            self.guarded_logs[t] = x
            if t in self.end_positions:
                self.ends = torch.where((last == t).unsqueeze(-1), x, self.ends)
        return x


def _block_length(growth: Sequence[float]) -> int:
    """Steps a block may take without overflow: a product multiplies the max by at most its matrix's
    largest column sum (the vector's max times the column), the factors by at most 1."""
    bits = sum(math.log2(max(g, 1.0)) for g in growth)
    return max(1, min(MAX_BLOCK, int(GROWTH_BITS // bits) if bits > 0 else MAX_BLOCK))


class _Workspace:
    """The buffers a forward writes in place, with their views by position, kept between calls with
    the same shapes (the latest per thread): making a view costs about what a small product does,
    and a forward needs one a position. Holds each product's h in block slots (two, one block's h
    staying while the next is made; or, for small chains, one a block), the two vectors p_t takes
    turns in, and, where asked, the B x T-1 x K factors (only where no backward keeps them). Larger
    ones than ``KEPT_WORKSPACE`` are freed with their forward, as any tensor."""

    _local = threading.local()

    def __init__(self, key: tuple):
        B, T, K, size, widths, factors, slots, dtype, device, _ = key
        self.key = key

        def new(*shape):
            return torch.empty(shape, dtype=dtype, device=device)

        self.h_all = [new(slots * size, B, M) for M in widths]  # a product's h, slot after slot
        self.h_blocks = [[buffer[s * size : (s + 1) * size] for buffer in self.h_all] for s in range(slots)]
        self.h = [[block.unbind(0) for block in slot] for slot in self.h_blocks]
        self.ring = [new(B, K), new(B, K)]
        self.factors = None
        if factors:
            buffer = new(B, T - 1, K)
            self.factors = buffer, buffer.unbind(1)

    @classmethod
    def of(cls, u: Tensor, size: int, widths: tuple[int, ...], factors: bool, slots: int) -> _Workspace:
        """The thread's workspace for u's shapes (B x T x K), made anew when they changed."""
        B, T, K = u.shape
        # tensors made in inference mode cannot be written outside it: each mode has its own
        key = (B, T, K, size, widths, factors, slots, u.dtype, u.device, torch.is_inference_mode_enabled())
        work = getattr(cls._local, "work", None)
        if work is not None and work.key == key:
            return work
        work = cls(key)
        if B * (slots * size * sum(widths) + 2 * K + (T - 1) * K * factors) <= KEPT_WORKSPACE:
            cls._local.work = work
        return work
