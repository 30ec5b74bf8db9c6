"""The scaled forward shared by the exact (shared transition), low-rank and rank-space chain DPs.

A ``ScaledChain`` describes a chain whose forward step is

    alpha_t = log( exp(log( exp(alpha_{t-1}) @ left ) + lw_t) @ right^T ) + u_t   (right, lw optional)

* exact HMM: left = log Psi (N x N, given in log form);
* low-rank: left = diag(c) phi(U) (N x R), right = phi(V) (N x R), lw_t the log rank weights;
* rank-space: left = V^T U (R x R) over rank nodes, with end weights ``final`` = 1^T V.

Every product is a guarded one (``zoo.inference.logmatmul``): one BLAS call in probability space,
with the entries that float underflow could have touched recomputed by a log-sum-exp. The forward
variables are kept in log space, each position shifted so its best state is 0 (the shifts, summed
at the end, give log Z), so a path that is hundreds of nats behind at one position is still exact
when it is the only one left later, and every local quantity stays of the size of the potentials.

* ``log_partition``: a hand-written backward (``torch.autograd.Function``): the gradient of log Z
  w.r.t. the forward variables is a posterior marginal (in [0, 1]), propagated back through each
  product; each matrix's gradient is one (T B) x K by (T B) x M product at the end, instead of
  T rank-B updates (what autograd would do), which is memory-bound. Differentiated again
  (``create_graph=True``), it takes its gradients from autograd of ``forward`` instead
  (``differentiated_again``).
* ``forward``: plain autograd (twice differentiable), also returning the log forward variables.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.inference.logmatmul import Matrix, columns, log_matmul, repair_index, times
from zoo.inference.numerics import (
    NEG,
    added_at_first,
    at_positions,
    detached_max,
    logsumexp,
    needs_grad,
    safe_log,
)
from zoo.inference.packed import RepeatedProduct
from zoo.inference.precision import in_full_precision


@dataclass
class ScaledChain:
    """The operands of a scaled forward; shapes B batch, T positions, K vector size, M inner size.

    Attributes:
        u: B x T x K log-factors added at each position (emissions, init folded in; -inf allowed).
        left: K x M, log-potentials when ``left_is_log`` else non-negative.
        right: K x M non-negative, or None (then M = K and the step ends after ``left``).
        log_weights: B x (T-1) x M log-weights between the two products, or None.
        final: K non-negative end weights, or None (sum).
        left_is_log: whether ``left`` holds log-potentials.
        init: B x K log-factors added at position 0 alone, or None (``u`` has them): a chain's initial
            log-potentials kept apart, so that the forward without gradients (``block_scaled``)
            copies no B x T x K fold; every other forward folds them in first (``folded``).
    """

    u: Tensor
    left: Tensor
    right: Tensor | None = None
    log_weights: Tensor | None = None
    final: Tensor | None = None
    left_is_log: bool = False
    init: Tensor | None = None

    @property
    def first(self) -> Tensor:
        """The log-factors at position 0 (B x K), ``init`` added."""
        return self.u[:, 0] if self.init is None else self.u[:, 0] + self.init

    def folded(self) -> ScaledChain:
        """The same chain with ``init`` folded into ``u`` (a copy; itself where there is none)."""
        if self.init is None:
            return self
        u = added_at_first(self.u, self.init)
        return ScaledChain(u, self.left, self.right, self.log_weights, self.final, self.left_is_log)

    def matrices(self) -> list[Matrix]:
        """The step's products in order: left, then right^T."""
        left = Matrix.from_log(self.left) if self.left_is_log else Matrix.from_prob(self.left)
        return [left] if self.right is None else [left, Matrix.from_prob(self.right.T)]


class ZeroProbability(ValueError):
    """A sequence of the chain has no path of non-zero potential (log Z = -inf)."""


def check_alive(shift: Tensor, live: Tensor | None = None) -> None:
    """Raise ``ZeroProbability`` where a live sequence (every one without ``live``) has no surviving
    path (its shift, or log Z, is -inf or NEG), naming the sequences where ``shift`` is one per sequence."""
    dead = shift <= NEG / 2
    dead = dead if live is None else dead & live
    if bool(dead.any()):
        which = f" for batch element(s) {dead.nonzero().flatten().tolist()}" if dead.dim() == 1 else ""
        raise ZeroProbability(
            f"the chain has zero probability{which}: no path has a finite score (the -inf entries of its "
            "unary, init / start, transitions or mask leave none)"
        )


