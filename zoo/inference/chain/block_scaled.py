"""log Z of a scaled chain in probability space: products rescaled and verified once a block of
positions, recomputed by the guarded log-space steps only where the verification fails; without
gradients (``log_partition``), or with a probability-space backward where every block passes, in
shorter blocks where need be (``differentiable_log_partition``, one shared matrix of log-potentials).

A ``scaled.ScaledChain`` with shared matrices steps as p_t = ((p_{t-1} @ P_1) * W_t) @ P_2 * F_t (one
or two products; W_t and F_t the exp of that point's log-factors minus their max over states, made
for a block, or for the whole chain when it is small, before the block's loop). Inside a block a
product is two kernels (``mm`` and ``mul`` into preallocated buffers): no log, exp, max or host
synchronization, against about ten kernels a step for the guarded forward, which also keeps what
its backward needs. The T - 1 products by one matrix (and the backward's by its transpose) run on
that matrix packed once for oneDNN where that is faster (``zoo.inference.packed``: large matrices
on a CPU).

Why a block is right when it passes. Underflow, flushed to zero or not, moves an entry of p = h * F
by at most tiny (1 + h) (tiny in F, times h; tiny in the product), and a term of the next product
by tiny max(P) (1 + h), so a product entry h' >= bound = K tiny / eps (2 + max(P) h_max), with h_max
the largest entry of the product's input at that position (the previous product's output, F, W <= 1;
1 at a block's first position), is right to float precision whatever was lost
(``zoo.inference.logmatmul`` makes the same argument with h_max = 1). Each position is held to its
own input's scale: p may grow by 2^100 inside a block (near-uniform transitions over many states).
One reduction per product gives each position's smallest and largest h over the live rows: after
each block, or after the last one where every block's h is kept (small chains: fewer kernels). Each
block starts from the exact log at the previous one's end, log h + log F, shifted to max 0: what p
lost to underflow there (emissions far apart shrink p's max by tens of nats a block) is not carried
on. (With gradients, p and F at the block's end are remade from those logs, divided by exp(the
shift), so that the backward takes what the forward used.) A block with an entry below its
position's bound (a forbidden transition, a left-to-right topology, a forward that decays out of the
float range within a block) is tried again in shorter segments, and where that fails too, recomputed
by ``scaled.guarded_step``, the guarded forward's step, from the exact log of its start
(``_Forward.run``). A block cannot overflow: it starts at max 1, each product grows the max by at
most its matrix's largest column sum (W, F <= 1), and a block is at most ``GROWTH_BITS`` of growth
long. Each log Z is read off exact logs: log h + log F at the sequence's last position (h passed the
bound, so its log is exact).

Shapes: B batch, T positions, K states (or rank nodes), M a product's output size.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Sequence

import torch
from torch import Tensor

from zoo.inference.chain import scaled
from zoo.inference.numerics import NEG
from zoo.inference.packed import RepeatedProduct
from zoo.inference.precision import in_full_precision

MAX_BLOCK = 32  # positions between checks: the check's cost amortized, a failed block recomputed
SHORTER = 2  # a failed pass: the blocks after it this many times shorter, and shorter again
GROWTH_BITS = 120  # the most a block may grow the forward's maximum: 2^120 < float32's 2^128
CACHED_FACTORS = 2**18  # up to this many B x T x K elements, every block's factors are made at once
KEPT_WORKSPACE = 2**20  # up to this many elements, a forward's buffers are kept for the next call


def log_partition(chain: scaled.ScaledChain, lengths: Tensor) -> Tensor:
    """log Z (B,) of a chain with shared matrices, no autograd graph (see the module docstring)."""
    with torch.inference_mode():
        x0, n0 = scaled.normalized(chain.first)  # u is read from position 1 on: init needs no fold
        if chain.u.shape[1] == 1:
            log_z = _log_z(chain, lengths, x0, n0)
        else:
            log_z = _log_z(chain, lengths, *_Forward(chain, lengths, x0, n0).run())
    return log_z.clone()


def log_forward_ends(chain: scaled.ScaledChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Each sequence's exact log forward vector at its last position (log of the total score of the
    prefixes ending in each state there) as B x K values of the size of the potentials plus a log scale
    (B,; float64, summed without rounding error growing with T); no autograd graph. A chain with shared
    matrices."""
    with torch.inference_mode():
        x0, n0 = scaled.normalized(chain.first)
        ends, scale = (x0, n0) if chain.u.shape[1] == 1 else _Forward(chain, lengths, x0, n0).run()
    return ends.clone(), scale.clone()


