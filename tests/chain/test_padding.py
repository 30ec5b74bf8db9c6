"""What lies past a chain's length never matters: every operation gives the same answer, for every
container and backend, when the potentials there are -inf (a mask users pad with) or thousands of nats."""

from __future__ import annotations

import pytest
import torch
from bruteforce import ChainSpec
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import ALL_COMBOS, build_dist, chain_specs, combo_id

# per kind: (argument, the axis-1 offset of its first padded entry past a length L: L + offset)
PADDED = {
    "dense": [("unary", 0), ("transition", -1)],
    "embedding": [("unary", 0)],
    "lowrank": [("unary", 0), ("log_rank_weights", -1)],
    "rankspace": [("emission", 0)],
}


def padded(spec: ChainSpec, fill: str, seed: int) -> ChainSpec:
    """The spec with every per-position entry past each length replaced by -inf or by +-1e3 noise."""
    g = torch.Generator().manual_seed(seed)
    args = dict(spec.args)
    for name, offset in PADDED[spec.kind]:
        x = args[name]
        if x is None or x.dim() < 3 or (name == "transition" and x.dim() == 2):
            continue  # not per position (a shared transition, no rank weights)
        x = x.clone()
        for b, length in enumerate(spec.lengths.tolist()):
            tail = x[b, length + offset :]
            noise = 1e3 * torch.randn(tail.shape, generator=g, dtype=x.dtype)
            tail.copy_(torch.full_like(tail, float("-inf")) if fill == "-inf" else noise)
        args[name] = x
    return ChainSpec(spec.kind, args, spec.lengths, dict(spec.meta))


def answers(spec: ChainSpec, backend) -> dict[str, torch.Tensor]:
    dist = build_dist(spec, backend)
    best = dist.argmax
    out = {
        "log_partition": dist.log_partition,
        "marginals": dist.marginals,
        "entropy": dist.entropy,
        "argmax": best,
        "max_score": dist.max_score,
        "log_prob": dist.log_prob(best),
        "sample": dist.sample(3, generator=torch.Generator().manual_seed(0)),
        "rsample": dist.rsample(0.5, generator=torch.Generator().manual_seed(0)),
    }
    if spec.T > 1:
        out["pairwise_marginals"] = dist.pairwise_marginals
    return out


@pytest.mark.parametrize("combo", ALL_COMBOS, ids=combo_id)
@pytest.mark.parametrize("fill", ["-inf", "noise"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_padding_never_matters(combo, fill, data):
    kind, backend = combo
    spec = data.draw(chain_specs(kind, min_t=2))
    lengths = spec.lengths if spec.lengths is not None else torch.full((spec.batch,), spec.T)
    lengths = lengths.clone()
    lengths[0] = 1  # at least one ragged element
    spec = ChainSpec(spec.kind, spec.args, lengths, dict(spec.meta))
    with torch.no_grad():
        plain = answers(spec, backend)
    with torch.no_grad():
        other = answers(padded(spec, fill, data.draw(st.integers(0, 2**31 - 1))), backend)
    for op, value in plain.items():
        torch.testing.assert_close(other[op], value, rtol=1e-9, atol=1e-9, msg=lambda m, o=op: f"{o}: {m}")