# Positions between the backward's restorations of the gradient's mass. The gradient of log Z with
# respect to one position's forward values sums to the incoming gradient (adding c to all of them adds c
# to log Z); float32 rounding moves that sum a little at each step back, and nothing else restores it,
# so the marginals' error grew with the distance from the end: 1e-5 to 3e-5 at T = 20,000, a marginal
# of 1.00017 at its start (Gaussian HMMs). Restored every MASS_EVERY positions, it no longer grows.
MASS_EVERY = 32


def restores_mass(t: int, T: int) -> bool:
    """Whether a backward restores the gradient's mass at position t of T (``MASS_EVERY``): every
    MASS_EVERY positions, from MASS_EVERY positions before the end (a shorter chain drifts too little)."""
    return t % MASS_EVERY == 0 and t <= T - MASS_EVERY


def normalized(y: Tensor, pinned: bool = False) -> tuple[Tensor, Tensor]:
    """(y - n, n) with n the max of each row, NEG for a dead row (which stays -inf, not NaN; ``total``
    raises if that row is inside its length). n is detached unless ``pinned``: then its gradient (on
    the row's best entry) restores the row's gradient mass in a backward (``MASS_EVERY``)."""
    n = (y if pinned else y.detach()).amax(-1).clamp_min(NEG)
    return y - n.unsqueeze(-1), n


def restore_mass(g: Tensor, mass: Tensor, total: Tensor) -> Tensor:
    """``g`` (B x K) scaled so that each row's ``mass`` (B,: its sum, or its sum weighted by the forward
    vector) becomes ``total`` (B,: the incoming gradient); rows of zero mass (past a length) unchanged.
    A gradient with respect to a position's forward values has that mass exactly (``MASS_EVERY``)."""
    return g * torch.where(mass != 0, total / mass, 1.0).unsqueeze(-1)


def log_end(chain: ScaledChain) -> Tensor | None:
    return None if chain.final is None else safe_log(chain.final)


def total(last: Tensor, shift: Tensor, log_final: Tensor | None) -> Tensor:
    """log Z (B,) = shift + lse_j(last_j + log final_j), from each sequence's forward vector at its last
    position (B x K) and the sum of its shifts up to there (B,, float64: each shift is exact, a sum of
    T of them in float32 is not); raises ``ZeroProbability`` where a sequence has no path."""
    if log_final is not None:
        last = last + log_final
    end = last.logsumexp(-1)
    check_alive(shift.minimum(end.detach()), torch.ones_like(shift, dtype=torch.bool))
    return (shift + end).to(end.dtype)


