"""The no-grad forward (``block_scaled``): probability-space blocks, verified, with guarded fallback.

It must give the guarded forward's log Z (float64: to 1e-10; float32: against float64 within the
budget of the other float32 tests), take the fast path where nothing underflows, fall back only for
the blocks where something does, and raise the guarded forward's error on a dead chain.
"""

import math
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zoo.inference.chain.block_scaled as block_scaled
import zoo.inference.chain.scaled as scaled
from zoo.inference import DenseChain, LinearChain


@pytest.fixture
def count_blocks(monkeypatch):
    """Counts the blocks recomputed by the guarded steps (so a test knows which path ran)."""
    seen = {"guarded": 0}
    original = block_scaled._Forward._guarded

    def counting(self, a, b):
        seen["guarded"] += 1
        return original(self, a, b)

    monkeypatch.setattr(block_scaled._Forward, "_guarded", counting)
    return seen


def _chain(g, B, T, K, M, two, weights, final, spread, dtype=torch.float64, from_log=None):
    """A ScaledChain with Gaussian log-factors of standard deviation ``spread``."""
    u = torch.randn(B, T, K, generator=g, dtype=dtype) * spread
    if from_log is not None:  # one log-potential matrix (the exact HMM / CRF layout)
        return scaled.ScaledChain(u, from_log.to(dtype), left_is_log=True)
    left = torch.rand(K, M, generator=g, dtype=dtype)
    right = torch.rand(K, M, generator=g, dtype=dtype) if two else None
    log_w = torch.randn(B, T - 1, M, generator=g, dtype=dtype) if weights else None
    end = torch.rand(K, generator=g, dtype=dtype) if final else None
    return scaled.ScaledChain(u, left, right, log_w, end)


def _reference(chain, lengths):
    return scaled.forward(chain, lengths)[0]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    B=st.integers(1, 5),
    T=st.integers(1, 80),
    K=st.integers(1, 9),
    two=st.booleans(),
    weights=st.booleans(),
    final=st.booleans(),
    spread=st.sampled_from([0.1, 3.0, 40.0, 300.0]),
    small=st.booleans(),
    data=st.data(),
)
def test_matches_the_guarded_forward_float64(seed, B, T, K, two, weights, final, spread, small, data):
    """Ragged lengths at B > 1, one or two products, rank weights, end weights, spreads up to
    hundreds of nats (which send blocks to the guarded steps): the same log Z to 1e-10. Both ways
    of checking: a small chain's blocks at once, a large one's a block at a time (two slots)."""
    g = torch.Generator().manual_seed(seed)
    M = data.draw(st.integers(1, 9)) if two else K
    chain = _chain(g, B, T, K, M, two, weights, final, spread)
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    with mock.patch.object(block_scaled, "CACHED_FACTORS", 2**18 if small else 0):
        got = block_scaled.log_partition(chain, lengths)
    torch.testing.assert_close(got, _reference(chain, lengths), rtol=1e-10, atol=1e-10)


