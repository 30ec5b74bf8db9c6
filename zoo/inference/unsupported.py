"""What the engine cannot run on, refused with a message where PyTorch would fail deep inside it or, worse,
answer wrongly: meta tensors, ``torch.func.vmap``, and for linear chains the other function transforms and
forward-mode AD.

The dynamic programs read values on the host (lengths, checks of -inf and underflow, the fallbacks they
decide), which a meta tensor does not have and vmap cannot batch. The chains' fast paths are
``torch.autograd.Function``s of reverse mode, and without a gradient run under ``torch.inference_mode``:
under forward-mode AD (``torch.autograd.forward_ad``) log Z came back without its tangent, a derivative of
0 and no error. Semi-Markov chains and trees are plain autograd: ``torch.func.grad`` / ``jacrev`` and
forward-mode AD work there.
"""

from __future__ import annotations

import torch.autograd.forward_ad as forward_ad
from torch import Tensor
from torch._C import _functorch


def refuse_unreadable(value: Tensor) -> None:
    """NotImplementedError for a tensor whose values the engine cannot read: a meta tensor, or one
    batched by ``torch.func.vmap`` (called where a container first reads a potential's values)."""
    if value.is_meta:
        raise NotImplementedError(
            "the potentials are meta tensors: the dynamic programs read values (lengths, -inf entries, "
            "their numerical checks), which a meta tensor does not have; use real tensors (a small batch "
            "of zeros gives the output shapes)"
        )
    if _functorch.is_batchedtensor(value):
        raise NotImplementedError(
            "torch.func.vmap is not supported: the dynamic programs read values on the host (lengths, "
            "numerical checks) that vmap cannot batch; give the batch as the potentials' first dimension B"
        )


def refuse_untracked_transforms(tensors: list) -> None:
    """NotImplementedError where the potentials (``tensors``, other values ignored) of a linear chain carry
    a ``torch.func`` transform or a forward-mode tangent (other structures follow them)."""
    tensors = [t for t in tensors if isinstance(t, Tensor)]
    if any(_functorch.is_functorch_wrapped_tensor(t) for t in tensors):
        raise NotImplementedError(
            "LinearChain does not support torch.func transforms (grad, jacrev, jvp, ...): its fast paths are "
            "reverse-mode autograd Functions; use torch.autograd.grad or .backward() (semi-Markov chains and "
            "trees support torch.func.grad)"
        )
    if any(forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise NotImplementedError(
            "LinearChain does not support forward-mode AD (torch.autograd.forward_ad): its fast paths would "
            "drop the tangent; use reverse mode (torch.autograd.grad), or torch.autograd.functional.jvp, "
            "which computes a Jacobian-vector product by reverse mode"
        )
