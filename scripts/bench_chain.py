"""Benchmark of the linear-chain engine: log Z + backward, wall time and peak memory.

Every measured call is ``log_partition.sum().backward()`` with respect to the potentials' parameters.
Each configuration runs in a fresh spawned process whose address space is capped at ``MEMORY_CAP``:
one configuration's memory cannot pollute the next, and an out-of-memory configuration fails cleanly
(recorded as "OOM") instead of freezing the machine. Configurations whose footprint, computed from their
shapes, exceeds ``SKIP_ABOVE`` are not run ("OOM (skipped: needs ~X GB)").

Timing: one warm-up call, then up to ``Plan.repeats`` timed calls that fit in ``Plan.budget_s`` (none when
the warm-up alone exceeds it: then the warm-up is the measurement); the median is reported. Peak memory:
the growth of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS just
before a call, after freed heap memory went back to the OS (malloc_trim); the maximum over the timed
calls is reported. Blocks of 128 KiB or more are mmapped (MALLOC_MMAP_THRESHOLD_), so freed tensors leave
RSS at once and the peak measures live memory, not allocator slack. Linux only.

Tables 4 to 6 and 9 time peer libraries (the ``bench`` extra, plus supar, see README "Set-up") on one thread:
pytorch-crf's and supar's linear-chain CRFs (log Z + backward) and pomegranate's ``DenseHMM`` forward
(log Z under ``torch.no_grad()``), and the Viterbi decoders of pytorch-crf, supar and torch-struct
(table 9). Their calls take milliseconds, so each shape's methods share one
process and take turns (``benchlib.measure_interleaved``), on the same potentials, back to back with
glibc's default allocator settings, as a caller's loop runs them. A peer that is not
installed is reported as such, not run.

Usage (from the repository root):
    python scripts/bench_chain.py            # the full run (about 30 minutes on 2 cores)
    python scripts/bench_chain.py --quick    # a small smoke test (about 2 minutes on our 2-core CPU)
    python scripts/bench_chain.py --only 4 5 6 9  # some tables alone (the peer baselines: a few minutes)
    python scripts/bench_chain.py --write    # also write docs/benchmarks.md (every table: no --only)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

import zoo.inference.packed as packed
from zoo.inference import DenseChain, EmbeddingChain, LinearChain, LowRankChain, RankSpaceChain, RDPOptions
from zoo.inference.chain import scaled
from zoo.inference.chain.rank_space import rank_space_scaled, rank_transition, streams

from benchlib import (
    GB,
    MB,
    REPO,
    Measurement,
    Section,
    cells,
    describe,
    num,
    paragraphs,
    prepare_environment,
    ratio,
    run_group_in_child,
    run_header,
    run_in_child,
    snapshot_zoo,
    speedup,
    table,
    verdict,
)
from report import write_section

SKIP_ABOVE = 16e9  # configurations needing more than this (from their shapes) are not run, bytes
FULL_LENGTH_LIMIT_S = 300  # table 2 times exact at full length only when it is estimated to take less
EMBED_DIM = 64  # state embeddings (randomized) and feature-map inputs (low-rank)
VOCAB = 1000  # observation vocabulary of the rank-space HMM
DOCS = REPO / "docs" / "benchmarks.md"


# --- configurations ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    B: int
    T: int
    N: int
    R: int = 0  # rank (low-rank, rank-space)
    K: int = 0  # kept states per position (randomized)


@dataclass(frozen=True)
class Job:
    """One configuration, run in its own process; ``case`` names a step builder in ``CASES``."""

    case: str
    shape: Shape
    model: str = ""  # "zoo" case: a key of MODELS
    backend: str | None = None  # "zoo" case: None = the container's own backend
    from_raw: bool = False  # build the container from raw parameters inside the timed call
    precompute_only: bool = False  # time only raw parameters -> container -> once-per-batch product
    threads: int | None = None  # torch threads of the measured call, pinned to as many CPUs (None: THREADS)
    grad: bool = True  # False: log Z alone, under torch.no_grad(), from potentials that need no grad
    spread: float = 1.0  # the unary (emission) log-potentials' standard deviation (table 6)
    cases: tuple[str, ...] = ()  # a group: these cases measured in one process, taking turns (not ``case``)


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # table 1: N
    torch_struct: Shape  # torch-struct next to exact, at a shape where it fits
    big_batch: Shape  # table 2
    exact_steps: tuple[int, int]  # table 2: exact is measured at these T and extrapolated linearly
    memory_N: int  # table 3
    repeats: int
    budget_s: float
    crf_sizes: tuple[int, ...]  # table 4: N, at B x T = crf_batch
    crf_batch: tuple[int, int]
    hmm_sizes: tuple[int, ...]  # table 5: N, each at B = hmm_batches and T = hmm_length
    hmm_batches: tuple[int, ...]
    hmm_length: int
    peer_repeats: int  # tables 4 to 6: rounds in which every method runs once, within peer_budget_s
    peer_budget_s: float
    spreads: tuple[float, ...]  # table 6: emission standard deviations (N, B: the first of table 5's)
    rank_shapes: tuple[Shape, ...]  # table 7: rank-space chains, H against streamed
    rank_threads: tuple[int, ...]  # table 7: torch threads (pinned to as many CPUs)
    packed_sizes: tuple[int, ...]  # table 8: exact HMMs of N states, each at B = packed_batches
    packed_batches: tuple[int, ...]
    packed_low_rank: tuple[Shape, ...]  # table 8: low-rank chains (their T is packed_length too)
    packed_length: int


FULL = Plan(
    sizes=(256, 1024, 4096, 16384),
    torch_struct=Shape(1, 32, 256),
    big_batch=Shape(64, 64, 16384, R=2048),
    exact_steps=(4, 12),
    memory_N=10000,
    repeats=3,
    budget_s=40.0,
    crf_sizes=(16, 32, 128),
    crf_batch=(32, 50),
    hmm_sizes=(64, 256, 1024),
    hmm_batches=(16, 8, 4),
    hmm_length=100,
    peer_repeats=30,
    peer_budget_s=15.0,
    spreads=(1.0, 3.0, 10.0, 30.0, 100.0),
    rank_shapes=(
        Shape(8, 32, 16384, R=4096),  # the paper's PTB HMM (Yang et al. 2022) at its 256-token batches
        Shape(8, 32, 16384, R=2048),
        Shape(32, 32, 16384, R=2048),
        Shape(8, 32, 8192, R=1024),
        Shape(8, 32, 4096, R=512),
    ),
    rank_threads=(1, 2),
    packed_sizes=(512, 1024, 2048),
    packed_batches=(1, 4, 16, 64),
    packed_low_rank=(Shape(4, 100, 2048, R=512), Shape(16, 100, 2048, R=512)),  # the music LHMM recipes'
    packed_length=100,
)
QUICK = Plan(
    sizes=(256, 1024),
    torch_struct=Shape(1, 32, 64),
    big_batch=Shape(8, 16, 2048, R=256),
    exact_steps=(4, 8),
    memory_N=2000,
    repeats=1,
    budget_s=5.0,
    crf_sizes=(16,),
    crf_batch=(32, 50),
    hmm_sizes=(64, 256),
    hmm_batches=(16,),
    hmm_length=100,
    peer_repeats=5,
    peer_budget_s=1.0,
    spreads=(1.0, 30.0),
    rank_shapes=(Shape(8, 16, 8192, R=2048), Shape(64, 8, 1024, R=64)),
    rank_threads=(1,),
    packed_sizes=(1024,),
    packed_batches=(4,),
    packed_low_rank=(Shape(4, 65, 1024, R=512),),
    packed_length=65,
)


# --- models: raw parameters -> container arguments -> container ---------------------------------------
@dataclass(frozen=True)
class Model:
    raw: Callable[[Shape], tuple[dict, dict]]  # (trainable raw parameters, constants)
    potentials: Callable[[dict, dict], tuple]  # raw -> the container's arguments
    container: Callable[..., object]
    once_per_batch: Callable[[object], Tensor] | None  # what the backend's DP computes once per batch


def hmm_raw(s: Shape) -> tuple[dict, dict]:
    return {"unary": torch.randn(s.B, s.T, s.N), "trans": torch.randn(s.N, s.N), "init": torch.randn(s.N)}, {}


def hmm_potentials(p: dict, c: dict) -> tuple:
    return p["unary"], p["trans"].log_softmax(-1), p["init"].log_softmax(-1)


def column_scaled(chain: DenseChain) -> Tensor:
    """exp(log Psi - column max): the probability-space matrix the exact shared-transition DP multiplies."""
    return (chain.transition - chain.transition.detach().amax(0)).exp()


def low_rank_raw(s: Shape) -> tuple[dict, dict]:
    params = {
        "unary": torch.randn(s.B, s.T, s.N),
        "emb_left": torch.randn(s.N, EMBED_DIM) / EMBED_DIM**0.5,
        "emb_right": torch.randn(s.N, EMBED_DIM) / EMBED_DIM**0.5,
        "init": torch.randn(s.N),
    }
    return params, {"projection": torch.randn(EMBED_DIM, s.R)}


def low_rank_potentials(p: dict, c: dict) -> tuple:
    """Positive features exp(x @ Omega) of the state embeddings, Omega a random Gaussian projection."""
    left, right = ((p[k] @ c["projection"]).exp() for k in ("emb_left", "emb_right"))
    return p["unary"], left, right, p["init"].log_softmax(-1)


def rank_space_raw(s: Shape) -> tuple[dict, dict]:
    params = {
        "start": torch.randn(s.N),
        "U": torch.randn(s.N, s.R),
        "V": torch.randn(s.N, s.R),
        "W": torch.randn(VOCAB, s.R),
    }
    return params, {"obs": torch.randint(VOCAB, (s.B, s.T))}


def rank_space_potentials(p: dict, c: dict) -> tuple:
    """U rows and V columns are distributions; emission = log p(x_t | r), gathered at the observations."""
    emission = p["W"].log_softmax(0)[c["obs"]]
    return p["start"].softmax(0), p["U"].softmax(-1), p["V"].softmax(0), emission


def embedding_raw(s: Shape) -> tuple[dict, dict]:
    params = {
        "unary": torch.randn(s.B, s.T, s.N),
        "states": torch.randn(s.N, EMBED_DIM) / EMBED_DIM**0.25,  # e_i . e_j ~ N(0, 1)
        "init": torch.randn(s.N),
    }
    return params, {}


def embedding_potentials(p: dict, c: dict) -> tuple:
    return p["unary"], p["states"], p["init"].log_softmax(-1)


def crf_raw(s: Shape) -> tuple[dict, dict]:
    return {"unary": torch.randn(s.B, s.T, s.N), "trans": torch.randn(s.N, s.N), "init": torch.randn(s.N)}, {}


def crf_potentials(p: dict, c: dict) -> tuple:
    """A tagging CRF: unnormalized Gaussian scores throughout."""
    return p["unary"], p["trans"], p["init"]


MODELS = {
    "hmm": Model(hmm_raw, hmm_potentials, DenseChain, column_scaled),
    "low-rank": Model(low_rank_raw, low_rank_potentials, LowRankChain, LowRankChain.scaled_left),
    "rank-space": Model(rank_space_raw, rank_space_potentials, RankSpaceChain, rank_transition),
    "embedding": Model(embedding_raw, embedding_potentials, EmbeddingChain, None),
    "crf": Model(crf_raw, crf_potentials, DenseChain, column_scaled),
}


def leaf_potentials(model: Model, shape: Shape, grad: bool = True, spread: float = 1.0) -> list[Tensor]:
    """The container's arguments as leaf tensors requiring grad unless ``grad`` is False (parameter
    transforms done up front), the first (the unary) times ``spread``."""
    params, consts = model.raw(shape)
    with torch.no_grad():
        unary, *rest = model.potentials(params, consts)
        return [x.detach().requires_grad_(grad) for x in (unary * spread, *rest)]


def clear_grads(leaves: list[Tensor]) -> None:
    for x in leaves:
        x.grad = None


# --- step builders: each returns a call that runs one log Z + backward --------------------------------
def zoo_step(job: Job) -> Callable[[], None]:
    model, s = MODELS[job.model], job.shape
    if job.from_raw:
        params, consts = model.raw(s)
        leaves = [x.requires_grad_() for x in params.values()]

        def build():
            return model.container(*model.potentials(params, consts))
    else:
        leaves = leaf_potentials(model, s, grad=job.grad, spread=job.spread)

        def build():
            return model.container(*leaves)

    options = None
    if job.backend == "randomized":
        generator = torch.Generator(torch.get_default_device()).manual_seed(0)
        options = RDPOptions(k1=s.K - 1, k2=1, proposal="local+global", generator=generator)

    def step():
        LinearChain(build(), backend=job.backend, options=options).log_partition.sum().backward()
        clear_grads(leaves)

    def no_grad_step():
        with torch.no_grad():
            _ = LinearChain(build(), backend=job.backend, options=options).log_partition

    def precompute():
        factors = build()
        outputs = [v for v in vars(factors).values() if isinstance(v, Tensor) and v.requires_grad]
        sum(x.sum() for x in [*outputs, model.once_per_batch(factors)]).backward()
        clear_grads(leaves)

    if not job.grad:
        return no_grad_step
    return precompute if job.precompute_only else step


def torch_struct_potentials(unary: Tensor, transition: Tensor, init: Tensor) -> Tensor:
    """Our HMM in torch-struct's layout: B x (T-1) x N x N edge potentials at [b, n, z_{n+1}, z_n]."""
    edges = transition.T[None, None] + unary[:, 1:, :, None]
    first = (init + unary[:, 0])[:, None, :]  # z_1's init and unary, on the first edge's z_n axis
    return torch.cat([edges[:, :1] + first[:, None], edges[:, 1:]], 1)


