"""The chain's Viterbi (``zoo.inference.chain.viterbi``, and ``viterbi_scan`` for few states) against a
plain float64 max-plus reference: shared and per-position transitions, ragged lengths, chunked
reductions, forbidden paths, ties, and the best score's gradient. The dense tests run both routes."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zoo.inference.semiring as semiring
from zoo.inference import DenseChain, LinearChain, LowRankChain, RankSpaceChain
from zoo.inference.chain import viterbi, viterbi_scan
from zoo.inference.chain.engine import sequence_score

NEG_INF = float("-inf")


@pytest.fixture(params=["steps", "scan"])
def route(request, monkeypatch):
    """The dense Viterbi step by step, or as the O(log T) scan, whatever the sizes."""
    monkeypatch.setattr(viterbi_scan, "pays", lambda batch, length, states: request.param == "scan")
    return request.param


def reference_max_scores(unary, transition, init, lengths):
    """max over paths of each chain's score, by the textbook recursion on B x N x N sums (float64)."""
    unary, transition, init = (x.double() for x in (unary, transition, init))
    B, T, N = unary.shape
    best = []
    for b in range(B):
        x = init + unary[b, 0]
        for t in range(1, int(lengths[b])):
            step = transition if transition.dim() == 2 else transition[b, t - 1]
            x = (x[:, None] + step).amax(0) + unary[b, t]
        best.append(x.max())
    return torch.stack(best)


def path_scores(unary, transition, init, states, lengths):
    scores = []
    for b in range(unary.shape[0]):
        z = states[b, : int(lengths[b])].tolist()
        score = init[z[0]].double() + sum(unary[b, t, s].double() for t, s in enumerate(z))
        for t in range(1, len(z)):
            step = transition if transition.dim() == 2 else transition[b, t - 1]
            score = score + step[z[t - 1], z[t]].double()
        scores.append(score)
    return torch.stack(scores)


