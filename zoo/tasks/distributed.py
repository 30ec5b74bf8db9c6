"""Closing a finished run's ``torch.distributed`` process group."""

from __future__ import annotations

import torch


def close_process_group() -> None:
    """Wait for every rank, then destroy the default process group (no-op without one).

    Called after a run ends, while the interpreter is whole. Left to Lightning's exit handler, gloo's
    teardown can race the other ranks' exit and abort a finished run with SIGABRT ("terminate called
    without an active exception"), so a script or CI job sees a failure after all work was saved.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()