def _forbidden_switch(N: int, at: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A banded HMM (i -> i, i + 1) whose emissions make the best state at ``at`` hundreds of nats
    worse than the path that survives: a block there must fall back, the others need not."""
    trans = torch.full((N, N), -1e4)
    for i in range(N):
        trans[i, i] = -0.1
        trans[i, (i + 1) % N] = -2.5
    g = torch.Generator().manual_seed(3)
    unary = torch.randn(2, T, N, generator=g)
    unary[:, at, 1:] = 300.0  # unreachable from state 0 in one step but 300 nats ahead
    unary[:, at - 1, 1:] = -300.0
    return unary, trans


def test_fast_path_where_nothing_underflows(count_blocks):
    g = torch.Generator().manual_seed(0)
    trans = torch.randn(16, 16, generator=g).log_softmax(-1)
    chain = _chain(g, 4, 200, 16, 16, False, False, False, 2.0, torch.float32, from_log=trans)
    lengths = torch.tensor([200, 57, 1, 199])
    got = block_scaled.log_partition(chain, lengths)
    assert count_blocks["guarded"] == 0
    chain64 = scaled.ScaledChain(chain.u.double(), chain.left.double(), left_is_log=True)
    torch.testing.assert_close(got.double(), _reference(chain64, lengths), rtol=1e-6, atol=1e-4)


def _peaked_hmm(spread: float) -> tuple[torch.Tensor, ...]:
    """An HMM (N 64, B 16, T 100, ragged) with Gaussian emissions of standard deviation ``spread``:
    (unary, transition, init, lengths)."""
    g = torch.Generator().manual_seed(0)
    B, T, N = 16, 100, 64
    trans = torch.randn(N, N, generator=g).log_softmax(-1)
    init = torch.randn(N, generator=g).log_softmax(-1)
    unary = torch.randn(B, T, N, generator=g) * spread
    return unary, trans, init, torch.randint(1, T + 1, (B,), generator=g)


@pytest.mark.parametrize("spread", [3.0, 5.0, 10.0, 30.0, 100.0])
def test_peaked_emissions_stay_in_probability_space(count_blocks, spread):
    """Emissions far apart under a mixing transition shrink the forward's maximum by -log P(i -> j)
    (3 to 8 nats at spread 3, tens at 30) a step: each block starts from exact logs (what p lost to
    underflow is not scaled up by a tiny divisor), a forward that leaves the float range within a
    block goes on in shorter ones, none is sent to the guarded steps, and log Z stays
    float32-accurate."""
    unary, trans, init, lengths = _peaked_hmm(spread)
    with torch.no_grad():
        got = LinearChain(DenseChain(unary, trans, init), lengths=lengths).log_partition
    assert count_blocks["guarded"] == 0
    wide = DenseChain(unary.double(), trans.double(), init.double())
    want = LinearChain(wide, lengths=lengths).log_partition
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("spread", [3.0, 10.0, 30.0, 100.0])
def test_peaked_emissions_keep_the_probability_space_backward(spread):
    """With gradients too: each block starts from exact logs (p and F at a block's end remade from
    them, so the backward takes what the forward used), a forward that decays within a block goes
    on in shorter ones, and the block backward runs; its marginals and the transition's gradient
    agree with float64."""
    unary, trans, init, lengths = _peaked_hmm(spread)
    chain = scaled.ScaledChain(DenseChain(unary, trans, init).folded_unary(), trans, left_is_log=True)
    assert block_scaled.differentiable_log_partition(chain, lengths) is not None
    results = []
    for dtype in (torch.float32, torch.float64):
        u, transition = (x.detach().to(dtype).requires_grad_() for x in (unary, trans))
        log_z = LinearChain(DenseChain(u, transition, init.to(dtype)), lengths=lengths).log_partition
        results.append([x.double() for x in torch.autograd.grad(log_z.sum(), [u, transition])])
    (m32, t32), (m64, t64) = results  # d log Z / d unary: the marginals
    torch.testing.assert_close(m32, m64, rtol=0, atol=2e-5)
    torch.testing.assert_close(t32, t64, rtol=0, atol=2e-5)


def test_falls_back_only_around_the_block_that_underflows(count_blocks):
    T = 400
    unary, trans = _forbidden_switch(4, 200, T)
    init = torch.tensor([0.0, -math.inf, -math.inf, -math.inf])  # a fixed start state
    with torch.no_grad():
        got = LinearChain(DenseChain(unary, trans, init)).log_partition
    want = LinearChain(DenseChain(unary.double(), trans.double(), init.double())).log_partition
    # the first block (states the fixed start cannot reach yet), the block of the switch, and the
    # one after it (a failed attempt makes the next block go guarded directly), of 13
    assert count_blocks["guarded"] <= 4
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("T", [2, 50, 2000])
def test_issue_examples_float32(T):
    """A fixed start state and forbidden switching with emissions hundreds of nats apart (issue 17's
    smallest case, then longer): float32 without grad against float64."""
    g = torch.Generator().manual_seed(T)
    unary = torch.randn(3, T, 2, generator=g) * 150
    trans = torch.tensor([[0.0, -math.inf], [-math.inf, 0.0]])
    with torch.no_grad():
        got = LinearChain(DenseChain(unary, trans)).log_partition
    want = LinearChain(DenseChain(unary.double(), trans.double())).log_partition
    # a plain float32 log-space DP loses about eps |log Z| (T of them summed): allow 4x that
    torch.testing.assert_close(got.double(), want, rtol=0, atol=4e-7 * float(want.abs().max()) + 1e-4)


def test_large_feature_entries_shorten_the_blocks():
    """Non-negative matrices with entries far above 1 grow p fast: blocks get shorter, never overflow."""
    g = torch.Generator().manual_seed(1)
    u = torch.randn(2, 300, 8, generator=g, dtype=torch.float64)
    left = torch.rand(8, 8, generator=g, dtype=torch.float64) * 1e25  # 86 bits a step
    chain = scaled.ScaledChain(u, left)
    forward = block_scaled._Forward(chain, torch.tensor([300, 300]), *scaled.normalized(u[:, 0]))
    assert forward.size == 1
    lengths = torch.tensor([300, 123])
    torch.testing.assert_close(block_scaled.log_partition(chain, lengths), _reference(chain, lengths))
    got32 = block_scaled.log_partition(scaled.ScaledChain(u.float(), left.float()), lengths)
    torch.testing.assert_close(got32.double(), _reference(chain, lengths), rtol=1e-5, atol=0)


@pytest.mark.parametrize("K", [2, 64, 300])
def test_uniform_chain_grows_at_the_bound_without_overflow(K):
    """All-equal potentials are the worst case of the growth bound: every product multiplies the max
    by K (each column sums to K), so the blocks are as long as 120 bits allow, and exact."""
    T, lengths = 700, torch.tensor([700, 401, 1])
    u = torch.zeros(3, T, K)
    chain = scaled.ScaledChain(u, torch.zeros(K, K), left_is_log=True)
    forward = block_scaled._Forward(chain, lengths, *scaled.normalized(u[:, 0]))
    assert forward.size == min(block_scaled.MAX_BLOCK, int(block_scaled.GROWTH_BITS // math.log2(K)))
    with torch.no_grad():
        got = block_scaled.log_partition(chain, lengths)
    want = lengths.double() * math.log(K)
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-5)


def test_stochastic_transitions_get_full_blocks():
    """A row-stochastic transition's columns sum to far less than K times its largest entry: the
    blocks are as long as ``MAX_BLOCK`` (the bound is the largest column sum, not K max(P))."""
    g = torch.Generator().manual_seed(0)
    trans = (torch.randn(64, 64, generator=g) * 3).log_softmax(-1)
    u = torch.randn(2, 100, 64, generator=g)
    chain = scaled.ScaledChain(u, trans, left_is_log=True)
    forward = block_scaled._Forward(chain, torch.tensor([100, 100]), *scaled.normalized(u[:, 0]))
    assert forward.size == block_scaled.MAX_BLOCK
    lengths = torch.tensor([100, 37])
    want = _reference(scaled.ScaledChain(u.double(), trans.double(), left_is_log=True), lengths)
    got = block_scaled.log_partition(chain, lengths).double()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-4)


def test_dead_chain_raises_like_the_guarded_forward():
    unary = torch.zeros(2, 40, 3)
    unary[1, 30] = -math.inf  # no state allowed at position 30 of the second sequence
    trans = torch.zeros(3, 3)
    with torch.no_grad(), pytest.raises(ValueError, match="zero probability"):
        _ = LinearChain(DenseChain(unary, trans)).log_partition
    # past its length the dead position is padding: fine
    with torch.no_grad():
        got = LinearChain(DenseChain(unary, trans), lengths=torch.tensor([40, 30])).log_partition
    torch.testing.assert_close(got, torch.tensor([40, 30]) * math.log(3.0))


def test_used_without_grad_only():
    """With a leaf that needs its gradient the hand-written backward runs; without, the blocks."""
    g = torch.Generator().manual_seed(2)
    unary = torch.randn(2, 30, 5, generator=g, requires_grad=True)
    trans = torch.randn(5, 5, generator=g)
    with_grad = LinearChain(DenseChain(unary, trans)).log_partition
    assert with_grad.requires_grad
    with torch.no_grad():
        without = LinearChain(DenseChain(unary, trans)).log_partition
    assert not without.requires_grad
    torch.testing.assert_close(with_grad.detach(), without)


@pytest.fixture
def count_backward(monkeypatch):
    """Counts the log Z computed with the probability-space backward (``_Backward``)."""
    seen = {"calls": 0}
    original = block_scaled._Backward.apply

    def counting(*args):
        seen["calls"] += 1
        return original(*args)

    monkeypatch.setattr(block_scaled._Backward, "apply", counting)
    return seen


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    B=st.integers(1, 5),
    T=st.integers(2, 70),
    N=st.integers(1, 8),
    spread=st.sampled_from([0.1, 2.0, 10.0]),
    data=st.data(),
)
def test_backward_matches_autograd_float64(seed, B, T, N, spread, data):
    """Every gradient (unary, transition, init) of a weighted sum of log Z, ragged lengths at B > 1:
    the same as autograd of the plain guarded forward to 1e-9, through the probability-space backward."""
    g = torch.Generator().manual_seed(seed)
    unary = (torch.randn(B, T, N, generator=g, dtype=torch.float64) * spread).requires_grad_()
    trans = torch.randn(N, N, generator=g, dtype=torch.float64).requires_grad_()
    init = torch.randn(N, generator=g, dtype=torch.float64).requires_grad_()
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    weights = torch.randn(B, generator=g, dtype=torch.float64)
    chain = DenseChain(unary, trans, init)
    fast = block_scaled.differentiable_log_partition(exact_scaled(chain), lengths)
    assert fast is not None  # nothing underflows at these spreads: the fast path ran
    slow, _ = scaled.forward(exact_scaled(chain), lengths)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)
    leaves = [unary, trans, init]
    for a, b in zip(
        torch.autograd.grad((fast * weights).sum(), leaves),
        torch.autograd.grad((slow * weights).sum(), leaves),
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def exact_scaled(chain: DenseChain) -> scaled.ScaledChain:
    from zoo.inference.chain.exact import log_space

    return log_space(chain)


def test_float32_marginals_of_a_long_chain(count_backward):
    """T = 2000, Gaussian emissions a few nats apart, a peaked transition: float32 marginals and
    transition gradients through the fast backward, against float64."""
    g = torch.Generator().manual_seed(5)
    B, T, N = 3, 2000, 12
    unary = torch.randn(B, T, N, generator=g, dtype=torch.float64) * 4
    trans = (torch.randn(N, N, generator=g, dtype=torch.float64) * 3).log_softmax(-1)
    lengths = torch.tensor([2000, 1500, 7])
    out = {}
    for dtype in (torch.float32, torch.float64):
        u, t = unary.to(dtype).requires_grad_(), trans.to(dtype).requires_grad_()
        log_z = LinearChain(DenseChain(u, t), lengths).log_partition
        out[dtype] = (log_z, *torch.autograd.grad(log_z.sum(), [u, t]))
    assert count_backward["calls"] >= 1
    (z32, m32, t32), (z64, m64, t64) = out[torch.float32], out[torch.float64]
    torch.testing.assert_close(z32.double(), z64, rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(m32.double(), m64, rtol=0, atol=2e-5)  # marginals, in [0, 1]
    torch.testing.assert_close(t32.double(), t64, rtol=1e-4, atol=5e-3)  # sums of 3,500 pairwise marginals


def test_backward_falls_back_where_a_block_fails(count_backward):
    """A left-to-right chain with a fixed start fails the first block's check: the guarded forward and
    its backward run instead, with the same gradients as float64 autograd."""
    N, T = 4, 60
    trans = torch.full((N, N), -math.inf)
    for i in range(N):
        trans[i, i] = -0.2
        if i + 1 < N:
            trans[i, i + 1] = -1.7
    init = torch.tensor([0.0, -math.inf, -math.inf, -math.inf])
    unary = torch.randn(2, T, N, generator=torch.Generator().manual_seed(4)) * 50
    u32 = unary.clone().requires_grad_()
    got = LinearChain(DenseChain(u32, trans, init)).marginals
    want = LinearChain(DenseChain(unary.double(), trans.double(), init.double())).marginals
    assert count_backward["calls"] == 0
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)


def test_kept_buffers_carry_nothing_between_calls():
    """The no-grad forward reuses its buffers for calls with the same shapes: a call after another
    one (other values, a failing block in between, another shape) gives what a first call gives."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([60, 41, 60])

    def chain(scale):
        u = torch.randn(3, 60, 16, generator=g) * scale
        return scaled.ScaledChain(u, torch.randn(16, 16, generator=g).log_softmax(-1), left_is_log=True)

    chains = [chain(1.0), chain(300.0), chain(1.0)]  # the second fails its checks (emissions far apart)
    other = scaled.ScaledChain(torch.randn(2, 9, 16, generator=g), chains[0].left, left_is_log=True)
    with torch.no_grad():
        for c in [*chains, other, chains[0]]:
            lens = lengths if c is not other else torch.tensor([9, 4])
            want = _reference(scaled.ScaledChain(c.u.double(), c.left.double(), left_is_log=True), lens)
            got = block_scaled.log_partition(c, lens).double()
            torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-4)


