"""Checks of a batch's observations and ``lengths``, shared by every family.

Each error says what was expected and what was given. Values past each length are padding: they are
never checked and are replaced (0) before use, so results do not depend on them (docs/training-api.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.checks import check_lengths


def check_compute_dtype(model: torch.nn.Module) -> None:
    """A TypeError for a model with float16 parameters (``model.half()``, Lightning's ``16-true``), whose
    range is too small for the dynamic programs, saying what to use instead."""
    if any(p.dtype == torch.float16 for p in model.parameters()):
        raise TypeError(
            f"the {type(model).__name__} has float16 parameters (model.half()), whose range (largest "
            "65504) is too small for its dynamic programs: use model.float(), or model.to(torch.bfloat16) "
            "(the dynamic programs then run in float32; Lightning: precision='bf16-true' or 'bf16-mixed')"
        )


def batch_inputs(model: torch.nn.Module, batch: dict, key: str) -> tuple:
    """``batch[key]`` and ``batch["lengths"]`` for ``model`` to read; a KeyError names a missing key and
    the model, a ValueError an empty batch (B = 0), a TypeError a float16 model."""
    owner = type(model).__name__
    check_compute_dtype(model)
    for name in (key, "lengths"):
        if name not in batch:
            raise KeyError(f"{owner} needs batch[{name!r}]; the batch has keys {sorted(batch)}")
    values = batch[key]
    if getattr(values, "ndim", 0) >= 1 and values.shape[0] == 0:
        shape = tuple(values.shape)
        raise ValueError(f"{owner} got an empty batch: batch[{key!r}] has shape {shape} (B = 0)")
    return values, batch["lengths"]


def checked_lengths(values: Tensor, lengths) -> tuple[Tensor, Tensor]:
    """``lengths`` (a tensor or list) as a long (B,) tensor on ``values``' device, each in 1..T, for
    ``values`` B x T (x ...); and the B x T mask of the positions inside them."""
    B, T = values.shape[:2]
    lengths = check_lengths(lengths, B, T, values.device)
    return lengths, torch.arange(T, device=values.device) < lengths.unsqueeze(-1)


def _first(bad: Tensor, values: Tensor, unit: str) -> str:
    """The first flagged entry of ``values``, where it is and how many more there are ("-1 at sequence
    0, position 3 and 2 more")."""
    index = tuple(bad.nonzero()[0].tolist())
    where = ", ".join(f"{name} {i}" for name, i in zip(("sequence", unit, "key"), index))
    more = int(bad.sum()) - 1
    return f"{values[index].item()} at {where}" + (f" and {more} more" if more else "")


def token_ids(tokens, lengths, vocab_size: int) -> tuple[Tensor, Tensor]:
    """Word ids B x T (an integer tensor, ids in 0..vocab_size-1 within each length) as long with 0
    past each length, and the checked lengths (B,)."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor of word ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape B x T (a batch of id sequences), got {tuple(tokens.shape)}")
    lengths, inside = checked_lengths(tokens, lengths)
    bad = inside & ((tokens < 0) | (tokens >= vocab_size))
    if bool(bad.any()):
        raise ValueError(
            f"token ids must lie in 0..{vocab_size - 1} (0..vocab_size-1) within each length, got "
            f"{_first(bad, tokens, 'position')}; padding past a length may hold anything (e.g. -1)"
        )
    return torch.where(inside, tokens, 0).long(), lengths


def binary_frames(frames, lengths, num_keys: int) -> tuple[Tensor, Tensor]:
    """Frames B x T x K (values 0 or 1 within each length) with 0 past each length, and the checked
    lengths (B,)."""
    if not isinstance(frames, Tensor) or frames.dim() != 3 or frames.shape[-1] != num_keys:
        shape = tuple(frames.shape) if isinstance(frames, Tensor) else type(frames).__name__
        raise ValueError(f"frames must have shape B x T x {num_keys} (num_keys), got {shape}")
    lengths, inside = checked_lengths(frames, lengths)
    inside = inside.unsqueeze(-1)
    bad = inside & (frames != 0) & (frames != 1)
    if bool(bad.any()):
        raise ValueError(
            "frames must hold 0 or 1 (a key off or on) within each length, got "
            f"{_first(bad, frames, 'frame')}; padding past a length may hold anything"
        )
    return torch.where(inside, frames, 0), lengths