def torch_struct_log_partition(edges: Tensor) -> Tensor:
    from torch_struct import LinearChainCRF

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*arg_constraints")
        return LinearChainCRF(edges).partition


def torch_struct_step(job: Job) -> Callable[[], None]:
    with torch.no_grad():
        edges = torch_struct_potentials(*leaf_potentials(MODELS["hmm"], job.shape))
    edges.requires_grad_()

    def step():
        torch_struct_log_partition(edges).sum().backward()
        edges.grad = None

    return step


def lse_log_partition(unary: Tensor, transition: Tensor, init: Tensor) -> Tensor:
    """The textbook forward: alpha_t = logsumexp(alpha_{t-1}[:, :, None] + log Psi[None], 1) + unary_t."""
    alpha = init + unary[:, 0]
    for t in range(1, unary.shape[1]):
        alpha = torch.logsumexp(alpha[:, :, None] + transition[None], 1) + unary[:, t]
    return alpha.logsumexp(-1)


def lse_step(job: Job) -> Callable[[], None]:
    leaves = leaf_potentials(MODELS["hmm"], job.shape)

    def step():
        lse_log_partition(*leaves).sum().backward()
        clear_grads(leaves)

    return step


def matmul_step(job: Job) -> Callable[[], None]:
    """The dense products of an ideal shared-transition forward-backward: T-1 forward (B x N) @ (N x N),
    T-1 backward products with P^T, and one (N x (T-1)B) @ ((T-1)B x N) product for the gradient of P."""
    B, T, N = job.shape.B, job.shape.T, job.shape.N
    P = torch.rand(N, N) * (2 / N)  # rows sum to ~1: no overflow or denormals along the chain
    alphas, grads = torch.rand(T, B, N), torch.empty(T - 1, B, N)

    def step():
        for t in range(1, T):
            torch.matmul(alphas[t - 1], P, out=alphas[t])
        g = alphas[-1]
        for t in range(T - 1, 0, -1):
            grads[t - 1] = g
            g = g @ P.T
        alphas[:-1].reshape(-1, N).T @ grads.reshape(-1, N)

    return step