def random_chain(B, T, N, shared, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(B, T, N, generator=g, dtype=dtype)
    shape = (N, N) if shared else (B, T - 1, N, N)
    return unary, torch.randn(*shape, generator=g, dtype=dtype), torch.randn(N, generator=g, dtype=dtype)


def check_best(unary, transition, init, lengths, atol=1e-4):
    dist = LinearChain(DenseChain(unary, transition, init), lengths)
    states = dist.argmax
    T = unary.shape[1]
    for b, L in enumerate(lengths.tolist()):
        assert (states[b, L:] == -1).all() and (states[b, :L] >= 0).all(), states[b]
    best = reference_max_scores(unary, transition, init, lengths)
    torch.testing.assert_close(path_scores(unary, transition, init, states, lengths), best, atol=atol, rtol=0)
    torch.testing.assert_close(dist.max_score.double(), best, atol=atol, rtol=0)
    assert states.shape == (unary.shape[0], T)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("lengths", [[6, 6, 6], [6, 1, 4], [3, 5, 2]])
def test_best_paths_match_the_reference(shared, lengths, route):
    check_best(*random_chain(3, 6, 5, shared), torch.tensor(lengths))


@pytest.mark.parametrize("shared", [True, False])
def test_chunked_reductions_give_the_same_paths(shared, monkeypatch):
    """MAX_CHUNK smaller than one row: every column is its own chunk (the large-N path)."""
    unary, transition, init = random_chain(2, 7, 9, shared, seed=1)
    lengths = torch.tensor([7, 4])
    whole = LinearChain(DenseChain(unary, transition, init), lengths).argmax
    monkeypatch.setattr(semiring, "MAX_CHUNK", 5)
    assert torch.equal(LinearChain(DenseChain(unary, transition, init), lengths).argmax, whole)
    check_best(unary, transition, init, lengths)


def test_forbidden_transitions_and_a_fixed_start(route):
    """A left-to-right chain (i -> i or i + 1) that starts in state 0, with emissions hundreds of nats
    apart in float32: the best path stays inside the topology."""
    B, T, N = 2, 40, 4
    g = torch.Generator().manual_seed(2)
    unary = -500 + 200 * torch.randn(B, T, N, generator=g)
    step = torch.arange(N)[None] - torch.arange(N)[:, None]
    allowed = (step == 0) | (step == 1)
    transition = torch.where(allowed, -1.0, NEG_INF)
    init = torch.tensor([0.0, NEG_INF, NEG_INF, NEG_INF])
    lengths = torch.tensor([40, 13])
    check_best(unary, transition, init, lengths, atol=0.05)  # sums of |score| ~ 2e4 in float32
    states = LinearChain(DenseChain(unary, transition, init), lengths).argmax
    steps = states[0, 1:] - states[0, :-1]
    assert states[0, 0] == 0 and ((steps == 0) | (steps == 1)).all()


def test_ties_give_a_best_path(route):
    unary = torch.zeros(2, 5, 3)
    check_best(unary, torch.zeros(3, 3), torch.zeros(3), torch.tensor([5, 2]))


def test_a_chain_with_no_path_raises_and_padding_does_not_count(route):
    unary, transition, init = random_chain(2, 4, 3, shared=True)
    unary[1, 3] = NEG_INF  # past the second chain's length: ignored
    lengths = torch.tensor([4, 3])
    check_best(unary, transition, init, lengths)
    unary[0, 2] = NEG_INF  # inside the first chain: no path survives
    dist = LinearChain(DenseChain(unary, transition, init), lengths)
    for operation in ("argmax", "max_score"):
        with pytest.raises(ValueError, match="zero probability"):
            getattr(dist, operation)


@pytest.mark.parametrize("padding", [NEG_INF, 3e38, -3e38])
def test_padding_that_overflows_changes_no_path(padding, route):
    """The forward runs through the padding unmasked: values there may reach -inf, +inf or NaN (float32
    overflow, then +inf + -inf), and no sequence's path may change."""
    unary, transition, init = random_chain(3, 6, 4, shared=True)
    transition[0, 1] = NEG_INF
    lengths = torch.tensor([6, 2, 4])
    padded = unary.clone()
    for b, length in enumerate(lengths.tolist()):
        padded[b, length:] = padding
    paths = LinearChain(DenseChain(padded, transition, init), lengths).argmax
    for b, length in enumerate(lengths.tolist()):
        alone = LinearChain(DenseChain(unary[b : b + 1, :length], transition, init)).argmax
        assert paths[b, :length].tolist() == alone[0].tolist()
        assert (paths[b, length:] == -1).all()


@pytest.mark.parametrize("shared", [True, False])
def test_the_best_score_gradient_is_the_best_path(shared, route):
    unary, transition, init = (x.requires_grad_() for x in random_chain(2, 5, 4, shared, seed=3))
    lengths = torch.tensor([5, 3])
    dist = LinearChain(DenseChain(unary, transition, init), lengths)
    dist.max_score.sum().backward()
    states = dist.argmax
    expected = torch.zeros_like(unary)
    for b, L in enumerate(lengths.tolist()):
        expected[b, torch.arange(L), states[b, :L]] = 1.0
    assert torch.equal(unary.grad, expected)
    assert init.grad.sum() == 2 and transition.grad.sum() == (5 - 1) + (3 - 1)


# --- the O(log T) scan (few states, long sequences) -----------------------------------------------------
def steps_and_scan(chain, lengths, monkeypatch):
    """The best paths of both routes (or the message of the error each raises)."""
    outcomes = []
    for scan in (False, True):
        monkeypatch.setattr(viterbi_scan, "pays", lambda batch, length, states, scan=scan: scan)
        try:
            outcomes.append(LinearChain(chain, lengths).argmax)
        except ValueError as error:
            outcomes.append(str(error))
    return outcomes


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(1, 3), T=st.integers(1, 40), N=st.integers(1, 5), shared=st.booleans(),
    seed=st.integers(0, 99),
)
def test_the_scan_takes_the_same_path_on_integer_scores(B, T, N, shared, seed):
    """Integer scores (sums exact in float32, ties everywhere, forbidden entries): the scan adds in
    another order, and must still give the step-by-step path, first best predecessor on every tie, or
    the same error where the forbidden entries leave a sequence without a path."""
    g = torch.Generator().manual_seed(seed)
    unary, transition, init = random_chain(B, T, N, shared, seed)
    unary, transition, init = ((3 * x).round() for x in (unary, transition, init))
    transition = torch.where(torch.rand(transition.shape, generator=g) < 0.2, NEG_INF, transition)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    with pytest.MonkeyPatch.context() as monkeypatch:
        steps, scan = steps_and_scan(DenseChain(unary, transition, init), lengths, monkeypatch)
    if isinstance(steps, str):
        assert scan == steps and "zero probability" in steps
    else:
        assert torch.equal(steps, scan)