def test_kept_buffers_made_in_inference_mode_serve_outside_it():
    """Lightning evaluates under inference mode: buffers made there cannot be written outside it, so
    a call after one in inference mode (same shapes) gets buffers of its own."""
    g = torch.Generator().manual_seed(4)
    u = torch.randn(2, 30, 8, generator=g)
    chain = scaled.ScaledChain(u, torch.randn(8, 8, generator=g).log_softmax(-1), left_is_log=True)
    lengths = torch.tensor([30, 30])
    with torch.inference_mode():
        inside = block_scaled.log_partition(chain, lengths)
    with torch.no_grad():
        outside = block_scaled.log_partition(chain, lengths)
    torch.testing.assert_close(outside, inside.clone())


def test_growth_inside_a_block_does_not_fail_its_check():
    """Near-uniform transitions over many states grow p by about K a product, 2^100+ over a block: each
    position is checked against its own input's scale (not the block's largest entry), so the block
    passes and the fast path runs, with and without gradients (a fresh neural HMM looks like this)."""
    g = torch.Generator().manual_seed(5)
    K, T = 300, 60
    u = torch.randn(4, T, K, generator=g) * 0.1 - 9.0  # a fresh model's nearly flat emissions
    trans = (torch.randn(K, K, generator=g) * 0.1).log_softmax(-1).requires_grad_()
    lengths = torch.tensor([60, 60, 33, 7])
    chain = scaled.ScaledChain(u, trans, left_is_log=True)
    log_z = block_scaled.differentiable_log_partition(chain, lengths)
    assert log_z is not None  # the block path ran (None: a block failed its check)
    want = _reference(scaled.ScaledChain(u.double(), trans.detach().double(), left_is_log=True), lengths)
    torch.testing.assert_close(log_z.double(), want, rtol=2e-6, atol=1e-4)
    detached = scaled.ScaledChain(u, trans.detach(), left_is_log=True)
    forward = block_scaled._Forward(detached, lengths, *scaled.normalized(u[:, 0]))
    assert forward.size < block_scaled.MAX_BLOCK and forward.run() is not None