def differentiable_log_partition(chain: scaled.ScaledChain, lengths: Tensor) -> Tensor | None:
    """log Z (B,) with a backward in probability space (``_Backward``), for one shared matrix of
    log-potentials and no end weights (the HMM / CRF layout); None where a block fails its check
    (then the guarded forward with its own backward is the way, see ``scaled.log_partition``)."""
    if chain.u.shape[1] == 1:
        return None
    chain = chain.folded()
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
    scaled.check_alive(torch.minimum(scale, end).amin())  # one element: fewer kernels
    return (scale + end).to(end.dtype)


class _Backward(torch.autograd.Function):
    """The backward of a kept block forward, in probability space: with g_t = d log Z / d p_t,

        d log Z / d u_t = g_t o p_t (the marginals), g_{t-1} = (g_t o F_t) @ P^T,
        d log Z / d log Psi = P o sum_t p_{t-1}^T (g_t o F_t)   (one (T B) x K by (T B) x K product),

    with p and F as the forward kept them: at a block's last position both remade from exact logs and
    divided by exp(the next block's shift), so the next block starts from that p (the shift is a
    constant of log Z's scale). g starts at 1 / sum(p) at each sequence's last position. Two kernels
    a step. Its accuracy rests on the forward's check: every h >= the bound, so g o F = (the
    marginal) / h <= 1 / bound (no overflow), and what underflows in g o F moves a marginal by at most
    tiny max(p)."""

    @staticmethod
    def forward(ctx, u, left, log_z, forward):
        ctx.forward = forward
        ctx.save_for_backward(u, left)
        return log_z.clone()

    @staticmethod
    @in_full_precision  # a backward called under autocast or TF32 (the forward ran in full float32)
    def backward(ctx, grad):
        fw = ctx.forward
        if torch.is_grad_enabled():  # create_graph=True
            chain = scaled.ScaledChain(*ctx.saved_tensors, left_is_log=True)
            return (*scaled.differentiated_again(ctx, grad, chain, fw.lengths)[:2], None, None)
        vectors, P, lengths = fw.vectors, fw.mats[0].scaled, fw.lengths
        T, B, K = vectors.shape
        factors = fw.cached[1]
        last, rows = lengths - 1, torch.arange(B, device=lengths.device)
        start = grad / vectors[last, rows].sum(-1)  # d log Z / d p at each end, B (times ones)
        g_all = torch.zeros_like(vectors)  # g_t, T x B x K
        gh_all = vectors.new_empty(T - 1, B, K)  # g_t o F_t
        g_views, gh_views, times_PT = g_all.unbind(0), gh_all.unbind(0), RepeatedProduct(P.T, B, T - 1)
        ends = set(last.tolist())
        for t in range(T - 1, -1, -1):
            g = g_views[t]
            if t in ends:
                g.copy_(torch.where((last == t).unsqueeze(-1), start.unsqueeze(-1), g))
            if scaled.restores_mass(t, T):  # sum_j g_t(j) p_t(j) = d log Z / d log(scale of p_t)
                live = torch.where(lengths > t, grad, 0.0)
                g.copy_(scaled.restore_mass(g, (g * vectors[t]).sum(-1), live))
            if t == 0:
                break
            gh = torch.mul(g, factors[t - 1], out=gh_views[t - 1])
            times_PT(gh, out=g_views[t - 1])
        grad_u = (g_all * vectors).transpose(0, 1)
        grad_left = None
        if ctx.needs_input_grad[1]:
            grad_left = P * (vectors[:-1].reshape(-1, K).T @ gh_all.reshape(-1, K))
        return grad_u, grad_left, None, None