def forward_products_step(job: Job) -> Callable[[], None]:
    """The T-1 products (B x N) @ (N x N) of a shared-transition forward and nothing else, as the zoo
    runs them (``packed.RepeatedProduct``: packed once a call where that pays, else ``torch.mm``): table
    5's floor, no forward with these products takes less."""
    B, T, N = job.shape.B, job.shape.T, job.shape.N
    P = torch.rand(N, N) * (2 / N)  # rows sum to ~1: no overflow or denormals along the chain
    alphas = torch.rand(T, B, N)

    def step():
        times = packed.RepeatedProduct(P, B, T - 1)
        for t in range(1, T):
            times(alphas[t - 1], out=alphas[t])

    return step


def forced_products_step(force: bool) -> Callable[[Job], Callable[[], None]]:
    """Table 8: the zoo's call with every product by a shared matrix packed for oneDNN or every one
    ``torch.mm`` (``zoo.inference.packed.FORCE``, set before each call: the two take turns in a process)."""

    def build(job: Job) -> Callable[[], None]:
        step = zoo_step(job)

        def forced():
            packed.FORCE = force
            step()

        return forced

    return build


def rank_space_forward_step(streamed: bool) -> Callable[[Job], Callable[[], None]]:
    """Table 7: the rank-space log Z (+ backward unless ``job.grad`` is False) by one of its two forwards,
    forced (``zoo.inference.chain.rank_space``: ``LinearChain`` lets ``streams`` choose)."""

    def build(job: Job) -> Callable[[], None]:
        leaves = leaf_potentials(MODELS["rank-space"], job.shape, grad=job.grad)
        lengths = torch.full((job.shape.B,), job.shape.T)

        def log_z() -> Tensor:
            return scaled.log_partition(rank_space_scaled(RankSpaceChain(*leaves), streamed), lengths)

        def step():
            log_z().sum().backward()
            clear_grads(leaves)

        def no_grad_step():
            with torch.no_grad():
                log_z()

        return step if job.grad else no_grad_step

    return build


# --- peer libraries (tables 4 to 6): our potentials in each one's own layout ----------------------------
PEERS = {  # case: (distribution name, import name)
    "pytorch-crf": ("pytorch-crf", "torchcrf"),
    "supar": ("supar", "supar"),
    "pomegranate": ("pomegranate", "pomegranate"),
    "pytorch-crf viterbi": ("pytorch-crf", "torchcrf"),
    "supar viterbi": ("supar", "supar"),
    "torch-struct viterbi": ("torch-struct", "torch_struct"),
}
VITERBI_CASES = ("zoo viterbi", "pytorch-crf viterbi", "supar viterbi", "torch-struct viterbi")


def peer_installed(case: str) -> bool:
    return importlib.util.find_spec(PEERS[case][1]) is not None


def peer_label(case: str) -> str:
    name = PEERS[case][0]
    return f"{name} {importlib.metadata.version(name)}" if peer_installed(case) else name


def pytorch_crf_inputs(unary: Tensor, transition: Tensor, init: Tensor) -> tuple:
    """pytorch-crf's ``CRF`` holding our transition and init (its start transitions; end transitions 0), and
    its normalizer's inputs: time-major emissions (its default ``batch_first=False``) and an all-true mask."""
    from torchcrf import CRF

    B, T, N = unary.shape
    crf = CRF(N).to(unary.dtype)
    with torch.no_grad():
        crf.start_transitions.copy_(init)
        crf.transitions.copy_(transition)  # [i, j]: i -> j, as ours
        crf.end_transitions.zero_()
    emissions = unary.detach().transpose(0, 1).contiguous().requires_grad_(unary.requires_grad)
    return crf, emissions, torch.ones(T, B, dtype=torch.bool)


def pytorch_crf_log_partition(crf, emissions: Tensor, mask: Tensor) -> Tensor:
    """log Z alone: the private normalizer that ``CRF.forward`` subtracts from the gold score (the public
    call needs tags and also scores them)."""
    return crf._compute_normalizer(emissions, mask)


def supar_inputs(unary: Tensor, transition: Tensor, init: Tensor) -> tuple[Tensor, Tensor]:
    """supar's layout: scores B x T x N and one (N+1) x (N+1) transition whose last row is the start
    scores and last column the end scores (0 here)."""
    N, grad = unary.shape[-1], unary.requires_grad
    with torch.no_grad():
        trans = unary.new_zeros(N + 1, N + 1)
        trans[:-1, :-1] = transition
        trans[-1, :-1] = init
    return unary.detach().clone().requires_grad_(grad), trans.requires_grad_(grad)


def supar_log_partition(scores: Tensor, trans: Tensor) -> Tensor:
    from supar.structs import LinearChainCRF

    return LinearChainCRF(scores, trans).log_partition


def pomegranate_model(transition: Tensor, init: Tensor):
    """A ``DenseHMM`` with our log transition and log init as its edges and starts, ends log 1 = 0. Its
    constructor validates probabilities (rows in [0, 1], starts summing to 1 within 1e-6), so it is built
    in float64 and our log-potentials are then copied in, in their own dtype. Its N distributions are
    uninitialized placeholders: the forward reads precomputed emission log-likelihoods."""
    from pomegranate.distributions import Categorical
    from pomegranate.hmm import DenseHMM

    N, f64 = transition.shape[0], torch.float64
    hmm = DenseHMM(
        [Categorical() for _ in range(N)],
        edges=transition.detach().to(f64).exp(),
        starts=init.detach().to(f64).exp(),
        ends=torch.ones(N, dtype=f64),
    ).to(transition.dtype)
    with torch.no_grad():
        hmm.edges.copy_(transition)
        hmm.starts.copy_(init)
        hmm.ends.zero_()
    return hmm


def pomegranate_log_partition(hmm, unary: Tensor) -> Tensor:
    """What ``DenseHMM.log_probability`` computes from observations, here from per-state emission
    log-likelihoods: the forward table, then log-sum-exp of its last column plus the end scores."""
    forward = hmm.forward(emissions=unary)
    return torch.logsumexp(forward[:, -1] + hmm.ends, dim=1)


def pytorch_crf_step(job: Job) -> Callable[[], None]:
    crf, emissions, mask = pytorch_crf_inputs(*leaf_potentials(MODELS["crf"], job.shape, spread=job.spread))

    def step():
        pytorch_crf_log_partition(crf, emissions, mask).sum().backward()
        crf.zero_grad(set_to_none=True)
        emissions.grad = None

    return step


def supar_step(job: Job) -> Callable[[], None]:
    import supar.structs  # noqa: F401  (imported here, not in the warm-up call)

    scores, trans = supar_inputs(*leaf_potentials(MODELS["crf"], job.shape))

    def step():
        supar_log_partition(scores, trans).sum().backward()
        clear_grads([scores, trans])

    return step


def pomegranate_step(job: Job) -> Callable[[], None]:
    unary, transition, init = leaf_potentials(MODELS["hmm"], job.shape, grad=False, spread=job.spread)
    hmm = pomegranate_model(transition, init)

    def step():
        with torch.no_grad():
            pomegranate_log_partition(hmm, unary)

    return step



# --- Viterbi decoding (table 9): the best path of the same tagging CRF in each library ------------------
def path_scores(unary: Tensor, transition: Tensor, init: Tensor, paths: Tensor) -> Tensor:
    """(B,) scores of B x T state paths under a CRF: init + unaries + transitions (end scores 0)."""
    scores = init[paths[:, 0]] + unary.gather(2, paths[..., None]).squeeze(2).sum(1)
    return scores + transition[paths[:, :-1], paths[:, 1:]].sum(1)


def zoo_viterbi(unary: Tensor, transition: Tensor, init: Tensor) -> Tensor:
    with torch.no_grad():
        return LinearChain(DenseChain(unary, transition, init)).argmax


def pytorch_crf_viterbi(crf, emissions: Tensor, mask: Tensor) -> Tensor:
    with torch.no_grad():
        return torch.tensor(crf.decode(emissions, mask))  # its public decode: a list of B lists of tags


