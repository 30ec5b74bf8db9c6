"""Every operation of every structure under torch.inference_mode (Lightning's evaluation loops), and on
tensors made under it, gives what it gives under torch.no_grad. Marginals, MBR trees and relaxed
samples are gradients of log Z: they failed there with "element 0 of tensors does not require grad"
or "Inference tensors cannot be saved for backward" (audit)."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    LowRankChain,
    RankSpaceGrammar,
    RDPOptions,
    SemiMarkovChain,
    TreeDistribution,
)

B, T, N, D, R = 2, 5, 3, 2, 2


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _chain(backend):
    options = RDPOptions(2, 1, generator=_g()) if backend == "randomized" else None
    return lambda: LinearChain(
        DenseChain(torch.randn(B, T, N, generator=_g(1)), torch.randn(N, N, generator=_g(2))),
        torch.tensor([5, 3]), backend, options,
    )


def _low_rank_chain():
    u = torch.randn(B, T, N, generator=_g(1))
    left, right = torch.rand(N, R, generator=_g(2)), torch.rand(N, R, generator=_g(3))
    return LinearChain(LowRankChain(u, left, right), torch.tensor([5, 3]))


def _semimarkov(backend):
    options = RDPOptions(2, 1, generator=_g()) if backend == "randomized" else None
    return lambda: SemiMarkovChain(
        DenseSemiMarkov(
            torch.randn(B, T, N, generator=_g(1)), torch.randn(N, N, generator=_g(2)),
            torch.randn(N, D, generator=_g(3)),
        ),
        torch.tensor([5, 3]), backend, options,
    )


def _tree(backend):
    options = RDPOptions(1, 1, generator=_g()) if backend == "randomized" else None
    grammar = DenseGrammar(torch.randn(2, generator=_g(1)), torch.randn(2, 5, 5, generator=_g(2)))
    return lambda: TreeDistribution(grammar, torch.randn(B, T, 3, generator=_g(3)), torch.tensor([5, 3]),
                                    backend, options)


def _rank_space_tree():
    U, V, W = (torch.rand(n, R, generator=_g(n)) for n in (2, 5, 5))
    grammar = RankSpaceGrammar(torch.randn(2, generator=_g(1)), U, V, W)
    return TreeDistribution(grammar, torch.randn(B, T, 3, generator=_g(3)), torch.tensor([5, 3]))


CHAIN_OPS = {
    "log_partition": lambda d: d.log_partition,
    "marginals": lambda d: d.marginals,
    "pairwise_marginals": lambda d: d.pairwise_marginals,
    "entropy": lambda d: d.entropy,
    "argmax": lambda d: d.argmax,
    "log_prob": lambda d: d.log_prob(d.argmax),
    "sample": lambda d: d.sample(2, generator=_g(4)),
    "rsample": lambda d: d.rsample(0.5, generator=_g(4)),
}
SEMIMARKOV_OPS = {**{k: v for k, v in CHAIN_OPS.items() if k != "pairwise_marginals"},
                  "segment_marginals": lambda d: d.segment_marginals}
TREE_OPS = {
    "log_partition": lambda d: d.log_partition,
    "span_marginals": lambda d: d.span_marginals,
    "marginals": lambda d: d.marginals,
    "preterminal_marginals": lambda d: d.preterminal_marginals,
    "mbr": lambda d: d.mbr(),
    "entropy": lambda d: d.entropy,
    "argmax": lambda d: d.argmax,
    "log_prob": lambda d: d.log_prob(d.argmax),
    "sample": lambda d: d.sample(2, generator=_g(4)),
}
STRUCTURES = [
    *((f"chain-{b}", _chain(b), CHAIN_OPS) for b in ("exact", "randomized")),
    ("chain-low-rank", _low_rank_chain, CHAIN_OPS),
    *((f"semimarkov-{b}", _semimarkov(b), SEMIMARKOV_OPS) for b in ("exact", "randomized")),
    *((f"tree-{b}", _tree(b), TREE_OPS) for b in ("exact", "randomized")),
    ("tree-rank-space", _rank_space_tree,  # no Viterbi in rank space
     {k: v for k, v in TREE_OPS.items() if k not in ("argmax", "log_prob")}),
]
CASES = [pytest.param(build, op, id=f"{name}-{op_name}")
         for name, build, ops in STRUCTURES for op_name, op in ops.items()]


@pytest.mark.parametrize("build, op", CASES)
def test_an_operation_under_inference_mode_equals_it_under_no_grad(build, op):
    with torch.no_grad():
        expected = op(build())
    with torch.inference_mode():
        inside = op(build())
    with torch.inference_mode():
        made_inside = build()
    outside = op(made_inside)
    for got in (inside, outside):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