def stacked_ends(alphas: Tensor, shifts: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``total``'s (last, shift) from the stacked forward vectors (B x T x K) and shifts (B x T), where
    no graph is kept (else ``step_ends``)."""
    B, T, _ = alphas.shape
    valid = torch.arange(T, device=alphas.device) < lengths.unsqueeze(-1)
    last = alphas[torch.arange(B, device=alphas.device), lengths - 1]
    return last, torch.where(valid, shifts, 0).sum(-1, dtype=torch.float64)


def step_ends(xs: list[Tensor], ns: list[Tensor], lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``total``'s (last, shift) from the steps' forward vectors (B x K each) and shifts (B,), by ops of
    one step's size (``numerics.at_positions``)."""
    runs = list(itertools.accumulate(n.double() for n in ns))
    return at_positions(xs, lengths - 1), at_positions(runs, lengths - 1)


def guarded_step(
    x: Tensor, mats: list[Matrix], log_weights: Tensor | None, u: Tensor, live: Tensor, second_order=False
):
    """One step of the forward in log space by guarded products, before its normalization: x (B x K,
    the previous forward vector) -> log(exp(log(exp(x) @ M_1) + log_weights) @ M_2) + u (B x K);
    ``second_order``: twice differentiable without overflow (``logmatmul.threshold``)."""
    y = log_matmul(x, mats[0], live, second_order)
    if log_weights is not None:
        y = y + log_weights
    if len(mats) > 1:
        y = log_matmul(y, mats[1], live, second_order)
    return y + u


def forward(chain: ScaledChain, lengths: Tensor, second_order: bool = False) -> tuple[Tensor, Tensor]:
    """log Z (B,) and the log forward variables (B x T x K, each position shifted so its max is 0;
    junk past each length), plain autograd. ``second_order``: twice differentiable without overflow
    (``logmatmul.threshold``; what a double backward runs on). ``left`` may also be per position:
    B x (T-1) x K x M."""
    chain = chain.folded()
    per_position = chain.left.dim() == 4
    mats = None if per_position else chain.matrices()
    # unbind, not [:, t]: one backward that stacks the steps' gradients, instead of a full-size
    # zero gradient per step (B x (T-1) x K x M for per-position transitions)
    u = chain.u.unbind(1)
    blocks = chain.left.unbind(1) if per_position else None
    weights = chain.log_weights.unbind(1) if chain.log_weights is not None else None
    x, n = normalized(u[0])
    xs, ns = [x], [n]
    for t in range(1, len(u)):
        if per_position:
            mats = [Matrix.from_log(blocks[t - 1]) if chain.left_is_log else Matrix.from_prob(blocks[t - 1])]
        w = weights[t - 1] if weights is not None else None
        x, n = normalized(guarded_step(x, mats, w, u[t], lengths > t, second_order), restores_mass(t, len(u)))
        xs.append(x)
        ns.append(n)
    return total(*step_ends(xs, ns, lengths), log_end(chain)), torch.stack(xs, 1)


@dataclass
class _Saved:
    """One product of one step, as the backward needs it: exp(x - max x) (B x K), the product h
    (B x M, clamped at tiny), and the repaired entries: indices, their rows of x (n x K) and exact
    values (n,)."""

    v: Tensor
    h: Tensor
    matrix: Matrix | None = None  # a per-position step's own matrix
    index: tuple[Tensor, ...] | None = None
    rows: Tensor | None = None
    exact: Tensor | None = None


def _product(
    x: Tensor, mat: Matrix, live: Tensor, shifted: bool, folded: bool, product: RepeatedProduct | None = None
) -> tuple[Tensor, _Saved]:
    """The guarded product without autograd, keeping what its backward needs. ``shifted``: x's max
    is already 0 (a normalized forward vector); ``folded``: the caller adds the matrix's column
    shifts itself (folded into the next log-factors), so the repaired entries leave them out;
    ``product``: v -> v @ mat.scaled for a shared matrix (packed where that pays)."""
    m = None if shifted else detached_max(x)
    v = x.exp() if shifted else (x - m).exp()
    h = times(v, mat.scaled) if product is None else product(v)
    h = h.clamp_min(torch.finfo(v.dtype).tiny)  # h below tiny is always repaired
    out = h.log() if shifted else h.log() + m
    if not folded:
        out = out + mat.shift
    return _repaired(out, _Saved(v, h), mat, live, folded, lambda lead: x[lead])


def _repaired(out: Tensor, saved: _Saved, mat: Matrix, live: Tensor, folded: bool, rows_of) -> tuple:
    """``out`` with its entries below the guard's threshold recomputed exactly (log-sum-exp over their
    rows of the product's log input, ``rows_of(lead)`` -> n x K), and ``saved`` completed with them."""
    index = repair_index(saved.h, mat, live)
    if index is None:
        return out, saved
    saved.index, saved.rows = index, rows_of(index[:-1])
    saved.exact = logsumexp(saved.rows + columns(mat.log, index, saved.v.dim()))
    return out.index_put(index, saved.exact - mat.shift[index[-1]] if folded else saved.exact), saved


@dataclass
class Bridge:
    """What a two-product step adds between its products: log w_t = the first matrix's column shifts
    + the rank log-weights (B x (T-1) x M), its max over M and exp(log w_t - max), all precomputed."""

    log: Tensor
    top: Tensor
    scaled: Tensor

    @classmethod
    def of(cls, shift: Tensor, log_weights: Tensor | None, u: Tensor) -> Bridge:
        B, T = u.shape[:2]
        log = shift.expand(B, max(T - 1, 0), -1) if log_weights is None else log_weights + shift
        top = log.amax(-1, keepdim=True).clamp_min(NEG)
        return cls(log, top, (log - top).exp())


def _bridged_product(
    h1: Tensor, bridge: Bridge, t: int, mat: Matrix, live: Tensor, product: RepeatedProduct
) -> tuple[Tensor, _Saved]:
    """The second product of a two-product step whose first had no repaired entry, fed in probability
    space: its input exp(log h1 + log w_t - max log w_t) is h1 * bridge.scaled[:, t] (one multiply, no
    log and exp); the guard's bound is absolute, so the repair stays exact for any input scale.
    ``product``: v -> v @ mat.scaled."""
    v = h1 * bridge.scaled[:, t]
    h = product(v).clamp_min(torch.finfo(v.dtype).tiny)
    out = h.log() + bridge.top[:, t]
    return _repaired(out, _Saved(v, h), mat, live, True, lambda lead: h1[lead].log() + bridge.log[:, t][lead])


def _product_backward(
    g_out: Tensor, s: _Saved, mat: Matrix, repairs: list, transposed: RepeatedProduct | None = None
) -> tuple[Tensor, Tensor]:
    """(d/dx, d/dh) of one product given d/dout; each repaired entry's (index, d/dout times its
    softmax weights over the K inputs, n x K) goes to ``repairs`` for the matrix gradient.
    ``transposed``: g -> g @ mat.scaled^T for a shared matrix (packed where that pays)."""
    g = g_out if s.index is None else g_out.index_put(s.index, g_out.new_zeros(()))
    g_h = g / s.h  # 0 where repaired or junk
    g_x = (times(g_h, mat.scaled.transpose(-1, -2)) if transposed is None else transposed(g_h)) * s.v
    if s.index is not None:
        w = _repair_weights(s.rows + columns(mat.log, s.index, 2), s.exact, g_out[s.index])
        g_x = g_x.index_put(s.index[:-1], w, accumulate=True)
        repairs.append((s.index, w))
    return g_x, g_h


def _repair_weights(scores: Tensor, exact: Tensor, g: Tensor) -> Tensor:
    """g * exp(scores - exact), n x K, with 0 for an entry whose exact value is -inf."""
    w = (scores - exact.unsqueeze(-1)).exp()
    return torch.where(torch.isneginf(exact).unsqueeze(-1), 0.0, w) * g.unsqueeze(-1)


def _matrix_grad(raw: Tensor, mat: Matrix, is_log: bool, vs: list, ghs: list, repairs: list) -> Tensor:
    """The gradient w.r.t. the caller's K x M matrix (log-potentials or non-negative) from all steps:
    one (T B) x K by (T B) x M product, plus the repaired entries' exact gradients."""
    grad = torch.cat(vs).T @ torch.cat(ghs)  # d/d scaled
    if is_log:  # scaled = exp(log M - c); d exact / d log M[i, j] = the softmax weight
        grad = grad * mat.scaled
        for index, w in repairs:
            grad = grad.index_add(1, index[-1], w.T)
        return grad
    for index, w in repairs:  # scaled = M; d exact / d M[i, j] = softmax weight / M[i, j] (0 at M = 0)
        m = columns(raw, index, 2)
        grad = grad.index_add(1, index[-1], torch.where(m > 0, w / m, 0.0).T)
    return grad


def _per_position_grad(s: _Saved, mat: Matrix, g_h: Tensor, repairs: list) -> Tensor:
    """d/d log Psi_t (B x K x M) of one per-position step: P_t o (v (x) d/dh), plus the repaired
    entries' softmax weights in their columns."""
    grad = s.v.unsqueeze(-1) * g_h.unsqueeze(-2) * mat.scaled
    for index, w in repairs:
        grad[index[0], :, index[-1]] += w  # (b, j) pairs are distinct
    return grad


class _ScaledForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, left, right, log_weights, final, lengths, left_is_log):
        chain = ScaledChain(u, left, right, log_weights, final, left_is_log)
        per_position = left.dim() == 4
        mats = None if per_position else chain.matrices()
        B, T = u.shape[:2]
        products = [None] if per_position else [RepeatedProduct(m.scaled, B, T - 1) for m in mats]
        later = u[:, 1:] if per_position else u[:, 1:] + mats[-1].shift  # shared column shifts, once
        inside = torch.arange(T, device=u.device) < lengths.unsqueeze(-1)  # B x T
        bridge = Bridge.of(mats[0].shift, log_weights, u) if mats is not None and len(mats) > 1 else None
        x, n = normalized(u[:, 0])
        xs, ns, saved = [x], [n], []
        inside, later = inside.unbind(1), later.unbind(1)  # views, not a slice a step
        weights = log_weights.unbind(1) if log_weights is not None else None
        for t in range(1, T):
            live = inside[t]
            if per_position:
                mats = [Matrix.from_log(left[:, t - 1])]
            y, first = _product(x, mats[0], live, shifted=True, folded=not per_position, product=products[0])
            first.matrix = mats[0] if per_position else None
            step = [first]
            if len(mats) > 1 and first.index is None:  # the common case: no log/exp between the products
                y, second = _bridged_product(first.h, bridge, t - 1, mats[1], live, products[1])
                step.append(second)
            elif len(mats) > 1:
                y = y + bridge.log[:, t - 1]
                y, second = _product(y, mats[1], live, shifted=False, folded=True, product=products[1])
                step.append(second)
            elif weights is not None:
                y = y + weights[t - 1]
            x, n = normalized(y + later[t - 1])
            xs.append(x)
            ns.append(n)
            saved.append(step)
        alphas = torch.stack(xs, 1)
        end_weights = log_end(chain)
        log_z = total(*stacked_ends(alphas, torch.stack(ns, 1), lengths), end_weights)
        ctx.chain, ctx.mats, ctx.saved, ctx.log_end = chain, mats, saved, end_weights
        ctx.save_for_backward(alphas, lengths, u, left, right, log_weights, final)
        return log_z

    @staticmethod
    @in_full_precision  # a backward called under autocast or TF32 (the forward ran in full float32)
    def backward(ctx, grad):
        alphas, lengths, *operands = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True
            chain = ScaledChain(*operands, left_is_log=ctx.chain.left_is_log)
            return (*differentiated_again(ctx, grad, chain, lengths), None, None)
        chain, mats, saved = ctx.chain, ctx.mats, ctx.saved
        B, T, K = alphas.shape
        rows = torch.arange(B, device=alphas.device)
        last = alphas[rows, lengths - 1] + (0 if ctx.log_end is None else ctx.log_end)
        end = (last - last.logsumexp(-1, keepdim=True)).exp() * grad.unsqueeze(-1)  # B x K
        g = alphas.new_zeros(B, K)
        grad_u = [None] * T  # B x K each, stacked at the end (not a copy into B x T x K a step)
        per_position = chain.left.dim() == 4
        per_matrix = [([], [], []) for _ in saved[0]] if saved else []  # exp(inputs), d/dh, repairs
        transposed = None if per_position else [RepeatedProduct(m.scaled.T, B, T - 1) for m in mats]
        grad_left = torch.zeros_like(chain.left) if per_position and ctx.needs_input_grad[1] else None
        grad_lw = [None] * (T - 1) if chain.log_weights is not None else None
        last_positions = set((lengths - 1).tolist())
        for t in range(T - 1, 0, -1):
            if t in last_positions:
                g = torch.where((lengths - 1 == t).unsqueeze(-1), end, g)
            if restores_mass(t, T):
                g = restore_mass(g, g.sum(-1), torch.where(lengths > t, grad, 0.0))
            grad_u[t] = g
            for p in range(len(per_matrix) - 1, -1, -1):
                if p == 0 and grad_lw is not None:  # the weights are added to the first product's output
                    grad_lw[t - 1] = g
                s = saved[t - 1][p]
                vs, ghs, repairs = per_matrix[p]
                if s.matrix is not None:  # per position: this step's gradient now
                    step_repairs = []
                    g, g_h = _product_backward(g, s, s.matrix, step_repairs)
                    if grad_left is not None:
                        grad_left[:, t - 1] = _per_position_grad(s, s.matrix, g_h, step_repairs)
                    continue
                g, g_h = _product_backward(g, s, mats[p], repairs, transposed[p])
                vs.append(s.v)
                ghs.append(g_h)
        grad_u[0] = torch.where((lengths == 1).unsqueeze(-1), end, g)
        grad_u = torch.stack(grad_u, 1)
        if grad_lw is not None:
            grad_lw = torch.stack(grad_lw, 1) if grad_lw else torch.zeros_like(chain.log_weights)
        raws = [chain.left, chain.right.T if chain.right is not None else None]
        grads = [grad_left, None]
        for p, (vs, ghs, repairs) in enumerate(per_matrix):
            if ctx.needs_input_grad[1 + p] and not per_position:
                grads[p] = (
                    _matrix_grad(raws[p], mats[p], p == 0 and chain.left_is_log, vs, ghs, repairs)
                    if vs else torch.zeros_like(raws[p])
                )
        for p in (0, 1):  # T = 1: no step
            if ctx.needs_input_grad[1 + p] and grads[p] is None and raws[p] is not None:
                grads[p] = torch.zeros_like(raws[p])
        grad_right = grads[1].T if grads[1] is not None else None
        grad_final = None
        if chain.final is not None and ctx.needs_input_grad[4]:  # d/df_j lse(x + log f): softmax / f_j
            scores = alphas[rows, lengths - 1] + ctx.log_end
            w = _repair_weights(scores, scores.logsumexp(-1), grad)
            grad_final = torch.where(chain.final > 0, w / chain.final, 0.0).sum(0)
        return grad_u, grads[0], grad_right, grad_lw, grad_final, None, None