def test_a_long_left_to_right_chain_goes_to_the_scan(monkeypatch):
    """A Gaussian HMM's decoding (3 states, T = 3000, emissions hundreds of nats apart, a fixed start,
    float32) takes the scan by default, and its path scores the float64 best (within the round-off of
    a sum of 3000 terms of about 500)."""
    B, T, N = 3, 3000, 3
    g = torch.Generator().manual_seed(4)
    unary = -500 + 200 * torch.randn(B, T, N, generator=g)
    step = torch.arange(N)[None] - torch.arange(N)[:, None]
    transition = torch.where((step == 0) | (step == 1), -0.01, NEG_INF)
    init = torch.tensor([0.0, NEG_INF, NEG_INF])
    lengths = torch.tensor([3000, 1700, 2999])
    assert viterbi_scan.pays(B, T, N)
    calls = []
    monkeypatch.setattr(viterbi_scan, "scan_paths", lambda *args: calls.append(1) or scan_paths(*args))
    check_best(unary, transition, init, lengths, atol=2.0)  # |scores| ~ 1.5e6: float32 ulp 0.125
    assert calls


scan_paths = viterbi_scan.scan_paths


@pytest.mark.parametrize(
    "batch, length, states, expected",
    [(8, 1000, 3, True), (1, 5000, 8, True), (8, 1000, 8, True), (8, 100, 4, False), (64, 1000, 4, False),
     (8, 1000, 32, False), (1, 10**6, 8, False)],
)
def test_the_scan_is_taken_where_it_pays(batch, length, states, expected):
    assert viterbi_scan.pays(batch, length, states) == expected


