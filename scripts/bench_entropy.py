"""Benchmark of the chain entropy: the expectation-semiring forward against the autograd probes it replaced.

Every measured call is ``entropy.sum().backward()`` with respect to the potentials (unary, transition,
init) of a ``DenseChain``, float32, full-length sequences, one thread. Two methods:

* ``semiring``: ``zoo.inference.chain.exact.forward`` in the ``Entropy`` semiring, what the engines use;
* ``probes`` (the baseline, kept here as it was in ``zoo.inference.chain.engine``): H = log Z -
  E[score], E[score] from the gradient of log Z w.r.t. zero probes on unary, transition and init,
  taken with ``create_graph=True`` so that H stays differentiable; for a shared transition one
  sequence at a time (the probe's gradient would otherwise sum over the batch).

"shared": one N x N transition (the HMM, and the structured VAE's exact inference network);
"per position": B x (T-1) x K x K blocks (the randomized backend's reduced chain, K kept states).
Each configuration runs in a fresh spawned process (``benchlib``: median of the timed calls, peak RSS
growth of the call, address space capped so an out-of-memory configuration is recorded as "OOM").

Usage (from the repository root):
    python scripts/bench_entropy.py            # the full run (about 5 minutes on one core)
    python scripts/bench_entropy.py --quick    # a small smoke test
    python scripts/bench_entropy.py --write    # also write its section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

import benchlib
from benchlib import (
    MB,
    REPO,
    Measurement,
    cells,
    describe,
    paragraphs,
    prepare_environment,
    run_header,
    run_in_child,
    snapshot_zoo,
    table,
)
from report import write_section

THREADS = benchlib.THREADS = 1  # module level: also in each spawned configuration, before it measures
DOCS = REPO / "docs" / "benchmarks.md"
METHODS = ("probes", "semiring")
COLUMNS = ["time (ms)", "time / probes", "peak (MB)", "peak / probes"]


@dataclass(frozen=True)
class Job:
    method: str  # a key of ENTROPY
    B: int
    T: int
    N: int  # states (per position: kept states K)
    shared: bool


@dataclass(frozen=True)
class Plan:
    jobs: tuple[tuple[str, int, int, int, bool, tuple[str, ...]], ...]  # label, B, T, N, shared, methods
    repeats: int
    budget_s: float


FULL = Plan(
    jobs=(
        ("shared", 32, 15, 500, True, METHODS),
        ("shared", 32, 15, 1000, True, METHODS),
        ("shared (probes not run)", 32, 15, 2000, True, ("semiring",)),
        ("per position (RDP-2000: K = 400)", 32, 15, 400, False, METHODS),
    ),
    repeats=3,
    budget_s=30.0,
)
QUICK = Plan(
    jobs=(("shared", 8, 15, 100, True, METHODS), ("per position", 8, 15, 50, False, METHODS)),
    repeats=1,
    budget_s=5.0,
)


# --- the baseline ----------------------------------------------------------------------------------------
def probe_entropy(chain, lengths: Tensor) -> Tensor:
    """The chain entropy before the semiring forward (without the randomized ``log_weights``)."""
    from zoo.inference.chain.factors import DenseChain

    if not chain.shared:
        log_z, expected = probe_expected_score(chain, lengths)
        return log_z - expected
    parts = [
        probe_expected_score(
            DenseChain(chain.unary[b : b + 1], chain.transition, chain.init[b : b + 1]), lengths[b : b + 1]
        )
        for b in range(chain.batch)
    ]
    log_z, expected = (torch.cat(x) for x in zip(*parts))
    return log_z - expected


def probe_expected_score(chain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(log Z, E[score]): the gradient of log Z w.r.t. zero probes, kept differentiable."""
    from zoo.inference.chain import exact
    from zoo.inference.chain.factors import DenseChain
    from zoo.inference.numerics import finite_or_zero as finite

    potentials = (chain.unary, chain.transition, chain.init)
    with torch.enable_grad():
        probes = [torch.zeros_like(x, requires_grad=True) for x in potentials]
        log_z, _ = exact.log_forward(DenseChain(*(x + p for x, p in zip(potentials, probes))), lengths)
        g_u, g_t, g_i = torch.autograd.grad(log_z.sum(), probes, create_graph=True, materialize_grads=True)
    trans = g_t * finite(chain.transition)
    trans = trans.sum().reshape(1) if chain.shared else trans.sum((1, 2, 3))
    expected = (g_u * finite(chain.unary)).sum((1, 2)) + (g_i * finite(chain.init)).sum(-1) + trans
    return log_z, expected


