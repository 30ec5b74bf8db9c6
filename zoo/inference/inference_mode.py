"""The distributions' operations under ``torch.inference_mode`` (Lightning's evaluation loops run in it).

Marginals, MBR decoding and relaxed samples are gradients of log Z, computed by autograd. Under
inference mode autograd records nothing, and a tensor made under it (an "inference tensor") cannot be
saved for a backward, even after the mode is left. ``autograd_ready`` runs an operation with inference
mode off, on a copy of the distribution whose inference tensors are cloned into normal ones (an
inference tensor never has a graph, so none is lost). Its results are normal tensors. Elsewhere the
operation runs as written, after a walk over the distribution's attributes that finds no inference
tensor (microseconds).
"""

from __future__ import annotations

import enum
import functools

import torch
from torch import Tensor


def autograd_ready(operation):
    """Decorate a distribution's operation (a method, or the function of a cached property)."""

    @functools.wraps(operation)
    def run(self, *args, **kwargs):
        if not torch.is_inference_mode_enabled() and not _holds_inference_tensor([self, *args], set()):
            return operation(self, *args, **kwargs)
        with torch.inference_mode(False):  # the other distribution of a divergence too
            memo = {}
            return operation(_cloned(self, memo), *[_cloned(arg, memo) for arg in args], **kwargs)

    return run


def _parts(value) -> list:
    """What ``value`` holds: a container's items, or the attributes of one of the engine's objects."""
    if isinstance(value, (tuple, list)):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    if type(value).__module__.startswith("zoo.") and hasattr(value, "__dict__") and not isinstance(
        value, (type, enum.Enum)
    ):
        return list(vars(value).values())
    return []


def _holds_inference_tensor(value, seen: set[int]) -> bool:
    if isinstance(value, Tensor):
        return value.is_inference()
    if id(value) in seen:
        return False
    seen.add(id(value))
    return any(_holds_inference_tensor(part, seen) for part in _parts(value))


def _cloned(value, memo: dict[int, object]):
    """``value`` with every inference tensor it holds cloned (call with inference mode off); the same
    object where it holds none."""
    if isinstance(value, Tensor):
        return value.clone() if value.is_inference() else value
    if id(value) in memo:
        return memo[id(value)]
    memo[id(value)] = value  # a cycle leads back to the object as it is
    parts = _parts(value)
    cloned = [_cloned(part, memo) for part in parts]
    if all(new is old for new, old in zip(cloned, parts)):
        return value
    if isinstance(value, tuple):
        out = type(value)._make(cloned) if hasattr(type(value), "_make") else type(value)(cloned)
    elif isinstance(value, list):
        out = cloned
    elif isinstance(value, dict):
        out = dict(zip(value, cloned))
    else:
        out = object.__new__(type(value))  # no __init__, no copy protocol: its attributes, cloned
        out.__dict__.update(zip(vars(value), cloned))
    memo[id(value)] = out
    return out
