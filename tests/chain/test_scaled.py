"""The hand-written backward of the scaled forward agrees with plain autograd on the same recursion."""

import pytest
import torch

from zoo.inference.chain import scaled


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("final", [False, True])
def test_custom_backward_matches_autograd(right, weights, final):
    g = torch.Generator().manual_seed(0)
    B, T, K, M = 3, 5, 6, 4 if right else 6

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    u = torch.randn(B, T, K, generator=g, dtype=torch.float64, requires_grad=True)
    args = [u, rand(K, M), rand(K, M) if right else None, rand(B, T - 1, M) if weights else None]
    args.append(rand(K) if final else None)
    lengths = torch.tensor([5, 1, 3])
    chain = scaled.ScaledChain(*args)
    fast = scaled.log_partition(chain, lengths)
    slow, _ = scaled.forward(chain, lengths)
    torch.testing.assert_close(fast, slow)
    leaves = [a for a in args if a is not None]
    weights_out = torch.randn(B, generator=g, dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad((fast * weights_out).sum(), leaves),
        torch.autograd.grad((slow * weights_out).sum(), leaves),
    ):
        torch.testing.assert_close(a, b)


def test_zero_probability_chain_is_an_error():
    u = torch.zeros(1, 2, 2)
    left = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    u[0, 1, 0] = float("-inf")
    with pytest.raises(ValueError, match="zero probability"):
        scaled.log_partition(scaled.ScaledChain(u, left), torch.tensor([2]))
