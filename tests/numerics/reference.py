"""Plain log-space dynamic programs: the accuracy yardstick of the float32 / bfloat16 tests.

Written from the scoring definitions of docs/chain-api.md, docs/semimarkov-api.md and
docs/tree-api.md alone (nothing here calls zoo's engines). Every recursion is the textbook one,
one ``torch.logsumexp`` a step, in the dtype of its inputs: running it in float32 and in float64
on the same inputs measures the error that a plain float32 log-space DP makes on those inputs.
The engine, run in float32, must stay within twice that error of itself run in float64
(``assert_float32_close``).

Marginals are autograd of log Z (with a zero "probe" added where a marginal is wanted); the only
departure from plain autograd is the backward of logsumexp, which defines the 0/0 of an all -inf
row as 0 (torch's gives NaN there even when the incoming gradient is 0).
"""

from __future__ import annotations

import functools
import math

import torch

NEG_INF = float("-inf")


def fail(msg: str):
    """A test failure as an AssertionError (hypothesis then reports the falsifying example)."""
    raise AssertionError(msg)


# --------------------------------------------------------------------------- building blocks
class _SafeLogSumExp(torch.autograd.Function):
    """torch.logsumexp whose backward gives 0 (not NaN) where the result is -inf."""

    @staticmethod
    def forward(ctx, x, dims):
        out = torch.logsumexp(x, dims, keepdim=True)
        ctx.save_for_backward(x, out)
        for d in sorted(dims, reverse=True):
            out = out.squeeze(d)
        ctx.dims = dims
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        for d in sorted(ctx.dims):
            grad = grad.unsqueeze(d)
        w = torch.exp(x - out)
        w = torch.where(torch.isneginf(out).expand_as(w), torch.zeros_like(w), w)
        return grad * w, None


