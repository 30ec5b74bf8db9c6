"""What lies past a sequence's length: the per-position potentials there replaced by a mask or by noise,
and the check that no answer changed (tests/chain/test_padding.py, tests/semimarkov/test_sm_padding.py)."""

from __future__ import annotations

import torch


def ragged_lengths(spec) -> torch.Tensor:
    """The spec's lengths (all T when None) with the first sequence cut to 1: at least one is ragged."""
    lengths = spec.lengths if spec.lengths is not None else torch.full((spec.batch,), spec.T)
    lengths = lengths.clone()
    lengths[0] = 1
    return lengths


def padded_args(args: dict, lengths: torch.Tensor, where: list, fill: str, seed: int) -> dict:
    """``args`` with the entries of each named per-position argument at axis-1 indices >= length + offset
    (``where``: (name, offset) pairs; None or a tensor without a per-position axis is left alone)
    replaced by -inf (``fill`` "-inf") or by +-1e3 noise."""
    g = torch.Generator().manual_seed(seed)
    args = dict(args)
    for name, offset in where:
        x = args[name]
        if x is None or x.dim() < 3:
            continue
        x = x.clone()
        for b, length in enumerate(lengths.tolist()):
            tail = x[b, length + offset :]
            noise = 1e3 * torch.randn(tail.shape, generator=g, dtype=x.dtype)
            tail.copy_(torch.full_like(tail, float("-inf")) if fill == "-inf" else noise)
        args[name] = x
    return args


def assert_unchanged(other: dict, plain: dict) -> None:
    """Every answer (by operation name) of the padded structure equals the plain one's."""
    for op, value in plain.items():
        torch.testing.assert_close(other[op], value, rtol=1e-9, atol=1e-9, msg=lambda m, o=op: f"{o}: {m}")
