"""Benchmark of the ``CRF`` layer against pytorch-crf's, public call against public call.

* training: ``crf(emissions, tags, mask)`` (the summed log-likelihood) and its backward, gradients of the
  emissions and of the layer's three score tensors;
* decoding: ``crf.decode(emissions, mask)`` under ``torch.no_grad()`` (lists of tags).

Both layers hold the same scores (pytorch-crf's state dict loaded into ours) and take the same time-major
inputs (pytorch-crf's default layout): Gaussian emission scores, uniform random gold tags, a ragged bool
mask (lengths uniform between T / 2 and T, the longest T). Before timing, the log-likelihoods are checked
to agree (1e-5 relative) and the decoded paths to be equal. One thread; float32; each shape's methods run
in one spawned process, taking turns (``benchlib.measure_interleaved``), with glibc's default allocator
settings.

Usage (from the repository root):
    python scripts/bench_crf_layer.py            # the full run (about 5 minutes)
    python scripts/bench_crf_layer.py --quick    # a small smoke test
    python scripts/bench_crf_layer.py --write    # also write its section of docs/benchmarks.md
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

import benchlib
from benchlib import MB, Measurement, cells, paragraphs, run_header, table
from report import write_section

THREADS = benchlib.THREADS = 1  # module level: also in each spawned configuration, before it measures
DOCS = benchlib.REPO / "docs" / "benchmarks.md"
METHODS = ("zoo CRF", "pytorch-crf 0.7.2")


@dataclass(frozen=True)
class Job:
    operation: str  # "training" or "decoding"
    B: int
    T: int
    N: int
    methods: tuple[str, ...] = METHODS


@dataclass(frozen=True)
class Plan:
    shapes: tuple[tuple[int, int, int], ...]  # B, T, N
    repeats: int
    budget_s: float


FULL = Plan(
    shapes=((32, 50, 9), (32, 50, 16), (32, 50, 32), (32, 50, 128), (8, 200, 16)), repeats=30, budget_s=15.0
)
QUICK = Plan(shapes=((4, 10, 5),), repeats=3, budget_s=2.0)


def layers_and_inputs(job: Job) -> tuple:
    """Both layers with the same scores and the same time-major emissions, tags and mask."""
    from torchcrf import CRF as TorchCRF

    from zoo.inference import CRF

    theirs = TorchCRF(job.N)
    ours = CRF(job.N)
    ours.load_state_dict(theirs.state_dict())
    emissions = torch.randn(job.T, job.B, job.N) * 3
    tags = torch.randint(job.N, (job.T, job.B))
    lengths = torch.randint(job.T // 2, job.T + 1, (job.B,))
    lengths[0] = job.T
    mask = torch.arange(job.T).unsqueeze(-1) < lengths
    return {METHODS[0]: ours, METHODS[1]: theirs}, emissions, tags, mask


def check_agreement(layers: dict, emissions, tags, mask) -> None:
    """Exit if the layers' log-likelihoods or decoded paths differ."""
    ours, theirs = (layers[m] for m in METHODS)
    with torch.no_grad():
        a, b = ours(emissions, tags, mask, "none"), theirs(emissions, tags, mask, "none")
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-4):
            raise SystemExit(f"check failed: log-likelihoods differ by up to {(a - b).abs().max():.3g}")
        if ours.decode(emissions, mask) != theirs.decode(emissions, mask):
            raise SystemExit("check failed: the decoded paths differ")


def build_step(job: Job) -> dict[str, Callable[[], None]]:
    """The calls of one shape, built from the same seed (run in their own process)."""
    torch.manual_seed(0)
    layers, emissions, tags, mask = layers_and_inputs(job)
    check_agreement(layers, emissions, tags, mask)
    leaf = emissions.clone().requires_grad_(job.operation == "training")

    def call(method: str) -> Callable[[], None]:
        layer = layers[method]
        if job.operation == "decoding":

            def decode() -> None:
                with torch.no_grad():
                    layer.decode(leaf, mask)

            return decode

        def train() -> None:
            leaf.grad = None
            layer.zero_grad(set_to_none=True)
            layer(leaf, tags, mask).backward()

        return train

    return {method: call(method) for method in job.methods}


def run(job: Job, plan: Plan) -> dict[str, Measurement]:
    return benchlib.run_methods(build_step, job, plan.repeats, plan.budget_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, as a smoke test")
    parser.add_argument("--write", action="store_true", help=f"also write the report to {DOCS}")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    benchlib.prepare_environment()
    started, load_before = time.time(), os.getloadavg()[0]
    rows = {"training": [], "decoding": []}
    with tempfile.TemporaryDirectory(prefix="bench_crf_layer_") as copy:
        version = benchlib.snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        for operation, operation_rows in rows.items():
            for B, T, N in plan.shapes:
                results = run(Job(operation, B, T, N), plan)
                base, label = results[METHODS[0]], f"B = {B}, T = {T}, N = {N}"
                operation_rows += [[label, m, *cells(r, base, 1e-3, MB)] for m, r in results.items()]
    columns = ["shape", "layer", "time (ms)", "time / zoo", "peak (MB)", "peak / zoo"]
    report = paragraphs(
        "## The CRF layer against pytorch-crf",
        "\n".join(run_header(started, load_before, args.quick, plan, version)),
        "One thread, float32. `zoo.CRF` against `torchcrf.CRF` 0.7.2, public call against public call, the "
        "same scores in both (pytorch-crf's state dict loaded into ours), time-major inputs (pytorch-crf's "
        "default), a ragged mask (lengths uniform between T / 2 and T). Median wall time of one call and its "
        "peak RSS growth; ratios against the zoo's. Each shape's methods run in one process on the same "
        "inputs, taking turns, with glibc's default allocator settings; before timing, the log-likelihoods "
        "were checked to agree and the decoded paths to be equal.",
        "### Training: `crf(emissions, tags, mask)` and its backward",
        table(columns, rows["training"]),
        "### Decoding: `crf.decode(emissions, mask)`, no grad",
        table(columns, rows["decoding"]),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_crf_layer", report)


if __name__ == "__main__":
    main()
