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
  T rank-B updates (what autograd would do), which is memory-bound. Once differentiable.
* ``forward``: plain autograd (twice differentiable), also returning the log forward variables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.inference.logmatmul import (
    NEG,
    Matrix,
    detached_max,
    log_matmul,
    logsumexp,
    repair_index,
    safe_log,
)


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
    """

    u: Tensor
    left: Tensor
    right: Tensor | None = None
    log_weights: Tensor | None = None
    final: Tensor | None = None
    left_is_log: bool = False

    def matrices(self) -> list[Matrix]:
        """The step's products in order: left, then right^T."""
        left = Matrix.from_log(self.left) if self.left_is_log else Matrix.from_prob(self.left)
        return [left] if self.right is None else [left, Matrix.from_prob(self.right.T)]


def check_alive(shift: Tensor, live: Tensor) -> None:
    """Raise where a live sequence has no surviving path (its shift, or log Z, is -inf or NEG)."""
    if bool(((shift <= NEG / 2) & live).any()):
        raise ValueError("the chain has zero probability (no path survives a -inf mask)")


def normalized(y: Tensor) -> tuple[Tensor, Tensor]:
    """(y - n, n) with n the detached max of each row, NEG for a dead row (which stays -inf, not
    NaN; ``total`` raises if that row is inside its length)."""
    n = y.detach().amax(-1).clamp_min(NEG)
    return y - n.unsqueeze(-1), n


def _log_end(chain: ScaledChain) -> Tensor | None:
    return None if chain.final is None else safe_log(chain.final)


def total(alphas: Tensor, shifts: Tensor, lengths: Tensor, log_final: Tensor | None) -> Tensor:
    """log Z (B,) = the shifts inside each length + lse_j(alpha_L(j) + log final_j)."""
    B, T, _ = alphas.shape
    valid = torch.arange(T, device=alphas.device) < lengths.unsqueeze(-1)
    last = alphas[torch.arange(B, device=alphas.device), lengths - 1]
    if log_final is not None:
        last = last + log_final
    end = last.logsumexp(-1)
    check_alive(torch.where(valid, shifts, 0).amin(-1).minimum(end.detach()), torch.ones_like(valid[:, 0]))
    return torch.where(valid, shifts, 0).sum(-1) + end


