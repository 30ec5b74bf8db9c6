"""What the zoo tests share: small versions of registered architectures and a batch for each family (both
from the families' declarations, ``zoo.hub.families``)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

import zoo
from zoo.hub.families import family
from zoo.hub.registry import architecture

# Backend-specific arguments scaled to the families' test sizes (``Family.test_sizes``).
SMALL_BACKEND = {"low-rank": {"rank": 3}, "rank-space": {"rank": 3}, "randomized": {"k1": 1, "k2": 1}}


def small_overrides(name: str, backend: str) -> dict:
    """Overrides of architecture ``name`` with ``backend`` that make it tiny."""
    sizes = family(architecture(name).class_path.rsplit(".", 1)[-1]).test_sizes
    shortlist = {"decoder_vocab": 6} if "decoder_vocab" in architecture(name).config else {}
    return {**sizes, **shortlist, **SMALL_BACKEND.get(backend, {})}


def fit_inputs(model, seed: int = 0):
    """``model`` with what ``zoo fit`` fits from data before training: an HSMM's input projection
    (a random mean and matrix, as a data module's ``fit_feature_transform`` would give), a VAE decoder's
    shortlist (from random token counts)."""
    decoder = getattr(model, "decoder", None)
    if getattr(decoder, "shortlist", None) is not None:
        counts = torch.randint(100, (decoder.vocab_size,), generator=torch.Generator().manual_seed(seed))
        decoder.fit_shortlist(counts)
    projection = getattr(model, "input_projection", None)
    if projection is not None:
        g = torch.Generator().manual_seed(seed)
        projection.set(
            torch.randn(projection.input_dim, generator=g),
            torch.randn(projection.input_dim, projection.output_dim, generator=g) / projection.input_dim**0.5,
        )
    return model


def small_model(name: str, backend: str, **overrides):
    """A tiny model of architecture ``name`` with ``backend``, its data-fitted parts fitted."""
    return fit_inputs(
        zoo.create_model(name, backend=backend, **{**small_overrides(name, backend), **overrides})
    )


def example_batch(model, seed: int = 0) -> dict:
    """A ragged batch of 3 sequences the model scores (its family's ``example_batch``)."""
    return family(type(model).__name__).example_batch(model, torch.Generator().manual_seed(seed))


def scores(model, batch: dict) -> torch.Tensor:
    """log p of each sequence in eval mode, without gradients (a seeded draw for random evaluation)."""
    model.eval()
    with torch.no_grad():
        return model.log_likelihood(batch, generator=torch.Generator().manual_seed(1))


class RecordVocab(pl.Callback):
    """Records the data's and the model's vocabularies when fitting starts (class attribute ``seen``)."""

    seen: list = []

    def on_fit_start(self, trainer, pl_module):
        RecordVocab.seen = [trainer.datamodule.vocab, pl_module.model.vocab]
