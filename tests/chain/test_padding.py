"""What lies past a chain's length never matters: every operation gives the same answer, for every
container and backend, when the potentials there are -inf (a mask users pad with) or thousands of nats."""

from __future__ import annotations

import pytest
import torch
from bruteforce import ChainSpec
from hypothesis import given, settings
from hypothesis import strategies as st
from padding import assert_unchanged, padded_args, ragged_lengths
from strategies import ALL_COMBOS, build_dist, chain_specs, combo_id

# per kind: (argument, the axis-1 offset of its first entry past a length L: L + offset); a shared
# transition (N x N) and absent rank weights have no such axis
PADDED = {
    "dense": [("unary", 0), ("transition", -1)],
    "embedding": [("unary", 0)],
    "lowrank": [("unary", 0), ("log_rank_weights", -1)],
    "rankspace": [("emission", 0)],
}


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
    lengths = ragged_lengths(spec)
    spec = ChainSpec(spec.kind, spec.args, lengths, dict(spec.meta))
    args = padded_args(spec.args, lengths, PADDED[kind], fill, data.draw(st.integers(0, 2**31 - 1)))
    with torch.no_grad():
        assert_unchanged(answers(ChainSpec(kind, args, lengths), backend), answers(spec, backend))
