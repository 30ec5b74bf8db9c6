"""Checkpoints written by an earlier release keep loading, with the same outputs.

``checkpoints/<name>/`` holds folders written by structured-zoo 0.1.0 (checkpoint format 1) and
``expected.json`` (a batch and the log-likelihoods that release computed). They are frozen: a later
release that changes the format or the models must still load them (``zoo.hub.pretrained`` upgrades old
formats) and reproduce the numbers. New formats add new folders; their config.json and
model.safetensors are never regenerated (README.md, the card, may be re-rendered with `zoo card`).
Written once by ``python tests/zoo/test_checkpoint_compat.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import zoo

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
FROZEN = {
    "v1-categorical-hmm-rank-space": ("hmm_categorical_n512_d64", "rank-space"),
    "v1-pcfg-low-rank": ("pcfg_nt10_pt20_d64", "low-rank"),
}


def _expected(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_frozen_checkpoint_loads_with_recorded_outputs(name):
    folder = CHECKPOINTS / name
    config = json.loads((folder / "config.json").read_text())
    assert config["zoo_format_version"] == 1 and config["zoo_version"] == "0.1.0"
    model = zoo.from_pretrained(folder)
    assert "vocab_sha256" not in config and model.vocab is None  # saved before vocabularies were
    expected = _expected(folder)
    batch = {key: torch.tensor(value) for key, value in expected["batch"].items()}
    with torch.no_grad():
        log_p = model.log_likelihood(batch)
    torch.testing.assert_close(log_p, torch.tensor(expected["log_likelihood"]), rtol=1e-5, atol=1e-5)


def write_frozen() -> None:
    """Write the folders once (refuses to overwrite: they record what this release wrote)."""
    for name, (arch, backend) in FROZEN.items():
        folder = CHECKPOINTS / name
        if folder.exists():
            raise SystemExit(f"{folder} exists: frozen checkpoints are never regenerated")
        torch.manual_seed(0)
        small = {"vocab_size": 20, "embedding_dim": 8, "hidden_dim": 8, "rank": 4}
        sizes = {"num_states": 8} if "hmm" in arch else {"num_nonterminals": 3, "num_preterminals": 4}
        model = zoo.create_model(arch, backend=backend, **small, **sizes).eval()
        model.save_pretrained(folder)
        batch = {"tokens": torch.randint(20, (3, 6)), "lengths": torch.tensor([6, 3, 4])}
        with torch.no_grad():
            log_p = model.log_likelihood(batch)
        record = {"batch": {k: v.tolist() for k, v in batch.items()}, "log_likelihood": log_p.tolist()}
        (folder / "expected.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    write_frozen()