def forward(chain: ScaledChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """log Z (B,) and the log forward variables (B x T x K, each position shifted so its max is 0;
    junk past each length), plain autograd. ``left`` may also be per position: B x (T-1) x K x M."""
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
        live = lengths > t
        if per_position:
            mats = [Matrix.from_log(blocks[t - 1]) if chain.left_is_log else Matrix.from_prob(blocks[t - 1])]
        y = log_matmul(x, mats[0], live)
        if weights is not None:
            y = y + weights[t - 1]
        if len(mats) > 1:
            y = log_matmul(y, mats[1], live)
        x, n = normalized(y + u[t])
        xs.append(x)
        ns.append(n)
    alphas = torch.stack(xs, 1)
    return total(alphas, torch.stack(ns, 1), lengths, _log_end(chain)), alphas


@dataclass
class _Saved:
    """One product of one step, as the backward needs it: exp(x - max x) (B x K), the product h
    (B x M), and the repaired entries: indices, their rows of x (n x K) and exact values (n,)."""

    v: Tensor
    h: Tensor
    index: tuple[Tensor, ...] | None = None
    rows: Tensor | None = None
    exact: Tensor | None = None


def _product(x: Tensor, mat: Matrix, live: Tensor, shifted: bool, folded: bool) -> tuple[Tensor, _Saved]:
    """The guarded product without autograd, keeping what its backward needs. ``shifted``: x's max
    is already 0 (a normalized forward vector); ``folded``: the caller adds the matrix's column
    shifts itself (folded into the next log-factors), so the repaired entries leave them out."""
    tiny = torch.finfo(x.dtype).tiny
    if shifted:
        v = x.exp()
        h = v @ mat.scaled
        out = h.clamp_min(tiny).log()  # h below tiny is always repaired
    else:
        m = detached_max(x)
        v = (x - m).exp()
        h = v @ mat.scaled
        out = h.clamp_min(tiny).log() + m
    if not folded:
        out = out + mat.shift
    saved = _Saved(v, h)
    index = repair_index(h, mat.rows, live)
    if index is not None:
        col = index[-1]
        saved.index, saved.rows = index, x[index[:-1]]
        saved.exact = logsumexp(saved.rows + mat.log[:, col].T)
        out = out.index_put(index, saved.exact - mat.shift[col] if folded else saved.exact)
    return out, saved


def _product_backward(g_out: Tensor, s: _Saved, mat: Matrix, repairs: list) -> tuple[Tensor, Tensor]:
    """(d/dx, d/dh) of one product given d/dout; each repaired entry's (column, x row, exact value,
    d/dout) goes to ``repairs`` for the matrix gradient."""
    g = g_out if s.index is None else g_out.index_put(s.index, g_out.new_zeros(()))
    g_h = g / s.h.clamp_min(torch.finfo(s.h.dtype).tiny)  # 0 where repaired or junk
    g_x = (g_h @ mat.scaled.T) * s.v
    if s.index is not None:
        lead, col = s.index[:-1], s.index[-1]
        g_sel = g_out[s.index]
        w = _repair_weights(s.rows + mat.log[:, col].T, s.exact, g_sel)  # softmax over the K inputs
        g_x = g_x.index_put(lead, w, accumulate=True)
        repairs.append((col, s.rows, s.exact, g_sel))
    return g_x, g_h


def _repair_weights(scores: Tensor, exact: Tensor, g: Tensor) -> Tensor:
    """g * exp(scores - exact), n x K, with 0 for an entry whose exact value is -inf."""
    w = (scores - exact.unsqueeze(-1)).exp()
    return torch.where(torch.isneginf(exact).unsqueeze(-1), 0.0, w) * g.unsqueeze(-1)


def _matrix_grad(raw: Tensor, mat: Matrix, is_log: bool, vs: list, ghs: list, repairs: list) -> Tensor:
    """The gradient w.r.t. the caller's K x M matrix (log-potentials or non-negative) from all steps:
    one (T B) x K by (T B) x M product, plus the repaired entries' exact gradients."""
    grad = torch.cat(vs).T @ torch.cat(ghs)  # d/d scaled
    if is_log:  # scaled = exp(log M - c)
        grad = grad * mat.scaled
        for col, rows, exact, g in repairs:
            grad = grad.index_add(1, col, _repair_weights(rows + raw[:, col].T, exact, g).T)
        return grad
    top = raw.amax(-2, keepdim=True)  # scaled = M / top
    grad = grad / torch.where(top > 0, top, torch.ones_like(top))
    for col, rows, exact, g in repairs:  # d exact / d M[i, j] = exp(x_i - exact)
        grad = grad.index_add(1, col, _repair_weights(rows, exact, g).T)
    return grad


class _ScaledForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, left, right, log_weights, final, lengths, left_is_log):
        chain = ScaledChain(u, left, right, log_weights, final, left_is_log)
        mats = chain.matrices()
        T = u.shape[1]
        later = u[:, 1:] + mats[-1].shift  # the last product's column shifts, added once
        x, n = normalized(u[:, 0])
        xs, ns, saved = [x], [n], []
        for t in range(1, T):
            live = lengths > t
            y, first = _product(x, mats[0], live, shifted=True, folded=len(mats) == 1)
            step = [first]
            if log_weights is not None:
                y = y + log_weights[:, t - 1]
            if len(mats) > 1:
                y, second = _product(y, mats[1], live, shifted=False, folded=True)
                step.append(second)
            x, n = normalized(y + later[:, t - 1])
            xs.append(x)
            ns.append(n)
            saved.append(step)
        alphas = torch.stack(xs, 1)
        log_end = _log_end(chain)
        log_z = total(alphas, torch.stack(ns, 1), lengths, log_end)
        ctx.chain, ctx.mats, ctx.saved, ctx.log_end = chain, mats, saved, log_end
        ctx.save_for_backward(alphas, lengths)
        return log_z

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        alphas, lengths = ctx.saved_tensors
        chain, mats, saved = ctx.chain, ctx.mats, ctx.saved
        B, T, K = alphas.shape
        rows = torch.arange(B, device=alphas.device)
        last = alphas[rows, lengths - 1] + (0 if ctx.log_end is None else ctx.log_end)
        end = (last - last.logsumexp(-1, keepdim=True)).exp() * grad.unsqueeze(-1)  # B x K
        grad_u = torch.zeros_like(alphas)
        g = alphas.new_zeros(B, K)
        per_matrix = [([], [], []) for _ in mats]  # exp(inputs), d/dh, repairs
        grad_lw = torch.zeros_like(chain.log_weights) if chain.log_weights is not None else None
        for t in range(T - 1, 0, -1):
            g = torch.where((lengths - 1 == t).unsqueeze(-1), end, g)
            grad_u[:, t] = g
            for p in range(len(mats) - 1, -1, -1):
                if p == 0 and grad_lw is not None:  # the weights are added to the first product's output
                    grad_lw[:, t - 1] = g
                s = saved[t - 1][p]
                vs, ghs, repairs = per_matrix[p]
                g, g_h = _product_backward(g, s, mats[p], repairs)
                vs.append(s.v)
                ghs.append(g_h)
        grad_u[:, 0] = torch.where((lengths == 1).unsqueeze(-1), end, g)
        raws = [chain.left, chain.right.T if chain.right is not None else None]
        grads = [None, None]
        for p, (vs, ghs, repairs) in enumerate(per_matrix):
            if ctx.needs_input_grad[1 + p]:
                grads[p] = (
                    _matrix_grad(raws[p], mats[p], p == 0 and chain.left_is_log, vs, ghs, repairs)
                    if vs else torch.zeros_like(raws[p])
                )
        grad_right = grads[1].T if grads[1] is not None else None
        grad_final = None
        if chain.final is not None and ctx.needs_input_grad[4]:  # d/df_j lse(x + log f) = exp(x_j - lse)
            x_end = alphas[rows, lengths - 1]
            grad_final = (_repair_weights(x_end, (x_end + ctx.log_end).logsumexp(-1), grad)).sum(0)
        return grad_u, grads[0], grad_right, grad_lw, grad_final, None, None


def log_partition(chain: ScaledChain, lengths: Tensor) -> Tensor:
    """log Z (B,) with the hand-written backward (once differentiable)."""
    return _ScaledForward.apply(
        chain.u, chain.left, chain.right, chain.log_weights, chain.final, lengths, chain.left_is_log
    )
