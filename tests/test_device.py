"""Every model family x backend on an explicit device (``--device``; cpu by default, cuda on a GPU):
the user's path of ``model.to(device)`` and a batch moved there. The log-likelihood and every
parameter's gradient, in float32 on the device, equal float64 on the CPU; outputs stay on the device.
Randomized backends keep every state, which makes them exact (their draws differ between devices);
the VAE's ELBO is sampled, so there the checks are placement and finiteness."""

from __future__ import annotations

import pytest
import torch

from zoo.models import PCFG, BernoulliHMM, CategoricalHMM, GaussianHSMM, StructuredVAE

V, N = 5, 3
SMALL = {"embedding_dim": 8, "hidden_dim": 8, "dropout": 0.0}
BACKENDS = {
    "exact": {},
    "low-rank": {"rank": 2},
    "rank-space": {"rank": 2},
    "randomized": {"k1": N, "k2": 0},
}


def build(family: str, backend: str):
    extra = BACKENDS[backend]
    if family == "categorical-hmm":
        return CategoricalHMM(V, N, backend=backend, **SMALL, **extra)
    if family == "bernoulli-hmm":
        return BernoulliHMM(N, num_keys=4, backend=backend, **SMALL, **extra)
    if family == "gaussian-hsmm":
        return GaussianHSMM(N, 2, 3, backend=backend, **SMALL, **extra)
    if family == "pcfg":
        kw = {"k1": 2, "k2": 0} if backend == "randomized" else extra
        return PCFG(V, 2, 3, backend, **SMALL, **kw)
    return StructuredVAE(
        num_states=N, backend=backend, vocab_size=V, encoder_layers=1, encoder_dim=32, encoder_heads=2,
        max_positions=16, state_dim=8, decoder_dim=8, decoder_hidden=8, dropout=0.0, eval_samples=4, **extra,
    )  # fmt: skip


def batch(family: str) -> dict:
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([6, 3, 4])
    live = (torch.arange(6) < lengths[:, None]).unsqueeze(-1)
    if family == "bernoulli-hmm":
        return {"frames": (torch.rand(3, 6, 4, generator=g) < 0.4).float() * live, "lengths": lengths}
    if family == "gaussian-hsmm":
        return {"features": torch.randn(3, 6, 2, generator=g) * live, "lengths": lengths}
    return {"tokens": torch.randint(1, V, (3, 6), generator=g) * live.squeeze(-1), "lengths": lengths}


CASES = [
    (family, backend)
    for family in ("categorical-hmm", "bernoulli-hmm", "gaussian-hsmm", "pcfg", "vae")
    for backend in BACKENDS
    if not (family == "vae" and backend == "rank-space")  # the VAE's q has no rank-space backend
]


def loss_and_grads(model, data: dict, generator=None):
    model.zero_grad()
    out = (
        model.elbo(data, generator)["elbo"]
        if isinstance(model, StructuredVAE)
        else model.log_likelihood(data)
    )
    out.sum().backward()
    return out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family,backend", CASES)
def test_log_likelihood_and_gradients_on_the_device_equal_float64_on_the_cpu(family, backend, device):
    with torch.device("cpu"):  # the reference never takes the default device of --device cuda
        torch.manual_seed(0)
        reference = build(family, backend).double().train()
        data = batch(family)
    model = build(family, backend).train()
    model.load_state_dict(reference.state_dict())
    model.to(device)
    moved = {k: v.to(device) for k, v in data.items()}
    seed = torch.Generator(device="cpu").manual_seed(2), torch.Generator(device=device).manual_seed(2)
    want, want_grads = loss_and_grads(reference, data, seed[0])
    got, got_grads = loss_and_grads(model, moved, seed[1])
    assert got.device.type == device.type and got.dtype == torch.float32
    assert torch.isfinite(got).all()
    if family == "vae":  # its ELBO draws relaxed samples, which differ between dtypes and devices
        assert all(torch.isfinite(g).all() for g in got_grads.values())
        return
    torch.testing.assert_close(got.cpu().double(), want, rtol=2e-5, atol=2e-4)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in got_grads.items():
        assert grad.device.type == device.type, name
        torch.testing.assert_close(grad.cpu().double(), want_grads[name], rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize("family", sorted({family for family, _ in CASES}))
def test_lengths_may_stay_on_the_cpu(family, device):
    """A collate function's lengths often stay on the CPU while the observations move to the GPU."""
    with torch.device("cpu"):
        torch.manual_seed(0)
        model = build(family, "exact").train()
        data = batch(family)
    model.to(device)
    moved = {k: v if k == "lengths" else v.to(device) for k, v in data.items()}
    got, grads = loss_and_grads(model, moved, torch.Generator(device=device).manual_seed(2))
    assert got.device.type == device.type and torch.isfinite(got).all()
    assert grads and all(torch.isfinite(g).all() for g in grads.values())