def semiring_entropy(chain, lengths: Tensor) -> Tensor:
    from zoo.inference.chain.exact import forward
    from zoo.inference.semiring import Entropy

    return forward(chain, lengths, Entropy)[0]


ENTROPY: dict[str, Callable] = {"probes": probe_entropy, "semiring": semiring_entropy}


# --- the measured call -----------------------------------------------------------------------------------
def potentials(B: int, T: int, N: int, shared: bool, dtype=torch.float32) -> list[Tensor]:
    """Leaves: emission-like unary, log-softmaxed transition(s) and initial distribution."""
    shape = (N, N) if shared else (B, T - 1, N, N)
    args = [torch.randn(B, T, N, dtype=dtype) * 2 - 5, torch.randn(shape, dtype=dtype).log_softmax(-1)]
    return [x.requires_grad_() for x in [*args, torch.randn(N, dtype=dtype).log_softmax(-1)]]


def build_step(job: Job) -> Callable[[], None]:
    """One entropy + backward (run in the configuration's own process by ``benchlib.run_in_child``)."""
    from zoo.inference import DenseChain

    leaves = potentials(job.B, job.T, job.N, job.shared)
    lengths = torch.full((job.B,), job.T)
    entropy = ENTROPY[job.method]

    def step():
        entropy(DenseChain(*leaves), lengths).sum().backward()
        for x in leaves:
            x.grad = None

    return step


def check(N: int = 6, B: int = 4, T: int = 5) -> str:
    """Both methods agree (value and gradient, float64, ragged lengths); exits if they do not."""
    from zoo.inference import DenseChain

    torch.manual_seed(0)
    lengths = torch.tensor([T, 1, T - 2, 2])
    errors = []
    for shared in (True, False):
        leaves = potentials(B, T, N, shared, torch.float64)
        values = [ENTROPY[m](DenseChain(*leaves), lengths) for m in METHODS]
        grads = [torch.autograd.grad(h.sum(), leaves) for h in values]
        pairs = zip([values[0], *grads[0]], [values[1], *grads[1]])
        errors.append(max((a - b).abs().max().item() for a, b in pairs))
    if not max(errors) <= 1e-10:
        raise SystemExit(f"entropy check failed: probes and semiring differ by up to {max(errors):.3g}")
    return (
        f"Check (float64, N = {N}, B = {B}, ragged lengths, shared and per position): "
        f"max |probes - semiring| over H and its gradients = {max(errors):.2g}."
    )


# --- report ----------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, as a smoke test")
    parser.add_argument("--write", action="store_true", help=f"also write the report to {DOCS}")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    prepare_environment()
    started, load_before = time.time(), os.getloadavg()[0]
    checked = check()
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix="bench_entropy_") as copy:
        version = snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        for label, B, T, N, shared, methods in plan.jobs:
            results: dict[str, Measurement] = {}
            for method in methods:
                job = Job(method, B, T, N, shared)
                results[method] = run_in_child(build_step, job, plan.repeats, plan.budget_s)
                print(f"  {label} N={N} {method}: {describe(results[method])}", file=sys.stderr, flush=True)
                failed |= results[method].status.startswith("error")
            base = results.get("probes", Measurement(status="not run"))
            for method, m in results.items():
                ratios = cells(m, base, 1e-3, MB)
                rows.append([label, str(N), f"{B} x {T}", method, *ratios])
    header = run_header(started, load_before, args.quick, plan, version)
    report = paragraphs(
        "## Chain entropy",
        "\n".join([*header, f"- {checked}"]),
        "Median wall time of one `entropy.sum().backward()` (float32) and the peak RSS growth of that call; "
        "ratios against `probes` (the previous implementation) at the same shape. N is the number of states "
        "(per position: the kept states K of each K x K block).",
        table(["transition", "N", "B x T", "method", *COLUMNS], rows),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_entropy", report)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
