"""The hand-written backward of the scaled forward agrees with plain autograd on the same recursion,
including the guarded products' repaired entries (float32 inputs where underflow bites)."""

import pytest
import torch

import zoo.inference.chain.scaled as scaled
import zoo.inference.logmatmul as logmatmul


def _compare(args, lengths, left_is_log=False, rtol=None, atol=None):
    chain = scaled.ScaledChain(*args, left_is_log=left_is_log)
    fast = scaled.log_partition(chain, lengths)
    slow, _ = scaled.forward(chain, lengths)
    torch.testing.assert_close(fast, slow, rtol=rtol, atol=atol)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    weights_out = torch.linspace(0.5, 1.5, len(lengths), dtype=fast.dtype)
    for a, b in zip(
        torch.autograd.grad((fast * weights_out).sum(), leaves),
        torch.autograd.grad((slow * weights_out).sum(), leaves),
    ):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("final", [False, True])
def test_custom_backward_matches_autograd(right, weights, final):
    g = torch.Generator().manual_seed(0)
    B, T, K, M = 3, 5, 6, 4 if right else 6

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    u = torch.randn(B, T, K, generator=g, dtype=torch.float64, requires_grad=True)
    log_w = torch.randn(B, T - 1, M, generator=g, dtype=torch.float64, requires_grad=True)
    args = [u, rand(K, M), rand(K, M) if right else None, log_w if weights else None]
    args.append(rand(K) if final else None)
    _compare(args, torch.tensor([5, 1, 3]))


@pytest.fixture
def count_repairs(monkeypatch):
    """Counts the entries the guarded products repair (so a test knows the repair path ran)."""
    seen = {"entries": 0}
    original = logmatmul.repair_index

    def counting(h, matrix, live=None, second_order=False):
        index = original(h, matrix, live, second_order)
        seen["entries"] += 0 if index is None else index[0].numel()
        return index

    monkeypatch.setattr(scaled, "repair_index", counting)
    monkeypatch.setattr(logmatmul, "repair_index", counting)
    return seen


def _left_to_right(N: int) -> torch.Tensor:
    trans = torch.full((N, N), float("-inf"))
    idx = torch.arange(N)
    trans[idx, idx] = -0.1
    trans[idx[:-1], idx[:-1] + 1] = -2.4
    return trans


@pytest.mark.parametrize("per_position", [False, True])
def test_repaired_entries_backward_matches_autograd_float32(count_repairs, per_position):
    """Left-to-right topology, a fixed start and Gaussian-scale emissions hundreds of nats apart:
    most steps repair entries; the hand-written backward still equals autograd of the forward."""
    g = torch.Generator().manual_seed(1)
    B, T, N = 3, 40, 5
    u = (torch.randn(B, T, N, generator=g) * 150 - 500).requires_grad_()
    u.data[:, 0, 1:] = float("-inf")  # start in state 0
    trans = _left_to_right(N)
    if per_position:
        trans = (trans + torch.randn(B, T - 1, N, N, generator=g)).requires_grad_()
    else:
        trans.requires_grad_()
    _compare([u, trans], torch.tensor([40, 17, 3]), left_is_log=True, rtol=2e-4, atol=2e-5)
    assert count_repairs["entries"] > 0


@pytest.mark.parametrize("final", [False, True])
@pytest.mark.parametrize("dead_rank", [False, True])
def test_repaired_low_rank_and_rank_weights_float32(count_repairs, final, dead_rank):
    """Rank log-weights spread over hundreds of nats (the second product is repaired, fed in
    probability space), with or without a dead rank column (the first product is repaired too)."""
    g = torch.Generator().manual_seed(2)
    B, T, K, M = 2, 12, 6, 4
    left = torch.rand(K, M, generator=g)
    if dead_rank:
        left[:, 0] = 0.0  # a dead rank column
        left[0] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # state 0 only reaches rank 0: dead
    right = torch.rand(K, M, generator=g)
    right[1] = torch.tensor([0.0, 0.0, 0.0, 1.0])  # state 1 is reached through rank 3 only,
    log_w = torch.randn(B, T - 1, M, generator=g) * 200
    log_w[..., 3] = log_w.amin(-1) - 150  # whose weight is always 150 nats below the others
    u = torch.randn(B, T, K, generator=g) * 100
    args = [u.requires_grad_(), left.requires_grad_(), right.requires_grad_(), log_w.requires_grad_()]
    args.append(torch.rand(K, generator=g).requires_grad_() if final else None)
    _compare(args, torch.tensor([12, 7]), rtol=2e-4, atol=2e-5)
    assert count_repairs["entries"] > 0


def test_zero_probability_chain_is_an_error():
    u = torch.zeros(1, 2, 2)
    left = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    u[0, 1, 0] = float("-inf")
    with pytest.raises(ValueError, match="zero probability"):
        scaled.log_partition(scaled.ScaledChain(u, left), torch.tensor([2]))