def differentiated_again(ctx, grad: Tensor, chain: ScaledChain, lengths: Tensor) -> tuple:
    """The backward of a hand-written log Z whose gradient is differentiated again (autograd runs a
    backward with gradients on only for ``create_graph=True``): the gradients of the chain's operands
    (u, left, right, log_weights, final; None for the absent ones and where ``ctx`` needs none) by
    autograd of ``forward`` on the same operands, the saved inputs, so that they carry their graph.
    The hand-written backwards keep no graph: their gradient would silently be a constant. ``forward``
    runs on an alias of each operand (a view: a node of its own), so that each gradient counts the paths
    inside this forward only: where one operand is made from another (the normalized low-rank
    ``left`` from ``right``), a gradient with respect to the operand itself also ran through the
    other's history, counted again by the caller's backward (a silently wrong first derivative)."""
    operands = tuple(None if x is None else x.view_as(x) for x in
                     (chain.u, chain.left, chain.right, chain.log_weights, chain.final))  # fmt: skip
    wanted = [i for i, x in enumerate(operands) if x is not None and ctx.needs_input_grad[i]]
    chain = ScaledChain(*operands, left_is_log=chain.left_is_log)
    log_z = forward(chain, lengths, second_order=True)[0]
    found = torch.autograd.grad(
        log_z, [operands[i] for i in wanted], grad, create_graph=True, allow_unused=True
    )
    grads = [None] * len(operands)
    for i, g in zip(wanted, found):
        grads[i] = torch.zeros_like(operands[i]) if g is None else g
    return tuple(grads)


def log_partition(chain: ScaledChain, lengths: Tensor) -> Tensor:
    """log Z (B,) with the hand-written backward (twice differentiable by ``differentiated_again``);
    where no gradient is needed and the matrices are shared, ``block_scaled``'s forward, which keeps
    nothing for a backward."""
    from zoo.inference.chain import block_scaled  # it builds on this module

    operands = (chain.u, chain.left, chain.right, chain.log_weights, chain.final, chain.init)
    if chain.left.dim() == 2 and not needs_grad(*operands):
        return block_scaled.log_partition(chain, lengths)
    chain = chain.folded()
    if chain.left.dim() == 2 and chain.left_is_log and chain.right is None and chain.log_weights is None \
            and chain.final is None:
        log_z = block_scaled.differentiable_log_partition(chain, lengths)
        if log_z is not None:
            return log_z
    return _ScaledForward.apply(
        chain.u, chain.left, chain.right, chain.log_weights, chain.final, lengths, chain.left_is_log
    )

