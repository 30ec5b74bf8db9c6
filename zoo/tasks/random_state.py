"""The random number generators' states of every rank, kept in a checkpoint, so that a resumed run draws
what an uninterrupted one would: dropout masks, a randomized backend's kept states, Gumbel noise.

A state is plain values and tensors (a checkpoint stays loadable with ``torch.load(weights_only=True)``):
``{"torch": ByteTensor, "cuda": ByteTensor or None, "python": random.getstate(), "numpy": {...}}``;
``cuda`` is the current device's generator, the one a DDP process draws from.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def current_state() -> dict[str, Any]:
    """This process's generators: torch's CPU one, the current CUDA device's (where CUDA is in use),
    Python's ``random`` and NumPy's global one."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()  # noqa: NPY002 (the global one, kept)
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
    }  # fmt: skip


def set_state(state: dict[str, Any]) -> None:
    """Set this process's generators to ``state`` (``current_state``'s)."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["position"], n["has_gauss"], n["gauss"]))  # noqa: NPY002


def every_rank_state(trainer) -> list[dict[str, Any]]:
    """The states of all ranks, rank order (a collective under DDP: every rank saves a checkpoint at
    the same point, as Lightning's ``save_checkpoint`` requires)."""
    state = current_state()
    if trainer is None or trainer.world_size == 1:
        return [state]
    states: list[dict[str, Any] | None] = [None] * trainer.world_size
    torch.distributed.all_gather_object(states, state)
    return states


def this_rank_state(states: list[dict[str, Any]] | None, trainer) -> dict[str, Any] | None:
    """This rank's state among a checkpoint's ``states`` when ``trainer`` resumes fitting from it; None
    where it does not (weights loaded for evaluation or a new run), where the checkpoint has none, or
    where another number of ranks wrote it (their batches were not this run's, so no state would make
    it draw as the run that wrote it)."""
    if trainer is None or trainer.state.fn != "fit" or not states or len(states) != trainer.world_size:
        return None
    return states[trainer.global_rank]