def supar_viterbi(scores: Tensor, trans: Tensor) -> Tensor:
    """supar's argmax: the autograd gradient of its max (so its scores need grad)."""
    from supar.structs import LinearChainCRF

    return LinearChainCRF(scores, trans).argmax


def torch_struct_viterbi(edges: Tensor) -> Tensor:
    """torch-struct's argmax (one-hot edges, from the gradient of its max), as states: z_1 from the first
    edge's z_n axis, z_2 .. z_T from every edge's z_{n+1} axis."""
    from torch_struct import LinearChainCRF

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*arg_constraints")
        parts = LinearChainCRF(edges).argmax
    return torch.cat([parts[:, :1].sum(2).argmax(-1), parts.sum(3).argmax(-1)], 1)


def viterbi_inputs(case: str, unary: Tensor, transition: Tensor, init: Tensor) -> tuple[Callable, tuple]:
    """The decoder of ``case`` and its inputs: the CRF of these potentials in its library's layout."""
    if case == "zoo viterbi":
        return zoo_viterbi, (unary, transition, init)
    if case == "pytorch-crf viterbi":
        return pytorch_crf_viterbi, pytorch_crf_inputs(unary, transition, init)
    if case == "supar viterbi":
        import supar.structs  # noqa: F401  (imported here, not in the warm-up call)

        return supar_viterbi, tuple(x.requires_grad_() for x in supar_inputs(unary, transition, init))
    return torch_struct_viterbi, (torch_struct_potentials(unary, transition, init).requires_grad_(),)


def viterbi_step(case: str) -> Callable[[Job], Callable[[], None]]:
    def build(job: Job) -> Callable[[], None]:
        decode, inputs = viterbi_inputs(case, *leaf_potentials(MODELS["crf"], job.shape, grad=False))
        return lambda: decode(*inputs)

    return build


CASES: dict[str, Callable[[Job], Callable[[], None]]] = {
    "zoo": zoo_step,
    "torch-struct": torch_struct_step,
    "lse": lse_step,
    "matmul": matmul_step,
    "products": forward_products_step,
    "pytorch-crf": pytorch_crf_step,
    "supar": supar_step,
    "pomegranate": pomegranate_step,
    "rank-space H": rank_space_forward_step(streamed=False),
    "rank-space streamed": rank_space_forward_step(streamed=True),
    "packed": forced_products_step(force=True),
    "torch.mm": forced_products_step(force=False),
    **{case: viterbi_step(case) for case in VITERBI_CASES},
}


def build_step(job: Job) -> Callable[[], None] | dict[str, Callable[[], None]]:
    """The measured call of a configuration, or a group's calls by case, each built from the same seed,
    hence the same potentials (run in its own process by ``benchlib.run_group_in_child``)."""
    if job.threads is not None:
        torch.set_num_threads(job.threads)
        cpus = sorted(os.sched_getaffinity(0))
        if job.threads < len(cpus):  # pinned: see INTERLEAVED_NOTE
            os.sched_setaffinity(0, cpus[-job.threads :])
    if not job.cases:
        return CASES[job.case](job)
    steps = {}
    for case in job.cases:
        torch.manual_seed(0)
        steps[case] = CASES[case](replace(job, case=case, cases=()))
    return steps


def footprint(job: Job) -> float | None:
    """Bytes a configuration needs, from its shapes, where that can exceed the machine (else None)."""
    s = job.shape
    if job.case == "lse":  # each step keeps its B x N x N sum for logsumexp's backward, plus temporaries
        return 4 * s.B * s.N**2 * (s.T + 2)
    if job.case == "torch-struct":
        # the log-semiring scan keeps B x (bins/2) x N^3 sums at its first level, half as many at each next
        # one, and logsumexp needs two first-level-sized temporaries on top
        bins = 2 ** math.ceil(math.log2(s.T - 1))
        return 4 * s.B * s.N**3 * (2 * bins - 1)
    return None


def flops(s: Shape) -> float:
    """Floating-point operations of ``matmul_step``: 3 (T-1) products of 2 B N^2 each."""
    return 3 * (s.T - 1) * 2 * s.B * s.N**2


# --- measurement, in the configuration's own process -------------------------------------------------
def run(job: Job, plan: Plan) -> Measurement:
    """Measure ``job`` in a fresh spawned process, or skip it when it obviously cannot fit."""
    need = footprint(job)
    if need is not None and need > SKIP_ABOVE:
        result = Measurement(status=f"OOM (skipped: needs ~{need / GB:,.0f} GB)")
    else:
        result = run_in_child(build_step, job, plan.repeats, plan.budget_s)
    log(job, result)
    return result


def log(job: Job, result: Measurement) -> None:
    label = f"{job.case} {job.model} {job.backend or ''}{' precompute' if job.precompute_only else ''}"
    label += f"{'' if job.grad else ' no-grad'}{f' {job.threads} thread(s)' if job.threads else ''}"
    print(f"  {label:40} {job.shape} -> {describe(result)}", file=sys.stderr, flush=True)


def run_group(job: Job, plan: Plan) -> dict[str, Measurement]:
    """Measure the cases of ``job.cases`` in one fresh process, taking turns (the peer tables: calls of
    milliseconds); a peer that is not installed is not run."""
    missing = {case for case in job.cases if case in PEERS and not peer_installed(case)}
    cases = tuple(case for case in job.cases if case not in missing)
    result = run_group_in_child(
        build_step, replace(job, cases=cases), plan.peer_repeats, plan.peer_budget_s, default_allocator=True
    )
    results = {
        case: Measurement(status="not installed") if case in missing
        else result if isinstance(result, Measurement) else result[case]
        for case in job.cases
    }  # fmt: skip
    for case, m in results.items():
        log(replace(job, case=case, cases=()), m)
    return results


def extrapolate(points: dict[int, Measurement], T: int) -> Measurement:
    """Time and peak memory linear in the number of steps T-1, through two measured lengths."""
    (t1, m1), (t2, m2) = sorted(points.items())
    if not (m1.ok and m2.ok):
        return Measurement(status=m2.status if m1.ok else m1.status)
    scale = (T - t2) / (t2 - t1)
    return Measurement(
        time_s=m2.time_s + scale * (m2.time_s - m1.time_s),
        peak_bytes=m2.peak_bytes + scale * (m2.peak_bytes - m1.peak_bytes),
    )


# --- correctness check ---------------------------------------------------------------------------------
def check_log_partition(N: int = 8) -> str:
    """log Z of torch-struct and of the plain forward against ours on one HMM; exits if they disagree."""
    unary, transition, init = leaf_potentials(MODELS["hmm"], Shape(8, 32, N))
    with torch.no_grad():
        ours = LinearChain(DenseChain(unary, transition, init)).log_partition
        others = {
            "torch-struct": torch_struct_log_partition(torch_struct_potentials(unary, transition, init)),
            "plain lse": lse_log_partition(unary, transition, init),
        }
    scale = ours.abs().max().item()
    errors = {name: (z - ours).abs().max().item() for name, z in others.items()}
    for name, error in errors.items():
        if not error <= 1e-5 * scale:
            raise SystemExit(f"log Z check failed at N={N}: {name} differs from exact by {error:.3g}")
    found = ", ".join(f"max |{name} - exact| = {error:.2g}" for name, error in errors.items())
    return f"log Z check at N = {N}, B = 8, T = 32 (|log Z| up to {scale:.1f}): {found}."


PEER_CHECK_SHAPE = Shape(4, 16, 8)  # float64
PEER_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}  # relative to the largest |log Z|


def peer_shapes(plan: Plan, model: str) -> list[Shape]:
    if model == "crf":
        return [Shape(*plan.crf_batch, N) for N in plan.crf_sizes]
    return [Shape(B, plan.hmm_length, N) for N in plan.hmm_sizes for B in plan.hmm_batches]