# --- low-rank chains with rank weights: streamed a step at a time ----------------------------------------
def rank_space_chain(B, T, N, R, seed=0, dtype=torch.float32, spread=1.0):
    """A rank-space HMM's chain: emissions on the rank components, log-weights ``spread`` x N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.rand(N, generator=g, dtype=dtype)
    U = torch.rand(N, R, generator=g, dtype=dtype).softmax(-1)
    V = torch.rand(N, R, generator=g, dtype=dtype).softmax(0)
    return RankSpaceChain(start / start.sum(), U, V, spread * torch.randn(B, T, R, generator=g, dtype=dtype))


@pytest.mark.parametrize("backend", ["low-rank", "rank-space"])
def test_streamed_paths_score_the_dense_forms_best(backend, monkeypatch):
    """Per-position low-rank transitions never form B x (T-1) x N x N, and their best paths score the
    best score of the dense form (float64, ragged lengths)."""
    chain = rank_space_chain(3, 7, 6, 3, dtype=torch.float64)
    dense = chain.dense()  # B x (T-1) x N x N; its init is folded into position 1 for the reference
    lengths = torch.tensor([7, 2, 5])
    best = reference_max_scores(dense.folded_unary(), dense.transition, torch.zeros(6), lengths)
    monkeypatch.setattr(LowRankChain, "dense", lambda self: pytest.fail("the dense form was built"))
    dist = LinearChain(chain, lengths, backend=backend)
    states = dist.argmax
    assert ((states >= 0) == (torch.arange(7) < lengths[:, None])).all()
    torch.testing.assert_close(dist.max_score, best, atol=1e-10, rtol=0)


def test_streamed_blocks_of_columns_give_the_same_paths(monkeypatch):
    chain = rank_space_chain(2, 6, 9, 4, seed=1)
    lengths = torch.tensor([6, 4])
    whole = LinearChain(chain, lengths, backend="low-rank").argmax
    monkeypatch.setattr(viterbi, "STREAM_CHUNK", 1)  # one column a block
    assert torch.equal(LinearChain(chain, lengths, backend="low-rank").argmax, whole)


def test_streamed_float32_with_rank_weights_hundreds_of_nats_apart():
    """Emission log-weights down to about -1e3: the float32 path scores the float64 best within the
    error of a sum of T float32 terms."""
    chain64 = rank_space_chain(4, 30, 8, 4, seed=2, dtype=torch.float64, spread=300.0)
    lengths = torch.tensor([30, 17, 1, 29])
    best = LinearChain(chain64, lengths, backend="rank-space").max_score
    chain32 = RankSpaceChain(*(x.float() for x in (chain64.start, chain64.U, chain64.V, chain64.emission)))
    states = LinearChain(chain32, lengths, backend="rank-space").argmax
    dense = chain64.dense()
    scored = path_scores(dense.folded_unary(), dense.transition, torch.zeros(8), states, lengths)
    torch.testing.assert_close(scored, best, atol=1e-5 * best.abs().max().item(), rtol=0)


def test_a_very_long_chain_decodes_its_best_path_in_float32(route):
    """T = 100,000 frames of a 3-state Gaussian HMM (frame scores of a few nats; the best score about
    -3.7e5): the float32 path scores the float64 best within 1e-6 relative. The forward's values are
    shifted as it goes; unshifted, float32 rounded away the differences the paths are chosen by, and
    the path scored 4.7 (scan) and 10 nats (step by step) below the best."""
    T, N = 100_000, 3
    g = torch.Generator().manual_seed(0)
    frames, means = torch.randn(T, 2, generator=g), torch.randn(N, 2, generator=g)
    unary = (-0.5 * ((frames[:, None] - means) ** 2).sum(-1) - math.log(2 * math.pi))[None]
    transition = torch.randn(N, N, generator=g).log_softmax(-1)
    init = torch.randn(N, generator=g).log_softmax(-1)
    lengths = torch.tensor([T])
    states = LinearChain(DenseChain(unary, transition, init), lengths).argmax
    c64 = DenseChain(unary.double(), transition.double(), init.double())
    best = sequence_score(c64, LinearChain(c64, lengths).argmax, lengths)
    found = sequence_score(c64, states, lengths)
    assert best - found <= 1e-6 * best.abs(), f"the float32 path scores {found.item()}, best {best.item()}"


@pytest.mark.parametrize("T", [2, 16, 17, 18, 33, 1000])
def test_the_blocked_walk_back_follows_every_pointer(T):
    """``walk_back`` (blocks of positions, then pointer jumping over the blocks) against the walk back
    one position at a time, on random pointers, at lengths around the block's."""
    N, B = 3, 2
    g = torch.Generator().manual_seed(T)
    pointers = torch.randint(0, N, (N, T - 1, B), generator=g)
    last = torch.randint(0, N, (B,), generator=g)
    expected = [last]
    for t in range(T - 2, -1, -1):
        expected.append(pointers[expected[-1], t, torch.arange(B)])
    assert torch.equal(viterbi_scan.walk_back(pointers, last), torch.stack(expected[::-1]))