def lse(x: torch.Tensor, dims) -> torch.Tensor:
    """logsumexp over ``dims`` (an int or a tuple of ints)."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return _SafeLogSumExp.apply(x, tuple(d % x.dim() for d in dims))


def _lengths(lengths, B, T, device=None):
    if lengths is None:
        return torch.full((B,), T, dtype=torch.long, device=device)
    return torch.as_tensor(lengths, dtype=torch.long, device=device)


def expected_score(params, grads) -> torch.Tensor:
    """sum over parameters of (d log Z / d theta) * theta per batch element, skipping 0 * -inf.

    ``params`` and ``grads`` are lists of tensors with a leading batch axis.
    """
    total = 0
    for p, g in zip(params, grads):
        term = torch.where(g == 0, torch.zeros_like(g), g * p)
        total = total + term.reshape(term.shape[0], -1).sum(-1)
    return total


# =========================================================================== linear chains
def chain_forward(unary, transition, init=None, lengths=None):
    """log Z (B,) of a dense chain: alpha_t(j) = lse_i(alpha_{t-1}(i) + logPsi_t(i, j)) + unary_t(j).

    unary B x T x N; transition N x N, B x N x N (shared over positions) or B x (T-1) x N x N;
    init None, N or B x N. Inputs are unbound once (a per-step select would cost O(T^2) in backward).
    """
    B, T, N = unary.shape
    lengths = _lengths(lengths, B, T, unary.device)
    if init is None:
        init = torch.zeros(N, dtype=unary.dtype, device=unary.device)
    us = unary.unbind(1)
    per_pos = transition.dim() == 4
    trs = transition.unbind(1) if per_pos else None
    alpha = init.expand(B, N) + us[0]
    alphas = [alpha]
    for t in range(1, T):
        psi = trs[t - 1] if per_pos else transition
        alpha = lse(alpha.unsqueeze(-1) + psi, 1) + us[t]
        alphas.append(alpha)
    last = torch.stack(alphas, 1)[torch.arange(B), lengths - 1]
    return lse(last, 1)


def chain_entropy(unary, transition, init=None, lengths=None):
    """Entropy (B,) by the forward entropy recursion in log space (no log Z - E[score] cancellation):
    H_t(j) = sum_i w_t(i | j) (H_{t-1}(i) - log w_t(i | j)),
    w_t(. | j) = softmax_i(alpha_{t-1}(i) + logPsi_t(i, j))."""
    B, T, N = unary.shape
    lengths = _lengths(lengths, B, T)
    if init is None:
        init = torch.zeros(N, dtype=unary.dtype)
    with torch.no_grad():
        us = unary.unbind(1)
        per_pos = transition.dim() == 4
        trs = transition.unbind(1) if per_pos else None
        alpha = init.expand(B, N) + us[0]
        H = torch.zeros(B, N, dtype=unary.dtype)
        alphas, Hs = [alpha], [H]
        for t in range(1, T):
            x = alpha.unsqueeze(-1) + (trs[t - 1] if per_pos else transition)  # B x N(i) x N(j)
            a = torch.logsumexp(x, 1, keepdim=True)
            H = _entropy_step(x, a, H.unsqueeze(-1), 1)
            alpha = a.squeeze(1) + us[t]
            alphas.append(alpha)
            Hs.append(H)
        idx = torch.arange(B), lengths - 1
        x = torch.stack(alphas, 1)[idx]
        a = torch.logsumexp(x, -1, keepdim=True)
        return _entropy_step(x, a, torch.stack(Hs, 1)[idx], -1)


def _entropy_step(x, a, H_prev, dims):
    """sum over ``dims`` of w (H_prev - log w), w = exp(x - a); 0 where w = 0 (x = -inf)."""
    logw = x - a
    w = torch.exp(logw)
    term = torch.where(w > 0, w * (H_prev - logw), torch.zeros_like(w))
    return term.sum(dims)


class ChainRef:
    """The plain DP's answers for one dense chain in one dtype (every tensor in that dtype), computed
    on first use: log_partition and marginals (autograd of log Z w.r.t. the unary) by one forward
    and backward; pairwise_marginals (w.r.t. the per-position transition; needs pairwise=True);
    entropy (the forward entropy recursion); max_score (max-plus); score(states).
    """

    def __init__(self, unary, transition, init=None, lengths=None, pairwise=False):
        B, T, N = unary.shape
        self.dtype = unary.dtype
        self.lengths = _lengths(lengths, B, T)
        self.pairwise = pairwise
        init_b = (torch.zeros(N, dtype=unary.dtype) if init is None else init).expand(B, N).contiguous()
        self.unary, self.transition, self.init = unary, transition, init_b

    @functools.cached_property
    def _forward_backward(self):
        unary, transition = self.unary, self.transition
        B, T, N = unary.shape
        u = unary.detach().clone().requires_grad_(True)
        if transition.dim() == 2 and not self.pairwise:
            tr = transition.detach().clone().requires_grad_(True)
        else:
            full = transition if transition.dim() == 4 else transition.expand(B, max(T - 1, 0), N, N)
            tr = full.detach().clone().requires_grad_(True)
        logz = chain_forward(u, tr, self.init, self.lengths)
        g_u, g_tr = torch.autograd.grad(logz.sum(), [u, tr])
        return logz.detach(), g_u, (g_tr if self.pairwise else None)

    @property
    def log_partition(self):
        return self._forward_backward[0]

    @property
    def marginals(self):
        return self._forward_backward[1]

    @property
    def pairwise_marginals(self):
        assert self.pairwise, "ChainRef(..., pairwise=True) computes pairwise marginals"
        return self._forward_backward[2]

    @functools.cached_property
    def entropy(self):
        return chain_entropy(self.unary, self.transition, self.init, self.lengths)

    @functools.cached_property
    def max_score(self):
        return chain_viterbi(self.unary, self.transition, self.init, self.lengths)

    def score(self, states):
        return chain_score(self.unary, self.transition, self.init, self.lengths, states)


def chain_viterbi(unary, transition, init, lengths):
    """max_score (B,) by max-plus, one amax a step."""
    B, T, N = unary.shape
    lengths = _lengths(lengths, B, T)
    if init is None:
        init = torch.zeros(N, dtype=unary.dtype)
    with torch.no_grad():
        alpha = init.expand(B, N) + unary[:, 0]
        alphas = [alpha]
        for t in range(1, T):
            psi = transition if transition.dim() == 2 else transition[:, t - 1]
            alpha = (alpha.unsqueeze(-1) + psi).amax(1) + unary[:, t]
            alphas.append(alpha)
        last = torch.stack(alphas, 1)[torch.arange(B), lengths - 1]
        return last.amax(-1)


def chain_score(unary, transition, init, lengths, states):
    """score(z) of state sequences (B x T or S x B x T long; entries past the length ignored)."""
    squeeze = states.dim() == 2
    if squeeze:
        states = states.unsqueeze(0)
    S, B, T = states.shape
    N = unary.shape[-1]
    lengths = _lengths(lengths, B, T)
    if init is None:
        init = torch.zeros(N, dtype=unary.dtype)
    valid = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)  # B x T
    z = states.clamp(min=0)
    init_b = init.expand(B, N)
    out = init_b.unsqueeze(0).expand(S, B, N).gather(-1, z[..., :1]).squeeze(-1)
    un = unary.unsqueeze(0).expand(S, B, T, N).gather(-1, z.unsqueeze(-1)).squeeze(-1)
    out = out + torch.where(valid, un, torch.zeros_like(un)).sum(-1)
    if T > 1:
        if transition.dim() == 2:
            tr = transition[z[..., :-1], z[..., 1:]]  # S x B x (T-1)
        else:
            bidx = torch.arange(B).view(1, B, 1)
            tidx = torch.arange(T - 1).view(1, 1, T - 1)
            tr = transition[bidx, tidx, z[..., :-1], z[..., 1:]]
        out = out + torch.where(valid[:, 1:], tr, torch.zeros_like(tr)).sum(-1)
    return out[0] if squeeze else out


def restricted_unary(unary, keep):
    """unary with -inf outside the kept states (keep: B x T x N bool)."""
    return unary.masked_fill(~keep, NEG_INF)


# =========================================================================== semi-Markov chains
class SMForm:
    """A semi-Markov model in one of the two scoring forms of docs/semimarkov-api.md.

    dense: unary B x T x N, transition N x N (or B x N x N), duration (B x) N x D, init (B x) N;
    edge: first B x D x N, edge B x (T-1) x D x N x N.
    """

    def __init__(self, kind, **tensors):
        self.kind = kind
        self.t = tensors

    @property
    def dtype(self):
        return next(iter(self.t.values())).dtype

    def to(self, dtype):
        return SMForm(self.kind, **{k: v.to(dtype) for k, v in self.t.items()})

    @property
    def shape(self):
        if self.kind == "dense":
            B, T, N = self.t["unary"].shape
            return B, T, N, self.t["duration"].shape[-1]
        B, D, N = self.t["first"].shape
        return B, self.t["edge"].shape[1] + 1, N, D


def dense_sm_form(unary, transition, duration, init=None):
    B, T, N = unary.shape
    D = duration.shape[-1]
    init = torch.zeros(N, dtype=unary.dtype) if init is None else init
    return SMForm(
        "dense",
        unary=unary,
        transition=transition.expand(B, N, N).contiguous(),
        duration=duration.expand(B, N, D).contiguous(),
        init=init.expand(B, N).contiguous(),
    )


def sm_end_scores(form: SMForm, probe_end=None):
    """B x T x D x (N+1) x N: seg(s, d, i, j) of the segment that ends at frame e (0-based, index 1)
    with duration d (index 2, d - 1), i.e. s = e - d + 1; -inf where s < 0. Row N of axis 3 is the
    virtual previous state z_0 (only for s = 0). probe_end (B x T x D x N) is added to seg(., ., ., j).

    Dense form: segment emissions are running sums backwards from frame e (a plain sum in the dtype).
    """
    B, T, N, D = form.shape
    e = torch.arange(T).view(T, 1)
    d = torch.arange(1, D + 1).view(1, D)
    s = e - d + 1  # T x D
    if form.kind == "dense":
        unary = form.t["unary"]
        padded = torch.cat([unary.new_zeros(B, D - 1, N), unary], 1)  # B x (T+D-1) x N
        win = padded.unfold(1, D, 1)  # B x T x N x D: frames e-D+1 .. e
        emis = win.flip(-1).cumsum(-1).transpose(-1, -2)  # B x T x D x N: [e, d-1] = sum of frames e-d+1..e
        seg = emis + form.t["duration"].transpose(1, 2).unsqueeze(1)  # + dur[b, j, d-1]
        if probe_end is not None:
            seg = seg + probe_end
        tr_ext = torch.cat([form.t["transition"], form.t["init"].unsqueeze(1)], 1)  # B x (N+1) x N
        out = seg.unsqueeze(3) + tr_ext.view(B, 1, 1, N + 1, N)
        # the virtual row only for s == 0, the state rows only for s >= 1
        virt = (s == 0).view(1, T, D, 1, 1)
        rows = torch.arange(N + 1).view(1, 1, 1, N + 1, 1) == N
        ok = torch.where(rows, virt, (s >= 1).view(1, T, D, 1, 1))
        return out.masked_fill(~ok, NEG_INF)
    first, edge = form.t["first"], form.t["edge"]
    sc = s.clamp(min=1) - 1
    body = edge[:, sc, (d - 1).expand(T, D)]  # B x T x D x N x N
    body = body.masked_fill(~(s >= 1).view(1, T, D, 1, 1), NEG_INF)
    virt = first.unsqueeze(1).expand(B, T, D, N).masked_fill(~(s == 0).view(1, T, D, 1), NEG_INF)
    out = torch.cat([body, virt.unsqueeze(3)], 3)
    if probe_end is not None:
        out = out + probe_end.unsqueeze(3)
    return out


def _sm_recursion(form: SMForm, lengths, probe_end=None, keep=None, mode="log"):
    """The forward over segment ends; mode "log" (log Z), "max" (max score) or "entropy".

    beta[t](j): log-mass of the segmentations of frames 0..t-1 whose last segment has state j,
    beta[t] = lse over (d, i) of beta[t - d](i) + seg(t - d, d, i, j); one logsumexp a frame.
    keep: B x T x N bool or None: the randomized top-K restriction -- a segment ending at frame e
    passes mass on (to a later segment) only from a kept state of row e.
    """
    B, T, N, D = form.shape
    dt = form.dtype
    scores = sm_end_scores(form, probe_end).unbind(1)
    neg = torch.full((B, 1), NEG_INF, dtype=dt)
    start = torch.cat([torch.full((B, N), NEG_INF, dtype=dt), torch.zeros(B, 1, dtype=dt)], 1)
    beta = [start]  # beta[t] over N + 1 states (the extra one is z_0 at t = 0)
    prev_beta = [start]  # as used by a following segment (masked by keep)
    Hs = [torch.zeros(B, N + 1, dtype=dt)]
    zero = torch.zeros(B, 1, dtype=dt)
    for t in range(1, T + 1):
        Dw = min(D, t)
        prev = torch.stack([prev_beta[t - d] for d in range(1, Dw + 1)], 1)  # B x Dw x (N+1)
        x = prev.unsqueeze(-1) + scores[t - 1][:, :Dw]  # B x Dw x (N+1) x N
        if mode == "log":
            b_t = lse(x, (1, 2))
        elif mode == "max":
            b_t = x.amax((1, 2))
        else:
            a = torch.logsumexp(x, (1, 2), keepdim=True)
            Hp = torch.stack([Hs[t - d] for d in range(1, Dw + 1)], 1).unsqueeze(-1)
            Hs.append(torch.cat([_entropy_step(x, a, Hp, (1, 2)), zero], 1))
            b_t = a.view(B, N)
        full = torch.cat([b_t, neg], 1)
        beta.append(full)
        if keep is not None and t < T:
            k = torch.cat([keep[:, t - 1], torch.ones(B, 1, dtype=torch.bool)], 1)
            full = full.masked_fill(~k, NEG_INF)
        prev_beta.append(full)
    idx = torch.arange(B), lengths
    ends = torch.stack(beta, 1)[idx][:, :N]
    if mode == "log":
        return lse(ends, 1)
    if mode == "max":
        return ends.amax(-1)
    a = torch.logsumexp(ends, -1, keepdim=True)
    return _entropy_step(ends, a, torch.stack(Hs, 1)[idx][:, :N], -1)


def sm_forward(form: SMForm, lengths=None, probe_end=None, keep=None):
    """log Z (B,); probe_end: B x T x D x N (by end frame) for segment marginals."""
    B, T, N, D = form.shape
    return _sm_recursion(form, _lengths(lengths, B, T), probe_end, keep, "log")


def sm_viterbi(form: SMForm, lengths=None, keep=None):
    B, T, N, D = form.shape
    with torch.no_grad():
        return _sm_recursion(form, _lengths(lengths, B, T), None, keep, "max")


def sm_entropy(form: SMForm, lengths=None, keep=None):
    B, T, N, D = form.shape
    with torch.no_grad():
        return _sm_recursion(form, _lengths(lengths, B, T), None, keep, "entropy")


def end_to_start(by_end: torch.Tensor) -> torch.Tensor:
    """B x T x D x N indexed by end frame -> by start frame ([b, s, d-1] = [b, s + d - 1, d-1])."""
    B, T, D, N = by_end.shape
    out = torch.zeros_like(by_end)
    for d in range(1, D + 1):
        if d <= T:
            out[:, : T - d + 1, d - 1] = by_end[:, d - 1 :, d - 1]
    return out


def frames_from_segments(seg_marg: torch.Tensor) -> torch.Tensor:
    """B x T x N frame marginals from B x T x D x N segment marginals (by start; plain sums)."""
    B, T, D, N = seg_marg.shape
    out = torch.zeros(B, T, N, dtype=seg_marg.dtype)
    for d in range(1, D + 1):
        for o in range(d):
            out[:, o:] = out[:, o:] + seg_marg[:, : T - o, d - 1]
    return out


class SMRef:
    """The plain DP's answers for one semi-Markov model in one dtype, computed on first use.

    keep (B x T x N bool): the randomized top-K restriction (for the estimates of the
    randomized backend with k2 = 0).
    """

    def __init__(self, form: SMForm, lengths=None, keep=None):
        B, T, N, D = form.shape
        self.form = form
        self.keep = keep
        self.lengths = _lengths(lengths, B, T)

    @functools.cached_property
    def _forward_backward(self):
        B, T, N, D = self.form.shape
        probe = torch.zeros(B, T, D, N, dtype=self.form.dtype, requires_grad=True)
        logz = sm_forward(self.form, self.lengths, probe, self.keep)
        (g,) = torch.autograd.grad(logz.sum(), [probe])
        seg = end_to_start(g)
        return logz.detach(), seg, frames_from_segments(seg)

    @property
    def log_partition(self):
        return self._forward_backward[0]

    @property
    def segment_marginals(self):
        return self._forward_backward[1]

    @property
    def marginals(self):
        return self._forward_backward[2]

    @functools.cached_property
    def entropy(self):
        return sm_entropy(self.form, self.lengths, self.keep)

    @functools.cached_property
    def max_score(self):
        return sm_viterbi(self.form, self.lengths)

    def score(self, segmentation):
        return sm_score(self.form, self.lengths, segmentation)


def sm_score(form: SMForm, lengths, segmentation):
    """Score (B,) or (S, B) of segmentations in the tensor format (start state at each start)."""
    squeeze = segmentation.dim() == 2
    segs = segmentation.unsqueeze(0) if squeeze else segmentation
    S, B, T = segs.shape
    out = torch.zeros(S, B, dtype=form.dtype)
    D = form.shape[3]
    for a in range(S):
        for b in range(B):
            L = int(lengths[b])
            row = segs[a, b, :L].tolist()
            starts = [t for t in range(L) if row[t] >= 0] + [L]
            total = torch.zeros((), dtype=form.dtype)
            prev = None
            for s, e in zip(starts[:-1], starts[1:]):
                d, j = e - s, row[s]
                if d > D:
                    total = total + NEG_INF
                    break
                if form.kind == "dense":
                    tr = form.t["init"][b, j] if prev is None else form.t["transition"][b, prev, j]
                    total = total + tr + form.t["duration"][b, j, d - 1] + form.t["unary"][b, s:e, j].sum()
                else:
                    total = total + (
                        form.t["first"][b, d - 1, j]
                        if prev is None
                        else form.t["edge"][b, s - 1, d - 1, prev, j]
                    )
                prev = j
            out[a, b] = total
    return out[0] if squeeze else out


# =========================================================================== trees
def tree_inside(root, rules, terms, lengths=None, node_scores=None, mode="log"):
    """Inside pass of a CNF grammar, width by width, one logsumexp (over split, B, C) a span.

    root B x NT; rules B x NT x S x S (log); terms B x T x PT; node_scores None or B x T x (T+1) x NT.
    mode "log": log Z (B,); "max": the best tree's score; "entropy": the entropy of p(tree) by the
    inside entropy recursion H(i, k, A) = sum w (H(i, j, B) + H(j, k, C) - log w).
    """
    B, T, PT = terms.shape
    NT = root.shape[-1]
    S = NT + PT
    dt = terms.dtype
    lengths = _lengths(lengths, B, T)
    chart = {1: torch.cat([torch.full((B, T, NT), NEG_INF, dtype=dt), terms], -1)}  # B x T x S
    ent = {1: torch.zeros(B, T, S, dtype=dt)}
    rl = rules.reshape(B, 1, NT, 1, S, S)
    for w in range(2, T + 1):
        n = T - w + 1
        lefts = torch.stack([chart[l][:, 0:n] for l in range(1, w)], 2)  # B x n x (w-1) x S
        rights = torch.stack([chart[w - l][:, l : l + n] for l in range(1, w)], 2)
        pair = lefts.unsqueeze(-1) + rights.unsqueeze(-2)  # B x n x (w-1) x S x S
        x = pair.unsqueeze(2) + rl  # B x n x NT x (w-1) x S x S
        if mode == "log":
            val = lse(x, (3, 4, 5))
        elif mode == "max":
            val = x.amax((3, 4, 5))
        else:
            a = torch.logsumexp(x, (3, 4, 5), keepdim=True)
            hl = torch.stack([ent[l][:, 0:n] for l in range(1, w)], 2)
            hr = torch.stack([ent[w - l][:, l : l + n] for l in range(1, w)], 2)
            hp = (hl.unsqueeze(-1) + hr.unsqueeze(-2)).unsqueeze(2)
            h = _entropy_step(x, a, hp, (3, 4, 5))
            ent[w] = torch.cat([h, torch.zeros(B, n, PT, dtype=dt)], -1)
            val = a.view(B, n, NT)
        if node_scores is not None:
            i = torch.arange(n)
            val = val + node_scores[:, i, i + w]
        chart[w] = torch.cat([val, torch.full((B, n, PT), NEG_INF, dtype=dt)], -1)
    tops = torch.stack([chart[int(lengths[b])][b, 0, :NT] for b in range(B)], 0) + root
    if mode == "log":
        return lse(tops, 1)
    if mode == "max":
        return tops.amax(-1)
    a = torch.logsumexp(tops, -1, keepdim=True)
    h = torch.stack([ent[int(lengths[b])][b, 0, :NT] for b in range(B)], 0)
    return _entropy_step(tops, a, h, -1)


class TreeRef:
    """The plain DP's answers for one dense grammar in one dtype (grammar tensors batched), computed
    on first use: log Z and every marginal by one inside pass and its backward (w.r.t. the terms and
    a node probe); entropy by the inside entropy recursion; max_score by max-product."""

    def __init__(self, root, rules, terms, lengths=None, node_scores=None):
        B, T, PT = terms.shape
        self.lengths = _lengths(lengths, B, T)
        self.root, self.rules, self.terms, self.node_scores = root, rules, terms, node_scores

    @functools.cached_property
    def _inside_outside(self):
        B, T, PT = self.terms.shape
        NT = self.root.shape[-1]
        terms = self.terms.detach().clone().requires_grad_(True)
        probe = torch.zeros(B, T, T + 1, NT, dtype=terms.dtype, requires_grad=True)
        ns = probe if self.node_scores is None else self.node_scores + probe
        logz = tree_inside(self.root, self.rules, terms, self.lengths, ns)
        g_terms, g_probe = torch.autograd.grad(logz.sum(), [terms, probe])
        span = g_probe.sum(-1)
        for b in range(B):
            n = int(self.lengths[b])
            span[b, torch.arange(n), torch.arange(n) + 1] = 1.0
        return logz.detach(), g_probe, span, g_terms

    @property
    def log_partition(self):
        return self._inside_outside[0]

    @property
    def marginals(self):
        return self._inside_outside[1]

    @property
    def span_marginals(self):
        return self._inside_outside[2]

    @property
    def preterminal_marginals(self):
        return self._inside_outside[3]

    @functools.cached_property
    def entropy(self):
        with torch.no_grad():
            return tree_inside(
                self.root, self.rules, self.terms, self.lengths, self.node_scores, mode="entropy"
            )

    @functools.cached_property
    def max_score(self):
        with torch.no_grad():
            return tree_inside(self.root, self.rules, self.terms, self.lengths, self.node_scores, mode="max")

    def score(self, trees):
        return tree_score(self.root, self.rules, self.terms, self.node_scores, trees)


def tree_score(root, rules, terms, node_scores, trees):
    """score (B,) or (S, B) of trees in the B x (2T-1) x 3 pre-order format."""
    squeeze = trees.dim() == 3
    trees = trees.unsqueeze(0) if squeeze else trees
    S, B = trees.shape[:2]
    NT = root.shape[-1]
    out = torch.zeros(S, B, dtype=terms.dtype)
    for a in range(S):
        for b in range(B):
            rows = [tuple(r) for r in trees[a, b].tolist() if r[0] >= 0]
            lab = {(i, k): A for i, k, A in rows}
            total = torch.zeros((), dtype=terms.dtype)
            n = max(k for _, k, _ in rows)
            total = total + root[b, lab[(0, n)]]
            for i, k, A in rows:
                if k - i == 1:
                    total = total + terms[b, i, A]
                    continue
                j = next(j for j in range(i + 1, k) if (i, j) in lab and (j, k) in lab)
                lb, rb = lab[(i, j)], lab[(j, k)]
                ls = lb if j - i > 1 else NT + lb
                rs = rb if k - j > 1 else NT + rb
                total = total + rules[b, A, ls, rs]
                if node_scores is not None:
                    total = total + node_scores[b, i, k, A]
            out[a, b] = total
    return out[0] if squeeze else out


# =========================================================================== comparisons
EPS = {torch.float32: torch.finfo(torch.float32).eps, torch.bfloat16: torch.finfo(torch.bfloat16).eps}


def logz_floor(q64, dtype=torch.float32, k=8.0):
    """The absolute slack of a log-scale quantity: k eps (1 + |value|)."""
    return k * EPS[dtype] * (1 + q64.detach().double().abs())


def ref_error(r_low, r64):
    """|r_low - r64| elementwise; inf where the plain DP itself is not finite (it then sets no bound)."""
    e = (r_low.detach().double() - r64.detach().double()).abs()
    both_inf = torch.isinf(r_low.double()) & (r_low.double() == r64.double())
    e = torch.where(both_inf, torch.zeros_like(e), e)
    return torch.where(torch.isnan(e), torch.full_like(e, math.inf), e)


def _rowmax(err, reduce_dims):
    if not reduce_dims:
        return err
    for d in sorted(reduce_dims):
        err = err.amax(d, keepdim=True)
    return err


def assert_float32_close(name, q32, q64, ref_err, floor, reduce_dims=(), what="float32"):
    """|q32 - q64| <= 2 ref_err + floor everywhere, and q32 finite wherever q64 is finite.

    ref_err: |ref32 - ref64| of the plain log-space DP on the same inputs (broadcastable to q64);
    reduce_dims: axes over which the plain DP's error is maxed first (e.g. the state axis of a
    marginal: the plain DP's error at one entry being small by luck sets no bound);
    floor: absolute slack (a float or a tensor broadcastable to q64).
    """
    assert isinstance(q32, torch.Tensor), f"{name}: expected a tensor, got {type(q32)}"
    assert tuple(q32.shape) == tuple(q64.shape), f"{name}: shape {tuple(q32.shape)} != {tuple(q64.shape)}"
    a = q32.detach().double()
    b = q64.detach().double()
    fin = torch.isfinite(b)
    bad = fin & ~torch.isfinite(a)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        fail(
            f"{name}: {what} gives {a[idx].item()} at {idx} where float64 gives {b[idx].item()} "
            f"({int(bad.sum())} of {b.numel()} entries not finite)"
        )
    badinf = ~fin & (a != b)
    if badinf.any():
        idx = tuple(int(i) for i in badinf.nonzero()[0])
        fail(f"{name}: {what} gives {a[idx].item()} at {idx} where float64 gives {b[idx].item()}")
    err = torch.where(fin, (a - b).abs(), torch.zeros_like(a))
    re = _rowmax(torch.as_tensor(ref_err, dtype=torch.float64).expand_as(b).clone(), reduce_dims)
    budget = 2 * re + torch.as_tensor(floor, dtype=torch.float64)
    budget = budget.expand_as(b)
    over = err - budget
    if (over > 0).any():
        flat = int(
            torch.argmax(torch.where(fin, over / budget.clamp_min(1e-300), torch.full_like(over, -1.0)))
        )
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), b.shape))
        re_at = re.expand_as(b)[idx].item()
        fl_at = torch.as_tensor(floor, dtype=torch.float64).expand_as(b)[idx].item()
        fail(
            f"{name}: worst entry {idx}: {what} = {a[idx].item():.10g}, float64 = {b[idx].item():.10g}, "
            f"|diff| = {err[idx].item():.3g} > budget {budget[idx].item():.3g} "
            f"(2 x plain-DP error {re_at:.3g} + floor {fl_at:.3g}); "
            f"{int((over > 0).sum())} of {b.numel()} entries over budget, max |diff| {err.max().item():.3g}"
        )


def run_pair(name, fn64, fn_low, what="float32"):
    """(r64, r_low): float64 first; if it raises ValueError/TypeError, the low precision must too.

    Returns None when both raised. Any exception of the low-precision call where float64 succeeded
    is a test failure naming it.
    """
    try:
        r64 = fn64()
    except (ValueError, TypeError) as e:
        try:
            fn_low()
        except (ValueError, TypeError):
            return None
        fail(f"{name}: float64 raised {type(e).__name__} ({e}) but {what} did not")
    try:
        r_low = fn_low()
    except Exception as e:  # noqa: BLE001 -- any error here is the finding
        fail(f"{name}: {what} raised {type(e).__name__}: {str(e)[:300]} where float64 succeeded")
    return r64, r_low
