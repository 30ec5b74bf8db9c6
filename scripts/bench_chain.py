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

Usage (from the repository root):
    python scripts/bench_chain.py            # the full run (about 15 minutes on 2 cores)
    python scripts/bench_chain.py --quick    # a small smoke test (under 2 minutes)
    python scripts/bench_chain.py --write    # also write docs/benchmarks.md
"""

from __future__ import annotations

import argparse
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

from zoo.inference import DenseChain, EmbeddingChain, LinearChain, LowRankChain, RankSpaceChain, RDPOptions
from zoo.inference.chain.rank_space import rank_transition

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


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]  # table 1: N
    torch_struct: Shape  # torch-struct next to exact, at a shape where it fits
    big_batch: Shape  # table 2
    exact_steps: tuple[int, int]  # table 2: exact is measured at these T and extrapolated linearly
    memory_N: int  # table 3
    repeats: int
    budget_s: float


FULL = Plan(
    sizes=(256, 1024, 4096, 16384),
    torch_struct=Shape(1, 32, 256),
    big_batch=Shape(64, 64, 16384, R=2048),
    exact_steps=(4, 12),
    memory_N=10000,
    repeats=3,
    budget_s=40.0,
)
QUICK = Plan(
    sizes=(256, 1024),
    torch_struct=Shape(1, 32, 64),
    big_batch=Shape(8, 16, 2048, R=256),
    exact_steps=(4, 8),
    memory_N=2000,
    repeats=1,
    budget_s=5.0,
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


MODELS = {
    "hmm": Model(hmm_raw, hmm_potentials, DenseChain, column_scaled),
    "low-rank": Model(low_rank_raw, low_rank_potentials, LowRankChain, LowRankChain.scaled_left),
    "rank-space": Model(rank_space_raw, rank_space_potentials, RankSpaceChain, rank_transition),
    "embedding": Model(embedding_raw, embedding_potentials, EmbeddingChain, None),
}


def leaf_potentials(model: Model, shape: Shape) -> list[Tensor]:
    """The container's arguments as leaf tensors requiring grad (parameter transforms done up front)."""
    params, consts = model.raw(shape)
    with torch.no_grad():
        return [x.detach().requires_grad_() for x in model.potentials(params, consts)]


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
        leaves = leaf_potentials(model, s)

        def build():
            return model.container(*leaves)

    options = None
    if job.backend == "randomized":
        generator = torch.Generator().manual_seed(0)
        options = RDPOptions(k1=s.K - 1, k2=1, proposal="local+global", generator=generator)

    def step():
        LinearChain(build(), backend=job.backend, options=options).log_partition.sum().backward()
        clear_grads(leaves)

    def precompute():
        factors = build()
        outputs = [v for v in vars(factors).values() if isinstance(v, Tensor) and v.requires_grad]
        sum(x.sum() for x in [*outputs, model.once_per_batch(factors)]).backward()
        clear_grads(leaves)

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


CASES: dict[str, Callable[[Job], Callable[[], None]]] = {
    "zoo": zoo_step,
    "torch-struct": torch_struct_step,
    "lse": lse_step,
    "matmul": matmul_step,
}


def build_step(job: Job) -> Callable[[], None]:
    """The measured call of a configuration (run in its own process by ``benchlib.run_in_child``)."""
    return CASES[job.case](job)


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
    label = f"{job.case} {job.model} {job.backend or ''}{' precompute' if job.precompute_only else ''}"
    print(f"  {label:40} {job.shape} -> {describe(result)}", file=sys.stderr, flush=True)
    return result


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


# --- report --------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, as a smoke test (under 2 minutes)")
    parser.add_argument("--write", action="store_true", help=f"also write the report to {DOCS}")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    prepare_environment()  # inherited by the spawned configurations
    started, load_before = time.time(), os.getloadavg()[0]
    check = check_log_partition()
    with tempfile.TemporaryDirectory(prefix="bench_chain_") as copy:
        version = snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        sections = [table1(plan), table2(plan), table3(plan)]
    header = [
        *run_header(started, load_before, args.quick, plan, version),
        f"- Configurations that need more than {SKIP_ABOVE / GB:.0f} GB by their shapes are skipped.",
        f"- {check}",
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


if __name__ == "__main__":
    main()
