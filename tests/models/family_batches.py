"""One small ragged batch of each kind the families read (word ids, 0/1 frames, feature frames) and
the small sizes their tests build models with. Imported by the model tests (tests/models is on sys.path)."""

from __future__ import annotations

import torch

SMALL = {"embedding_dim": 8, "hidden_dim": 8}


def batches() -> dict[str, dict[str, torch.Tensor]]:
    """{"tokens": ids in 1..19, "frames": 6 keys, "features": 3 dims}, two sequences each (seeded)."""
    torch.manual_seed(0)
    return {
        "tokens": {"tokens": torch.randint(1, 20, (2, 5)), "lengths": torch.tensor([5, 3])},
        "frames": {"frames": (torch.rand(2, 5, 6) < 0.3).float(), "lengths": torch.tensor([5, 3])},
        "features": {"features": torch.randn(2, 7, 3), "lengths": torch.tensor([7, 4])},
    }