def check_peers(plan: Plan, tables: set[int]) -> str:
    """log Z of each installed peer against exact on the same potentials, in float64 on a small case and in
    float32 at every shape its table times (log Z alone, without grad); exits if one disagrees."""
    checks = []  # case, model, log Z from (unary, transition, init)
    if 4 in tables:
        checks += [
            ("pytorch-crf", "crf", lambda u, t, i: pytorch_crf_log_partition(*pytorch_crf_inputs(u, t, i))),
            ("supar", "crf", lambda u, t, i: supar_log_partition(*supar_inputs(u, t, i))),
        ]
    if 5 in tables:
        checks += [
            ("pomegranate", "hmm", lambda u, t, i: pomegranate_log_partition(pomegranate_model(t, i), u))
        ]
    found = []
    for case, model, log_z in checks:
        if not peer_installed(case):
            found.append(f"{peer_label(case)}: not installed")
            continue
        torch.manual_seed(0)
        errors = []
        for dtype, shapes in ((torch.float64, [PEER_CHECK_SHAPE]), (torch.float32, peer_shapes(plan, model))):
            error = scale = 0.0
            for shape in shapes:
                u, t, i = (x.to(dtype) for x in leaf_potentials(MODELS[model], shape, grad=False))
                with torch.no_grad():
                    ours = LinearChain(DenseChain(u, t, i)).log_partition
                    theirs = log_z(u, t, i)
                error = max(error, (theirs.detach() - ours).abs().max().item())
                scale = max(scale, ours.abs().max().item())
            if not error <= PEER_TOLERANCE[dtype] * scale:
                raise SystemExit(f"log Z check failed: {case} differs from exact by {error:.3g} in {dtype}")
            errors.append((error, scale))
        (e64, s64), (e32, s32) = errors
        s, table_number = PEER_CHECK_SHAPE, 4 if model == "crf" else 5
        found.append(
            f"{peer_label(case)}: max |log Z - exact| = {e64:.2g} in float64 (B = {s.B}, T = {s.T}, "
            f"N = {s.N}; |log Z| up to {s64:.1f}), {e32:.2g} in float32 (every shape of table "
            f"{table_number}; |log Z| up to {s32:.0f})"
        )
    return "Peer log Z check (the same potentials, log Z without grad): " + "; ".join(found) + "."


# --- formatting ----------------------------------------------------------------------------------------
# --- the tables ----------------------------------------------------------------------------------------
TABLE1 = [  # name, case, model, backend
    ("exact", "zoo", "hmm", None),
    ("low-rank (R = N/8)", "zoo", "low-rank", None),
    ("rank-space (r = N/8)", "zoo", "rank-space", None),
    ("randomized (K = 1% N)", "zoo", "embedding", "randomized"),
    ("torch-struct 0.5", "torch-struct", "", None),
    ("plain log-sum-exp", "lse", "", None),
    ("matmul reference", "matmul", "", None),
]
TABLE1_NOTE = (
    "Median wall time of one `log_partition.sum().backward()` and the peak RSS growth of that call; ratios "
    "are against `exact` at the same N. Each backend runs on its own model family (HMM, low-rank HMM, "
    "rank-space HMM, embedding CRF): same shapes, not the same distribution."
)
THROUGHPUT_NOTE = (
    "Reference: the dense products an ideal shared-transition forward-backward needs (`matmul_step`: T-1 "
    "forward, T-1 backward and one weight-gradient product; 6 (T-1) B N^2 flop). "
    "Achieved fraction = reference time / exact time."
)
TORCH_STRUCT_NOTE = (
    "torch-struct's log-semiring scan materializes B x 16 x N^3 floats at T = 32 (~{gb:.2g} GB at N = {N}, "
    "B = 8), so it also runs here at B = {B}, next to exact at the same shape."
)
TABLE2_NOTE = (
    "Every parameter is a raw tensor; the timed call builds the container from it (log-softmaxed transition; "
    "exp random features; softmaxed U, V and log-softmaxed emission rows) and runs log Z + backward. "
    "Precompute: raw parameters -> container -> the DP's once-per-batch product (exp of the N x N "
    "transition; diag(c) L; V^T U), forward and backward, timed on its own.\n\n"
    "Exact is first timed at T = {t1} and T = {t2}, and a line through those two points in T - 1 estimates "
    "its time and peak memory at T = {T}. The full-length exact call is timed only when that estimate is "
    "under {minutes:.0f} minutes; otherwise the estimate stands in for it, labelled as extrapolated."
)


