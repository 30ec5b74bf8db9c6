"""The aggregated posterior's state usage (Mathieu et al. 2019; Fu et al. 2022, Fig. 2): one exact
sample of q(z | y) for every sentence, then how often each of the N states occurs over all tokens.
A collapsed posterior leaves many states unused (frequency 0). ``posterior_collapse`` measures the
same from q's exact marginals and MAP sequences: how many distinct states a sentence's MAP labelling
uses, and how much a token's state depends on its sentence."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from zoo.extras import pyplot


def _evaluation_batches(model, batches: Iterable[dict], max_batches: int | None) -> Iterator[dict]:
    """The first ``max_batches`` of ``batches`` moved to the model's device, the model in eval mode
    meanwhile (its mode restored after)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            yield {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    finally:
        model.train(was_training)


@torch.no_grad()
def aggregated_state_usage(
    model, batches: Iterable[dict], seed: int = 0, max_batches: int | None = None
) -> Tensor:
    """Counts (N,) long of the states in one sample of q per sentence (``model.sample_states``), on the
    model's device (batches are moved there)."""
    generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    counts = torch.zeros(model.num_states, dtype=torch.long, device="cpu")
    for batch in _evaluation_batches(model, batches, max_batches):
        states = model.sample_states(batch, generator).flatten()
        counts += torch.bincount(states[states >= 0].cpu(), minlength=model.num_states)
    return counts


@torch.no_grad()
def posterior_collapse(model, batches: Iterable[dict], max_batches: int | None = None) -> dict[str, float]:
    """The collapse diagnostics of q(z | y) (``zoo.metrics.PosteriorUsage``: distinct MAP states per
    sentence, sentence-state and token-state information in nats, states used) over the sentences of
    ``batches``, q computed exactly."""
    from zoo.metrics import PosteriorUsage

    usage = PosteriorUsage(model.num_states)
    for batch in _evaluation_batches(model, batches, max_batches):
        marginals, best = model.posterior_summary(batch)
        usage.update(marginals.cpu(), best.cpu(), batch["lengths"].cpu())
    if not usage.update_called:
        raise ValueError("posterior_collapse needs at least one batch")
    return {name: float(value) for name, value in usage.compute().items()}


def plot_state_usage(counts: Tensor, path: str | os.PathLike, title: str = "") -> None:
    """Save the states' frequencies, sorted from most to least used, as an image (PNG by suffix)."""
    plt = pyplot("plotting the state usage")
    counts = counts.detach().cpu()
    if counts.dim() != 1 or counts.sum() <= 0:
        raise ValueError(f"counts must be (N,) with a positive total, got shape {tuple(counts.shape)}")
    frequency = (counts.double() / counts.sum()).sort(descending=True).values
    unused = int((counts == 0).sum())
    fig, ax = plt.subplots(figsize=(5, 2.6), dpi=100)
    ax.bar(range(len(frequency)), frequency.numpy(), width=1.0, color="#3b6ea5")
    ax.set_xlabel("states, most to least used")
    ax.set_ylabel("frequency")
    ax.set_title(f"{title}{' - ' if title else ''}{unused} of {len(counts)} states unused", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
