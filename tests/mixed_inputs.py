"""Checks that a potential container refuses tensors of mixed dtype or device at construction
(``zoo.inference.checks.check_same_dtype``), shared by the chain, semi-Markov and tree error tests."""

from __future__ import annotations

import pytest
import torch


def assert_other_dtype_refused(build, args: dict, owner: str, arg: str, dtype=torch.float64) -> None:
    """``build(**args)`` with ``arg`` in ``dtype`` among float32 tensors raises a TypeError naming both
    dtypes and the conversion to make."""
    match = rf"{owner}'s? potentials must share one dtype: .*{arg} is {str(dtype).removeprefix('torch.')}"
    with pytest.raises(TypeError, match=match) as e:
        build(**dict(args, **{arg: args[arg].to(dtype)}))
    assert "is float32" in str(e.value) and f"{arg}.float()" in str(e.value), str(e.value)


def assert_bfloat16_mixes(build, args: dict, arg: str, log_partition) -> None:
    """bfloat16 is computed in float32, so it mixes with float32: ``log_partition(container)`` is that
    of the argument rounded to bfloat16 and given in float32."""
    rounded = dict(args, **{arg: args[arg].bfloat16().float()})
    mixed = log_partition(build(**dict(args, **{arg: args[arg].bfloat16()})))
    assert mixed.dtype == torch.float32
    assert torch.equal(mixed, log_partition(build(**rounded)))


def assert_other_device_refused(build, args: dict, owner: str, arg: str) -> None:
    """Devices are compared as dtypes are, before any value is read ('meta' stands for a GPU here)."""
    with pytest.raises(TypeError, match=rf"{owner}'s? potentials must be on one device: .*{arg} is on meta"):
        build(**dict(args, **{arg: args[arg].to("meta")}))