def table1(plan: Plan) -> Section:
    """Every backend and baseline against exact at B = 8, T = 32; exact against matmul throughput."""
    results = {}
    for N in plan.sizes:
        shape = Shape(8, 32, N, R=N // 8, K=max(2, round(N / 100)))
        results[N] = {
            name: run(Job(case, shape, model, backend), plan) for name, case, model, backend in TABLE1
        }
    rows = [
        [str(N), name, *cells(m, res["exact"], 1e-3, MB)]
        for N, res in results.items()
        for name, m in res.items()
    ]
    throughput = []
    for N, res in results.items():
        exact, ref, work = res["exact"], res["matmul reference"], flops(Shape(8, 32, N))
        gflops = [num(work / m.time_s / 1e9) for m in (exact, ref)]
        throughput.append(
            [str(N), num(ref.time_s * 1e3), num(exact.time_s * 1e3), ratio(ref.time_s, exact.time_s), *gflops]
        )
    s = plan.torch_struct
    pair = {"exact": run(Job("zoo", s, "hmm"), plan), "torch-struct 0.5": run(Job("torch-struct", s), plan)}
    gb = footprint(Job("torch-struct", replace(s, B=8))) / GB
    text = paragraphs(
        "### Table 1: log Z + backward, B = 8, T = 32, float32",
        TABLE1_NOTE,
        table(["N", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
        "### Exact against the machine's matmul throughput",
        THROUGHPUT_NOTE,
        table(
            ["N", "reference (ms)", "exact (ms)", "achieved fraction", "exact GFLOP/s", "ref. GFLOP/s"],
            throughput,
        ),
        f"### torch-struct where it fits: N = {s.N}, B = {s.B}, T = {s.T}",
        TORCH_STRUCT_NOTE.format(gb=gb, N=s.N, B=s.B),
        table(
            ["method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"],
            [[name, *cells(m, pair["exact"], 1e-3, MB)] for name, m in pair.items()],
        ),
    )
    ts_ratio = "torch-struct time / exact time"
    verdicts = []
    if 256 in results:
        exact, ts = results[256]["exact"], results[256]["torch-struct 0.5"]
        name = "exact >= 100x faster than torch-struct at N = 256, B = 8"
        verdicts.append(verdict(name, speedup(ts, exact), 100, f"{ts_ratio}; torch-struct: {ts.status}"))
    name = f"the same at N = {s.N}, B = {s.B}"
    verdicts.append(verdict(name, speedup(pair["torch-struct 0.5"], pair["exact"]), 100, ts_ratio))
    if 4096 in results:
        exact, ref = results[4096]["exact"], results[4096]["matmul reference"]
        name = "exact fwd+bwd at N = 4096 >= 50% of matmul throughput"
        verdicts.append(verdict(name, speedup(ref, exact), 0.5, "matmul reference time / exact time"))
    measurements = [m for res in results.values() for m in res.values()] + list(pair.values())
    return Section(text, verdicts, measurements)


def table2(plan: Plan) -> Section:
    """Large batches; containers built from raw parameters inside the timed call."""
    s, (t1, t2) = plan.big_batch, plan.exact_steps
    models = {"exact": "hmm", "low-rank": "low-rank", "rank-space": "rank-space"}
    labels = {"exact": "exact", "low-rank": f"low-rank (R = {s.R})", "rank-space": f"rank-space (r = {s.R})"}
    steps = {T: run(Job("zoo", replace(s, T=T), "hmm", from_raw=True), plan) for T in (t1, t2)}
    estimate = extrapolate(steps, s.T)
    direct = estimate.ok and estimate.time_s <= FULL_LENGTH_LIMIT_S
    totals = {
        name: run(Job("zoo", s, model, from_raw=True), plan)
        for name, model in models.items()
        if direct or name != "exact"
    }
    if not direct:
        totals["exact"] = estimate
        labels["exact"] = f"exact (extrapolated from T = {t1}, {t2})"
    precompute = {
        name: run(Job("zoo", s, model, from_raw=True, precompute_only=True), plan)
        for name, model in models.items()
    }
    exact, low, rank = totals["exact"], totals["low-rank"], totals["rank-space"]
    rows = []
    for name in models:
        m, pre = totals[name], precompute[name]
        pre_cells = [num(pre.time_s), ratio(pre.time_s, m.time_s)] if pre.ok else [pre.status, "—"]
        rows.append([labels[name], *cells(m, exact, 1, GB), *pre_cells, str(m.runs or "—")])
    for T, m in steps.items():
        rows.append([f"exact at T = {T}", *cells(m, exact, 1, GB), "—", "—", str(m.runs)])
    if direct:
        label = f"exact at T = {s.T}, extrapolated from T = {t1}, {t2}"
        rows.append([label, *cells(estimate, exact, 1, GB), "—", "—", "—"])
    header = ["method", "total (s)", "total / exact", "peak (GB)", "peak / exact", "precompute (s)"]
    text = paragraphs(
        f"### Table 2: {s.B * s.T}-token batches, B = {s.B}, T = {s.T}, N = {s.N}",
        TABLE2_NOTE.format(T=s.T, t1=t1, t2=t2, minutes=FULL_LENGTH_LIMIT_S / 60),
        table([*header, "precompute / total", "timed runs"], rows),
    )
    exact_time = "exact time" if direct else "exact time (extrapolated)"
    verdicts = [
        verdict("low-rank >= 3x faster than exact", speedup(exact, low), 3, f"{exact_time} / low-rank time"),
        verdict(
            "rank-space >= 3x faster than low-rank", speedup(low, rank), 3, "low-rank time / rank-space time"
        ),
    ]
    return Section(text, verdicts, [*steps.values(), *totals.values(), *precompute.values()])


def table3(plan: Plan) -> Section:
    """Randomized against exact on the same embedding CRF: peak memory."""
    N = plan.memory_N
    s = Shape(8, 32, N, K=max(2, round(N / 100)))
    exact = run(Job("zoo", s, "embedding", backend="exact"), plan)
    randomized = run(Job("zoo", s, "embedding", backend="randomized"), plan)
    rows = [
        ["exact (dense N x N from the embeddings)", *cells(exact, exact, 1e-3, MB)],
        [f"randomized (K = {s.K}: k1 = {s.K - 1}, k2 = 1)", *cells(randomized, exact, 1e-3, MB)],
    ]
    text = paragraphs(
        f"### Table 3: memory, EmbeddingChain with N = {N}, D = {EMBED_DIM}, B = 8, T = 32",
        table(["method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )
    fraction = randomized.peak_bytes / exact.peak_bytes
    name = "randomized peak memory <= 5% of exact"
    verdicts = [verdict(name, fraction, 0.05, "randomized peak / exact peak", at_most=True)]
    return Section(text, verdicts, [exact, randomized])


INTERLEAVED_NOTE = (
    "Each shape's methods run in one process on the same potentials, taking turns: one warm-up of each, "
    "then up to {repeats} rounds in which each runs once, as many as fit in {budget:g} s, back to back as "
    "in a caller's loop, with glibc's default allocator settings (not the fixed mmap threshold and heap "
    "trim of the other tables, which made every call of milliseconds page-fault its memory afresh: up to "
    "3x slower); each method's peak is one more call measured as in the other tables. The process is "
    "pinned to one CPU (`os.sched_setaffinity`): unpinned, pomegranate's forward (a few small ops a step) "
    "ran 3-4x slower in some processes than in others on our 2-core VM."
)
TABLE4_NOTE = (
    "One thread (`torch.set_num_threads(1)`). Median wall time of one log Z + backward (gradients of every "
    "potential) and its peak RSS growth; ratios against `exact` at the same N. The same tagging CRF "
    "(Gaussian unary, transition and start scores; end scores 0) in each library's own layout, built "
    "before the timed call: exact runs `LinearChain(DenseChain(unary, transition, init))"
    ".log_partition.sum().backward()`; pytorch-crf its `CRF._compute_normalizer(emissions, mask)`, the log "
    "Z that `CRF.forward` subtracts from the gold score (private: the public call needs tags and also scores "
    "them; time-major emissions, its default `batch_first=False`; start transitions = init, end transitions "
    "0); supar `LinearChainCRF(scores, trans).log_partition` from `supar.structs` (start scores in the last "
    "row of its (N+1) x (N+1) `trans`, end scores 0 in its last column). {interleaved}"
)
TABLE5_NOTE = (
    "One thread, under `torch.no_grad()`, float32. Median wall time of one log Z and its peak RSS growth; "
    "ratios against `exact` at the same N and B. The same HMM (log-softmaxed transition and start, Gaussian "
    "emission log-likelihoods): exact runs `LinearChain(DenseChain(unary, transition, init)).log_partition` "
    "on tensors that need no grad; pomegranate runs `DenseHMM.forward(emissions=unary)` (precomputed "
    "per-state emission log-likelihoods, its documented argument; the forward table, B x T x N) and the "
    "log-sum-exp of the table's last column plus the end scores (0), which is what "
    "`DenseHMM.log_probability` does after computing the emissions from observations. The floor row times "
    "the forward's T - 1 products (B x N) @ (N x N) alone, as the zoo runs them (packed once a call for "
    "oneDNN where `zoo.inference.packed.worth_packing` says, table 8; `torch.mm` elsewhere): no forward with "
    "these products takes less, so none can be faster than pomegranate by more than pomegranate's time "
    "over the floor's. {interleaved} The back to "
    "back columns time each method again in the same process, as many calls as it had rounds, with no other "
    "call in between: what a loop of log Z calls alone sees. Taking turns, each call starts with caches "
    "another library's call left: our forward runs more distinct kernels once per call (the factors, "
    "the checks, the log Z) than pomegranate's loop, so it loses more there; the targets use taking turns."
)


PEER_COLUMNS = [
    "time (ms)", "time / exact", "back to back (ms)", "back to back / exact", "peak (MB)", "peak / exact"
]


def with_alone(row: list[str], m: Measurement, base: Measurement) -> list[str]:
    """``cells``' time, time / base, then the back to back time (ms) and its ratio to ``base``'s
    (``Measurement.alone_s``), then the peaks."""
    alone = [num(m.alone_s / 1e-3), ratio(m.alone_s, base.alone_s)] if m.ok else ["—", "—"]
    return [*row[:2], *alone, *row[2:]]


TABLE6_NOTE = (
    "Table 5's HMM and calls at its first N and B (no grad, against pomegranate), and table 4's tagging CRF "
    "and calls at the same shape (log Z + backward, against pytorch-crf), the unary log-potentials (Gaussian "
    "emission log-likelihoods, CRF scores) multiplied by a standard deviation: at 1 the forward's maximum "
    "stays in range over each block (up to 32 positions); from about 3 on it shrinks by -log P(i -> j), "
    "several nats, a step, and from about 10 on it leaves float32's range within a block, which then runs "
    "again in shorter blocks (`zoo/inference/chain/block_scaled.py`). Ratios are against exact's row of "
    "the same kind. {interleaved}"
)


def interleaved_note(plan: Plan) -> str:
    return INTERLEAVED_NOTE.format(repeats=plan.peer_repeats, budget=plan.peer_budget_s)


def faster_peer(peers: dict[str, Measurement], base: Measurement) -> tuple[float, str]:
    """(fastest measured peer's time / base time, which peer)."""
    ok = {name: m for name, m in peers.items() if m.ok}
    if not ok or not base.ok:
        return math.nan, ", ".join(f"{name}: {m.status}" for name, m in peers.items())
    name = min(ok, key=lambda k: ok[k].time_s)
    return speedup(ok[name], base), name


def table4(plan: Plan) -> Section:
    """Small tagging CRFs on one thread: exact against pytorch-crf and supar, log Z + backward."""
    B, T = plan.crf_batch
    methods = {"zoo": "exact", "pytorch-crf": peer_label("pytorch-crf"), "supar": peer_label("supar")}
    results = {}
    for N in plan.crf_sizes:
        group = run_group(Job("", Shape(B, T, N), "crf", threads=1, cases=tuple(methods)), plan)
        results[N] = {methods[case]: m for case, m in group.items()}
    rows = [
        [str(N), name, *cells(m, res["exact"], 1e-3, MB)]
        for N, res in results.items()
        for name, m in res.items()
    ]
    text = paragraphs(
        f"### Table 4: small CRFs, one thread: log Z + backward, B = {B}, T = {T}, float32",
        TABLE4_NOTE.format(interleaved=interleaved_note(plan)),
        table(["N", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )
    N = 16 if 16 in results else min(results)
    res = results[N]
    value, which = faster_peer({k: m for k, m in res.items() if k != "exact"}, res["exact"])
    name = f"exact >= 2x faster than the faster of pytorch-crf and supar at N = {N}, B = {B}, T = {T}"
    verdicts = [verdict(name, value, 2, f"{which} time / exact time")]
    return Section(text, verdicts, [m for res in results.values() for m in res.values()])


def table5(plan: Plan) -> Section:
    """No-grad log Z on one thread: exact against pomegranate's DenseHMM forward."""
    T, label = plan.hmm_length, peer_label("pomegranate")
    floor = "the forward's products alone (floor)"
    methods = {"zoo": "exact", "pomegranate": label, "products": floor}
    results = {}
    for N in plan.hmm_sizes:
        for B in plan.hmm_batches:
            job = Job("", Shape(B, T, N), "hmm", threads=1, grad=False, cases=tuple(methods))
            results[N, B] = {methods[case]: m for case, m in run_group(job, plan).items()}
    rows = [
        [str(N), str(B), name, *with_alone(cells(m, res["exact"], 1e-3, MB), m, res["exact"])]
        for (N, B), res in results.items()
        for name, m in res.items()
    ]
    text = paragraphs(
        f"### Table 5: no-grad inference against pomegranate, one thread, T = {T}",
        TABLE5_NOTE.format(interleaved=interleaved_note(plan)),
        table(["N", "B", "method", *PEER_COLUMNS], rows),
    )
    verdicts, batches = [], ", ".join(map(str, plan.hmm_batches))
    for N in plan.hmm_sizes:
        res = {B: results[N, B] for B in plan.hmm_batches}
        measured = {B: speedup(r[label], r["exact"]) for B, r in res.items() if r[label].ok and r["exact"].ok}
        worst = min(measured, key=measured.get, default=None)
        if worst:
            ceiling = speedup(res[worst][label], res[worst][floor])
            alone = min(res[B][label].alone_s / res[B]["exact"].alone_s for B in measured)
            detail = (
                f"pomegranate time / exact time taking turns, the smallest over B = {batches} (at B = "
                f"{worst}; pomegranate / the products alone: {ceiling:.2f}, the most a forward with these "
                f"products could reach); back to back, the smallest over B: {alone:.2f}"
            )
        else:
            detail = "; ".join(r[label].status for r in res.values())
        name = f"exact no-grad log Z >= 2x faster than pomegranate's forward at N = {N}, T = {T}"
        verdicts.append(verdict(name, measured[worst] if worst else math.nan, 2, detail))
    return Section(text, verdicts, [m for res in results.values() for m in res.values()])


def table6(plan: Plan) -> Section:
    """Log Z on one thread with emissions far apart: exact against pomegranate (no grad) and against
    pytorch-crf (log Z + backward)."""
    (B, N), T = (plan.hmm_batches[0], plan.hmm_sizes[0]), plan.hmm_length
    grad = "log Z + backward"
    groups = {  # (model, grad): the peer's case and the labels of exact's and the peer's rows
        ("hmm", False): ("pomegranate", "exact, no grad", peer_label("pomegranate")),
        ("crf", True): ("pytorch-crf", f"exact, {grad}", f"{peer_label('pytorch-crf')}, {grad}"),
    }
    rows, measured = [], []
    for spread in plan.spreads:
        for (model, needs), (peer, ours, theirs) in groups.items():
            job = Job("", Shape(B, T, N), model, threads=1, grad=needs, cases=("zoo", peer), spread=spread)
            res = run_group(job, plan)
            rows += [[f"{spread:g}", name, *with_alone(cells(m, res["zoo"], 1e-3, MB), m, res["zoo"])]
                     for name, m in ((ours, res["zoo"]), (theirs, res[peer]))]  # fmt: skip
            measured += res.values()
    text = paragraphs(
        f"### Table 6: emissions far apart, one thread, N = {N}, B = {B}, T = {T}",
        TABLE6_NOTE.format(interleaved=interleaved_note(plan)),
        table(["emission sd", "method", *PEER_COLUMNS], rows),
    )
    return Section(text, [], measured)


TABLE7_NOTE = (
    "The rank-space chain's two forwards on the same chains (U rows and V columns softmaxed, log-softmaxed "
    "emission rows gathered at random words; full lengths), on 1 and 2 threads pinned to as many CPUs: H "
    "forms H = V^T U once (N R^2 multiply-adds, shared by the batch's tokens) and steps with it (R^2 a row); "
    "streamed runs two skinny products a step, V^T then U (2 N R a row), and never forms H. "
    "`LinearChain(...).log_partition` runs the one that `zoo.inference.chain.rank_space.streams` picks by "
    "its cost rule, which knows the thread count and whether gradients are needed (the last column). "
    "Median wall time of one log Z + backward (no grad: log Z alone under `torch.no_grad()`) and its peak "
    "RSS growth, each configuration in its own process; ratios against H at the same shape and mode."
)


def table7(plan: Plan) -> Section:
    """The rank-space forwards, H against streamed, and which one ``streams`` picks."""
    methods = {"H": "rank-space H", "streamed": "rank-space streamed"}
    rows, measured, worst = [], [], math.inf
    for threads in plan.rank_threads:
        for s in plan.rank_shapes:
            for grad in (True, False):
                picked = "streamed" if streams(s.B, s.T, s.N, s.R, grad, threads=threads) else "H"
                res = {
                    name: run(Job(case, s, "rank-space", threads=threads, grad=grad), plan)
                    for name, case in methods.items()
                }
                measured += res.values()
                mode = "log Z + backward" if grad else "no grad"
                for name, m in res.items():
                    rows.append([str(threads), str(s.N), str(s.R), str(s.B), mode, name,
                                 *cells(m, res["H"], 1e-3, MB), "yes" if name == picked else ""])  # fmt: skip
                if all(m.ok for m in res.values()):
                    faster = min(m.time_s for m in res.values())
                    worst = min(worst, faster / res[picked].time_s)
    header = ["threads", "N", "R", "B", "mode", "forward", "time (ms)", "time / H", "peak (MB)", "peak / H"]
    text = paragraphs(
        f"### Table 7: rank-space forwards, H = V^T U or streamed, T = {plan.rank_shapes[0].T}",
        TABLE7_NOTE,
        table([*header, "picked"], rows),
    )
    name = "the rank-space forward picked within 10% of the faster one at every shape of table 7"
    detail = "the faster forward's time / the picked one's, the smallest over threads, shapes and modes"
    return Section(text, [verdict(name, worst if worst < math.inf else math.nan, 0.9, detail)], measured)


TABLE8_NOTE = (
    "Chains whose products by a shared matrix are packed once for oneDNN, against the same chains with "
    "every product `torch.mm` (MKL's sgemm), each forced (`zoo.inference.packed.FORCE`): the exact HMM "
    "(table 5's HMM and calls; its forward in `zoo.inference.chain.block_scaled`, log Z under "
    "`torch.no_grad()` and log Z + backward, whose backward multiplies by P^T) and the low-rank chain "
    "(table 1's; two products a step, N x R and R x N: no grad, the block forward; with gradients, the "
    "guarded forward and backward of `zoo.inference.chain.scaled`). `LinearChain` packs where "
    "`zoo.inference.packed.worth_packing` says (the last column): float32 on a CPU, a matrix of 2^18 to "
    "2^24 elements, B >= 4, T - 1 >= 64. Ratios against torch.mm at the same shape and mode. {interleaved}"
)


def table8(plan: Plan) -> Section:
    """Chains with packed products against torch.mm's, and which one the rule picks."""
    T = plan.packed_length
    chains = [("hmm", Shape(B, T, N)) for N in plan.packed_sizes for B in plan.packed_batches]
    chains += [("low-rank", replace(s, T=T)) for s in plan.packed_low_rank]
    rows, measured, worst = [], [], math.inf
    for model, s in chains:
        matrix = torch.empty(s.N, s.R if model == "low-rank" else s.N)
        picked = "packed" if packed.worth_packing(matrix, s.B, T - 1) else "torch.mm"
        chain = "exact HMM" if model == "hmm" else f"low-rank, R = {s.R}"
        for grad in (False, True):
            res = run_group(Job("", s, model, threads=1, grad=grad, cases=("packed", "torch.mm")), plan)
            measured += res.values()
            mode = "log Z + backward" if grad else "no grad"
            base = res["torch.mm"]
            for name, m in res.items():
                row = with_alone(cells(m, base, 1e-3, MB), m, base)
                rows.append([chain, str(s.N), str(s.B), mode, name, *row, "yes" if name == picked else ""])
            if all(m.ok for m in res.values()):
                worst = min(worst, min(m.time_s for m in res.values()) / res[picked].time_s)
    columns = [column.replace("exact", "torch.mm") for column in PEER_COLUMNS]
    text = paragraphs(
        f"### Table 8: packed products, one thread, T = {T}",
        TABLE8_NOTE.format(interleaved=interleaved_note(plan)),
        table(["chain", "N", "B", "mode", "products", *columns, "picked"], rows),
    )
    name = "the products picked (packed or torch.mm) within 10% of the faster at every shape of table 8"
    detail = "the faster one's time / the picked one's (taking turns), the smallest over shapes and modes"
    return Section(text, [verdict(name, worst if worst < math.inf else math.nan, 0.9, detail)], measured)



TABLE9_NOTE = (
    "One thread. Median wall time of one Viterbi decoding of table 4's tagging CRF (the best path of every "
    "sequence, full lengths) and its peak RSS growth; ratios against `exact` at the same N. Exact runs "
    "`LinearChain(DenseChain(unary, transition, init)).argmax` (B x T states) under `torch.no_grad()`; "
    "pytorch-crf its public `CRF.decode(emissions, mask)` (a list of tag lists, made a tensor) under "
    "`torch.no_grad()`; supar `LinearChainCRF(scores, trans).argmax` and torch-struct "
    "`LinearChainCRF(edges).argmax` (one-hot edges, turned into states), each the autograd gradient of "
    "its max, so their inputs need grad. torch-struct runs where its scan's B x (T/2) x N^3 sums fit in "
    "{limit:g} GB. {interleaved}"
)
VITERBI_TORCH_STRUCT_LIMIT = 2e9  # bytes of torch-struct's scan (``footprint``) above which table 9 skips it


def viterbi_cases(shape: Shape) -> tuple[str, ...]:
    fits = footprint(Job("torch-struct", shape)) <= VITERBI_TORCH_STRUCT_LIMIT
    return tuple(case for case in VITERBI_CASES if fits or case != "torch-struct viterbi")


def check_viterbi(plan: Plan) -> str:
    """Each installed peer's best paths against exact's at every shape of table 9, in float32: the score of
    each path must equal exact's max score; exits if one does not."""
    found = []
    for case in VITERBI_CASES[1:]:
        if not peer_installed(case):
            found.append(f"{peer_label(case)}: not installed")
            continue
        error = scale = 0.0
        same = total = 0
        for N in plan.crf_sizes:
            shape = Shape(*plan.crf_batch, N)
            if case not in viterbi_cases(shape):
                continue
            torch.manual_seed(0)
            potentials = leaf_potentials(MODELS["crf"], shape, grad=False)
            best = LinearChain(DenseChain(*potentials))
            ours = best.argmax
            decode, inputs = viterbi_inputs(case, *potentials)
            theirs = decode(*inputs).detach()
            error = max(error, (path_scores(*potentials, theirs) - best.max_score).abs().max().item())
            scale = max(scale, best.max_score.abs().max().item())
            same, total = same + (theirs == ours).all(1).sum().item(), total + shape.B
        if not error <= PEER_TOLERANCE[torch.float32] * scale:
            raise SystemExit(f"Viterbi check failed: {case}'s best paths score {error:.3g} off exact's")
        found.append(
            f"{peer_label(case)}: max |path score - exact max score| = {error:.2g} (|max score| up to "
            f"{scale:.0f}), the same path as exact in {same} of {total} sequences"
        )
    return "Peer Viterbi check (table 9's shapes, float32): " + "; ".join(found) + "."


def table9(plan: Plan) -> Section:
    """Viterbi decoding on one thread: exact against pytorch-crf, supar and torch-struct."""
    B, T = plan.crf_batch
    labels = {"zoo viterbi": "exact", **{case: peer_label(case) for case in VITERBI_CASES[1:]}}
    results = {}
    for N in plan.crf_sizes:
        shape = Shape(B, T, N)
        group = run_group(Job("", shape, "crf", threads=1, grad=False, cases=viterbi_cases(shape)), plan)
        results[N] = {labels[case]: m for case, m in group.items()}
    rows = [
        [str(N), name, *cells(m, res["exact"], 1e-3, MB)]
        for N, res in results.items()
        for name, m in res.items()
    ]
    note = TABLE9_NOTE.format(limit=VITERBI_TORCH_STRUCT_LIMIT / GB, interleaved=interleaved_note(plan))
    text = paragraphs(
        f"### Table 9: Viterbi decoding, one thread, B = {B}, T = {T}, float32",
        note,
        table(["N", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )
    return Section(text, [], [m for res in results.values() for m in res.values()])


# --- report --------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a small run, as a smoke test (about 2 minutes on a 2-core CPU)"
    )
    parser.add_argument("--write", action="store_true", help=f"also write the report to {DOCS}")
    parser.add_argument(
        "--only", nargs="+", type=int, choices=sorted(TABLES), metavar="TABLE",
        help="run only these tables (4 5 6 9: the peer baselines); not with --write",
    )  # fmt: skip
    args = parser.parse_args()
    if args.only and args.write:
        parser.error("--write rewrites the whole bench_chain block of the page: run every table")
    plan = QUICK if args.quick else FULL
    tables = sorted(set(args.only or TABLES))
    prepare_environment()  # inherited by the spawned configurations
    started, load_before = time.time(), os.getloadavg()[0]
    checks = [check_log_partition()]
    if {4, 5} & set(tables):
        checks.append(check_peers(plan, set(tables)))
    if 9 in tables:
        checks.append(check_viterbi(plan))
    with tempfile.TemporaryDirectory(prefix="bench_chain_") as copy:
        version = snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        sections = [TABLES[k](plan) for k in tables]
    header = [
        *run_header(started, load_before, args.quick, plan, version),
        f"- Configurations that need more than {SKIP_ABOVE / GB:.0f} GB by their shapes are skipped.",
        *(f"- {check}" for check in checks),
    ]
    report = paragraphs(
        "## Linear chains",
        "\n".join(header),
        "### Targets",
        *(
            ["Quick run: targets evaluated at the quick shapes, not at those they name."]
            if args.quick
            else []
        ),
        "\n".join(v for section in sections for v in section.verdicts),
        *(section.text for section in sections),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_chain", report)
    if any(m.status.startswith("error") for section in sections for m in section.measurements):
        sys.exit(1)


TABLES: dict[int, Callable[[Plan], Section]] = {
    1: table1, 2: table2, 3: table3, 4: table4, 5: table5, 6: table6, 7: table7, 8: table8, 9: table9
}


if __name__ == "__main__":
    main()
