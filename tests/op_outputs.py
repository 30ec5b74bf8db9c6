"""``OutputSizes``: what every aten operation run inside it outputs (forward and backward), counted
deterministically: the elements written in all and the largest single output. Tests of work that must
grow linearly and of tensors that must never be N x N."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OutputSizes(TorchDispatchMode):
    """``written``: the elements of every output; ``largest``: the most elements of one output."""

    def __init__(self):
        super().__init__()
        self.written = self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.written += x.numel()
                self.largest = max(self.largest, x.numel())
        return out