class _Forward:
    """One forward in blocks: ``run`` returns each sequence's exact log forward vector at its last
    position (B x K) and its log scale (B,; float64). A block's factors, products and checks are computed
    per block (its tensors stay in cache), its checks' results read once for all blocks."""

    def __init__(self, chain: scaled.ScaledChain, lengths: Tensor, x0: Tensor, n0: Tensor, keep=False):
        """``keep``: keep every p_t (``vectors``, T x B x K) and factor for a backward (``_Backward``);
        ``run`` then returns None where it would recompute a block by the guarded steps."""
        u = chain.u
        B, T, K = u.shape
        self.chain, self.lengths, self.x0, self.T = chain, lengths, x0, T
        self.mats = chain.matrices()
        self.products = [RepeatedProduct(m.scaled, B, T - 1) for m in self.mats]  # packed where that pays
        # each matrix's largest entry (the bound), largest column sum (the growth of a product), smallest
        extremes = torch.stack([torch.stack([m.scaled.amax(), m.scaled.sum(-2).amax(), m.scaled.amin()])
                                for m in self.mats])
        self.peaks, growth, smallest = zip(*extremes.tolist())
        self.positive = min(smallest) > 0  # then an h of 0 is underflow, never a forbidden transition
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
        # small chains keep a pass's h by position (its checks read by one reduction a product after
        # it), larger ones in two slots of a block (checked a block at a time, in cache)
        slots = max(len(self.starts), 2) if small else 2
        self.at_once = slots >= len(self.starts)
        self.work = _Workspace.of(u, self.size, widths, cache_factors and not keep, slots)
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
        self.log_factors = None  # without ``keep``, small chains: log F (B x T-1 x K, below tiny too)
        if cache_factors:
            factors, views, top = self._factors(1, T, self.work.factors, self.work.log_factors)
            self.cached = factors, views, top
            self._offsets(top, 1, T)
        self.shifts: dict[int, Tensor] = {}  # block start -> log of what its start was divided by (B x 1)
        self.end_logs: dict[int, Tensor] = {}  # a block's last position -> exact log p there (B x K)
        self.replaced: dict[int, Tensor] = {}  # with ``keep``: a block's last position -> its own F
        self.guarded_logs: dict[int, Tensor] = {}  # exact log p_t where the guarded steps made it
        last = [length - 1 for length in lengths.tolist()]
        self.first_end = min(last) + 1  # from here on, rows past their length are left out
        self.end_positions = set(last)
        self.ends = x0  # B x K: each row becomes the exact log p at its last position

    @functools.cached_property
    def rows(self) -> Tensor:
        """0..B-1, for gathers at each row's own position (ragged lengths)."""
        return torch.arange(len(self.lengths), device=self.lengths.device)

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

    def _factors(self, a: int, b: int, out: tuple[Tensor, Sequence[Tensor]] | None = None,
                 logs: Tensor | None = None):
        """p's factors F_t = exp(later_t - top_t) <= 1 at positions a..b-1 (B x k x K, into ``out``'s
        buffer where given), their views by position and top (B x k x 1): an F below tiny is set to 0
        before the exp (the error the bound allows; a subnormal exp is 100x slower). Small chains
        make them for all positions at once (fewer kernels), larger ones a block at a time (they
        stay in cache). With ``logs`` (a B x k x K buffer), the logs later_t - top_t stay there as
        ``log_factors``: the block ends read them."""
        if self.cached is not None:
            _, views, top = self.cached
            return None, views[a - 1 : b - 1], top[:, a - 1 : b - 1]
        buffer = out[0] if out is not None else None
        later = self._later(a, b, buffer if logs is None else logs)
        top = later.amax(-1, keepdim=True).clamp_min_(NEG)  # made in place, in order: an exp that
        later.sub_(top)  # writes transposed costs 1.5x more
        if logs is None:
            factors = torch.nn.functional.threshold_(later, math.log(self.tiny), -math.inf)
        else:
            self.log_factors = later
            factors = torch.threshold(later, math.log(self.tiny), -math.inf, out=buffer)
        return factors.exp_(), factors.unbind(1) if out is None else out[1], top

    def _log_factor(self, t: int, top: Tensor) -> Tensor:
        """log F_t (B x K), below tiny too; ``top``: top_t (B x 1)."""
        if self.log_factors is not None:
            return self.log_factors[:, t - 1]
        return self._later(t, t + 1)[:, 0] - top

    def run(self) -> tuple[Tensor, Tensor] | None:
        """Blocks in probability space, run in passes: a pass runs its blocks one after the other and
        then reads their checks at once (one host synchronization). The first pass runs every block;
        from the first that fails: where no matrix has a zero entry (an h of 0 is then underflow),
        the rest again in blocks half as long, and shorter again, down to one position (a
        forward that decays by tens of nats a step, with emissions far apart, leaves the float range
        within a long block, not within a short one). Else, or at one position, that block is
        recomputed by the guarded steps from the exact log of its start; a pass after it runs 1,
        then 2, 4, ... blocks, and after each later failure the next 1, then 2, 4, ... blocks go
        guarded directly (a left-to-right topology, with zeros, fails every block)."""
        a, length, count, start = 1, self.size, None, self.x0.exp()  # count None: every block left
        backoff, wait, first = 1, 0, True
        while a < self.T:
            if wait == 0:
                ends = [*range(a + length, self.T, length), self.T][:count]
                passed, a, start = self._pass(a, ends, start)
                if passed:
                    count, backoff, first = None if count is None else 2 * count, 1, False
                    continue
                if self.positive and length > 1:
                    length, count = max(1, length // SHORTER), None
                    continue
                if self.keep:
                    return None
                if not first:  # the next ``wait`` blocks go guarded directly
                    wait, backoff = backoff, 2 * backoff
                first = False
            else:
                wait -= 1
            b = min(a + length, self.T)
            start, a, count = self._guarded(a, b).exp(), b, 1
        for b, shift in self.shifts.items():
            self.scale_steps[b].add_(shift.squeeze(-1))
        steps = self.scale_steps.double()  # summed in float64: each step is exact, a sum of T is not
        if self.first_end == self.T:  # every row ends at T - 1
            return self.ends, steps.sum(0)
        return self.ends, steps.cumsum(0)[self.lengths - 1, self.rows]

    def _pass(self, a: int, ends: list[int], start: Tensor) -> tuple[bool, int, Tensor]:
        """Blocks a..ends[0]-1, ends[0]..ends[1]-1, ... in probability space from ``start``, then their
        checks: (whether every block passed; where the first that failed starts, else ends[-1]; the
        vector that position starts from)."""
        firsts, starts, stats = [a, *ends[:-1]], [], []
        for i, (first, b) in enumerate(zip(firsts, ends)):
            starts.append(start)
            row = first - 1 if self.at_once else (i % 2) * self.size  # at once: h by position
            start, stat = self._lazy(start, first, b, row, kept=self.at_once)
            stats.append(stat)
        if self.at_once:  # one reduction a product over the pass's h
            P, n = len(self.mats), ends[-1] - a
            h = [buffer[a - 1 : ends[-1] - 1] for buffer in self.work.h_all]
            values = torch.cat(self._extremes(h, a, ends[-1])).tolist()
            rows = [values[i * n : (i + 1) * n] for i in range(2 * P)]  # low_1, high_1, ...
            if self._check(rows[0::2], rows[1::2]):  # the whole pass as one block: every block passes
                return True, ends[-1], start
            by_block = [tuple([row[f - a : b - a] for row in rows[i::2]] for i in (0, 1))
                        for f, b in zip(firsts, ends)]
        else:
            values = torch.cat(stats).tolist()
            cuts = [0, *itertools.accumulate(len(stat) for stat in stats)]
            by_block = [self._split_check(values[i:j]) for i, j in zip(cuts, cuts[1:])]
        failed = next((i for i, block in enumerate(by_block) if not self._check(*block)), None)
        if failed is None:
            return True, ends[-1], start
        for end in [e for e in self.shifts if e > firsts[failed]]:
            del self.shifts[end]  # the failed blocks' (the next pass may end its blocks elsewhere)
        for t in [t for t in self.replaced if t >= firsts[failed]]:
            self.cached[1][t - 1].copy_(self.replaced.pop(t))
        return False, firsts[failed], starts[failed]

    def _lazy(self, v: Tensor, a: int, b: int, row: int, kept: bool = False) -> tuple[Tensor, Tensor | None]:
        """Positions a..b-1 of a block in probability space from v (B x K, max 1), their h at ``row``
        on in ``_Workspace.h_all``: (the next block's start, max 1, made from the exact log at b - 1;
        the block's check values, not yet read: each product's smallest and largest h at each
        position over the rows inside their length). ``kept``: the h stay
        until the pass's checks are read at once (no check values now)."""
        _, factors, top = self._factors(a, b)
        if self.cached is None:
            self._offsets(top, a, b)
        ring, h, mul = self.ring[a:b], [rows[row : row + b - a] for rows in self.work.h_rows], torch.mul
        if self.bridge is None:
            times = self.products[0].into
            for h_t, f_t, p_t in zip(h[0], factors, ring):
                v = mul(times(v, out=h_t), f_t, out=p_t)
        else:
            times_1, times_2 = (product.into for product in self.products)
            for h_1, h_2, w_t, f_t, p_t in zip(*h, self.bridge_steps[a - 1 : b - 1], factors, ring):
                v = mul(times_2(times_1(v, out=h_1) * w_t, out=h_2), f_t, out=p_t)
        self._lazy_ends(a, b, row, top)
        if b < self.T:  # the next start from exact logs: what p lost to underflow, it keeps
            log_f = self._log_factor(b - 1, top[:, -1])
            x = self._log_p(h[-1][-1], log_f)  # the exact log p_{b-1}
            shift = x.amax(-1, keepdim=True).clamp_min_(NEG)
            self.end_logs[b - 1], self.shifts[b] = x, shift
            remade = (log_f - shift).exp_()  # F_{b-1} / exp(shift): p_{b-1} / exp(shift) = h remade
            if self.keep:  # what the backward takes as F_{b-1} and p_{b-1}
                self.replaced.setdefault(b - 1, factors[-1].clone())  # F_{b-1}, for a shorter block
                factors[-1].copy_(remade)
                v = torch.mul(h[-1][-1], remade, out=ring[-1])
            else:
                v = h[-1][-1] * remade
        if kept:
            return v, None
        return v, torch.cat(self._extremes([buffer[row : row + b - a] for buffer in self.work.h_all], a, b))

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

    def _lazy_ends(self, a: int, b: int, row: int, top: Tensor) -> None:
        """The exact log p = log h + log F of the rows that end in the block (h passes the bound)."""
        if self.end_positions.isdisjoint(range(a, b)):
            return
        h = self.work.h_all[-1]
        if self.first_end == self.T:  # every row ends at T - 1: slices, not gathers
            self.ends = self._log_p(h[row + b - a - 1], self._log_factor(b - 1, top[:, -1]))
            return
        last, rows = self.lengths - 1, self.rows
        at = last.clamp(a, b - 1)
        if self.log_factors is not None:
            log_f = self.log_factors[rows, at - 1]
        else:
            log_f = self._later_at(at) - top[rows, at - a]
        exact = self._log_p(h[row + at - a, rows], log_f)
        self.ends = torch.where(((last >= a) & (last < b)).unsqueeze(-1), exact, self.ends)

    def _check(self, lows: list[list[float]], highs: list[list[float]]) -> bool:
        """The module docstring's bound at each position of a block (each product's smallest and largest
        h by position): every product's smallest entry against the largest entry of its input (the
        previous product's output, F and W <= 1) or 1 (the block's start has max 1), whichever is
        larger. Blocks one after the other pass it as one block only if each passes alone (one start's
        1 is at most the largest entry before it)."""
        if math.isnan(sum(map(sum, lows)) + sum(map(sum, highs))):  # every value is >= 0: NaN only
            return False  # where one is

        def passes(low: float, m, peak: float, h_in: float) -> bool:
            return low >= self.unit_bound * m.rows * (2 + peak * h_in)

        # the whole block against its largest entry first (one comparison a product), position by
        # position only where that fails: p may grow by 2^100 inside a block
        largest = max(1.0, max(map(max, highs)))
        if all(passes(min(low), m, peak, largest) for low, m, peak in zip(lows, self.mats, self.peaks)):
            return True
        h_in = 1.0
        for j in range(len(lows[0])):
            for low, m, peak, high in zip(lows, self.mats, self.peaks, highs):
                if not passes(low[j], m, peak, h_in):
                    return False
                h_in = max(1.0, high[j])
        return True

    def _split_check(self, values: list[float]) -> tuple[list[list[float]], list[list[float]]]:
        """A block's check values -> (each product's smallest entries by position, its largest)."""
        n = len(values) // (2 * len(self.mats))
        lows = [values[2 * p * n : (2 * p + 1) * n] for p in range(len(self.mats))]
        highs = [values[(2 * p + 1) * n : (2 * p + 2) * n] for p in range(len(self.mats))]
        return lows, highs

    def _start_log(self, a: int) -> Tensor:
        """The exact log of the vector block a starts from: log p_{a-1} shifted as the block's start was."""
        x = self._exact_log(a - 1)
        return x - self.shifts[a] if a in self.shifts else x

    def _exact_log(self, t: int) -> Tensor:
        """log p_t (B x K), exact: x0, the guarded steps' vector, or log h_t + log F_t at a block's
        last position (h passed the bound at every row inside a length, so its log is exact there)."""
        if t == 0:
            return self.x0
        return self.guarded_logs[t] if t in self.guarded_logs else self.end_logs[t]

    def _log_p(self, h: Tensor, log_f: Tensor) -> Tensor:
        """log p = log h + log F (log F = later - top, below tiny too), exact where h passed the bound."""
        return h.clamp_min(self.tiny).log() + log_f

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
    turns in, and, where asked, the B x T-1 x K factors and their logs (only where no backward keeps
    them). Larger ones than ``KEPT_WORKSPACE`` are freed with their forward, as any tensor."""

    _local = threading.local()

    def __init__(self, key: tuple):
        B, T, K, size, widths, factors, slots, dtype, device, _ = key
        self.key = key

        def new(*shape):
            return torch.empty(shape, dtype=dtype, device=device)

        self.h_all = [new(slots * size, B, M) for M in widths]  # a product's h, slot after slot
        self.h_rows = [buffer.unbind(0) for buffer in self.h_all]
        self.ring = [new(B, K), new(B, K)]
        self.factors = self.log_factors = None
        if factors:
            buffer, self.log_factors = new(B, T - 1, K), new(B, T - 1, K)
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
        if B * (slots * size * sum(widths) + 2 * K + 2 * (T - 1) * K * factors) <= KEPT_WORKSPACE:
            cls._local.work = work
        return work
