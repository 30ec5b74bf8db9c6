"""What the zoo tests share: small versions of registered architectures and a batch for each family."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

import zoo
from zoo.hub.registry import architecture

# Per family: constructor overrides that shrink any architecture to test size (sizes, and the
# backend-specific arguments scaled to them). A new family adds its line here and in example_batch.
SMALL = {
    "CategoricalHMM": {"vocab_size": 17, "num_states": 6, "embedding_dim": 8, "hidden_dim": 8},
    "BernoulliHMM": {"num_keys": 5, "num_states": 6, "embedding_dim": 8, "hidden_dim": 8},
    "PCFG": {
        "vocab_size": 17,
        "num_nonterminals": 3,
        "num_preterminals": 4,
        "embedding_dim": 8,
        "hidden_dim": 8,
    },
    "GaussianHSMM": {
        "num_states": 4,
        "max_duration": 3,
        "input_dim": 5,
        "feature_dim": 3,
        "embedding_dim": 8,
        "hidden_dim": 8,
    },
    "StructuredVAE": {  # a random GPT-2 encoder (no Hub), 4 importance samples
        "num_states": 4,
        "vocab_size": 17,
        "pretrained_encoder": None,
        "encoder_layers": 1,
        "encoder_dim": 8,
        "encoder_heads": 2,
        "max_positions": 8,
        "state_dim": 8,
        "decoder_dim": 8,
        "decoder_hidden": 8,
        "eval_samples": 4,
    },
}
SMALL_BACKEND = {"low-rank": {"rank": 3}, "rank-space": {"rank": 3}, "randomized": {"k1": 1, "k2": 1}}


def small_overrides(name: str, backend: str) -> dict:
    """Overrides of architecture ``name`` with ``backend`` that make it tiny."""
    family = architecture(name).class_path.rsplit(".", 1)[-1]
    if family not in SMALL:
        raise KeyError(f"tests/zoo/zoo_testlib.py: add test sizes for the family {family} to SMALL")
    shortlist = {"decoder_vocab": 6} if "decoder_vocab" in architecture(name).config else {}
    return {**SMALL[family], **shortlist, **SMALL_BACKEND.get(backend, {})}


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
    """A ragged batch of 3 sequences the model scores (tokens, 0/1 frames or raw feature frames)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 4])
    family = type(model).__name__
    if family in ("CategoricalHMM", "PCFG", "StructuredVAE"):
        tokens = torch.randint(model.config["vocab_size"], (3, 5), generator=g)
        return {"tokens": tokens, "lengths": lengths}
    if family == "BernoulliHMM":
        frames = (torch.rand(3, 5, model.config["num_keys"], generator=g) < 0.3).float()
        return {"frames": frames, "lengths": lengths}
    if family == "GaussianHSMM":
        features = torch.randn(3, 5, model.config["input_dim"] or model.config["feature_dim"], generator=g)
        return {"features": features, "lengths": lengths}
    raise KeyError(f"tests/zoo/zoo_testlib.py: add an example batch for the family {family}")


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