@pytest.mark.parametrize("T", [1, 2, 40])
@pytest.mark.parametrize("kind", ["log", "two products"])
@pytest.mark.parametrize("grad", [False, True])
def test_init_kept_apart_equals_it_folded_in(kind, T, grad):
    """A chain's initial log-potentials kept apart (``ScaledChain.init``: the no-grad forward reads
    u from position 1 on and copies no fold) give the same log Z and gradients as the same chain with
    them folded into u, with a fixed start state (-inf entries) and ragged lengths."""
    g = torch.Generator().manual_seed(T)
    B, K = 3, 5
    chain = _chain(g, B, T, K, 4, two=kind == "two products", weights=kind == "two products", final=False,
                   spread=30.0, from_log=torch.randn(K, K, generator=g) if kind == "log" else None)
    init = torch.full((B, K), -math.inf, dtype=torch.float64)
    init[:, 0], init[1] = 0.0, torch.randn(K, generator=g, dtype=torch.float64)  # fixed start; free
    lengths = torch.tensor([T, max(1, T // 2), 1])
    apart = scaled.ScaledChain(chain.u, chain.left, chain.right, chain.log_weights, chain.final,
                               chain.left_is_log, init=init)
    folded = scaled.ScaledChain(torch.cat([chain.u[:, :1] + init.unsqueeze(1), chain.u[:, 1:]], 1),
                                chain.left, chain.right, chain.log_weights, chain.final, chain.left_is_log)
    if not grad:
        torch.testing.assert_close(scaled.log_partition(apart, lengths), _reference(folded, lengths))
        torch.testing.assert_close(scaled.forward(apart, lengths)[1], scaled.forward(folded, lengths)[1])
        return
    results = []
    for with_init in (True, False):
        u, i = chain.u.clone().requires_grad_(), init.clone().requires_grad_()
        c = scaled.ScaledChain(u, chain.left, chain.right, chain.log_weights, chain.final, chain.left_is_log,
                               init=i if with_init else None)
        if not with_init:
            c.u = torch.cat([u[:, :1] + i.unsqueeze(1), u[:, 1:]], 1)
        log_z = scaled.log_partition(c, lengths)
        results.append((log_z, *torch.autograd.grad(log_z.sum(), [u, i])))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
