"""Benchmark of the zoo's Gaussian HMM against hmmlearn's, public call against public call.

A diagonal Gaussian HMM is ``GaussianHSMM(max_duration=1)`` (self-transitions allowed): its exact log Z and
Viterbi run on the linear chain it equals. hmmlearn 0.3.3's ``GaussianHMM(covariance_type="diag")`` gets the
same start, transition, means and variances (``model.distributions()``), and both score the same ragged
batch of feature sequences (a list of arrays with ``lengths`` for hmmlearn, as its users pass them):

* scoring: ``model.log_likelihood(batch)`` (eval mode: no autograd graph) against ``hmm.score(X, lengths)``
  (the sum of the sequences' log-likelihoods; ours are summed too);
* decoding: ``model.segment(batch)`` (the semi-Markov Viterbi; D = 1: the chain's) against
  ``hmm.decode(X, lengths)`` (Viterbi);
* posteriors: ``model.posterior(batch).marginals`` under ``torch.no_grad()`` (B x T x N; D = 1 without a
  gradient: the chain's marginals) against ``hmm.predict_proba(X, lengths)``.

Before timing, the log-likelihoods are checked to agree (1e-4 relative: ours in float32, hmmlearn's in
float64), our Viterbi paths to score hmmlearn's best (1e-5 relative, float64 scores) and our posteriors to
agree with hmmlearn's (1e-4 absolute). One thread; each
shape's methods run in one spawned process, taking turns (``benchlib.measure_interleaved``), with glibc's
default allocator settings.

Usage (from the repository root):
    python scripts/bench_gaussian_hmm.py            # the full run (about 6 minutes)
    python scripts/bench_gaussian_hmm.py --quick    # a small smoke test
    python scripts/bench_gaussian_hmm.py --write    # also write its section of docs/benchmarks.md
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

import numpy as np
import torch

import benchlib
from benchlib import MB, Measurement, cells, paragraphs, run_header, table
from report import write_section

THREADS = benchlib.THREADS = 1  # module level: also in each spawned configuration, before it measures
DOCS = benchlib.REPO / "docs" / "benchmarks.md"
METHODS = ("zoo GaussianHSMM(max_duration=1)", "hmmlearn 0.3.3 GaussianHMM")
PLAIN = "zoo, chunks off (the plain forward)"  # what long sequences ran before the chunks
WITH_PLAIN = ("scoring", "posteriors")


@dataclass(frozen=True)
class Job:
    operation: str  # "scoring", "decoding" or "posteriors"
    B: int
    T: int
    N: int
    F: int
    methods: tuple[str, ...] = METHODS


@dataclass(frozen=True)
class Plan:
    shapes: tuple[tuple[int, int, int, int], ...]  # B, T, N, F
    repeats: int
    budget_s: float


FULL = Plan(shapes=((8, 1000, 8, 12), (8, 1000, 64, 12), (8, 1000, 256, 12), (32, 200, 16, 40),
                    (1, 10_000, 4, 3), (1, 100_000, 3, 2)), repeats=20, budget_s=20.0)  # fmt: skip
QUICK = Plan(shapes=((2, 50, 4, 3),), repeats=3, budget_s=2.0)


def models_and_batch(job: Job) -> tuple:
    """Our model (eval mode), hmmlearn's with the same parameters, our batch and hmmlearn's X, lengths."""
    from hmmlearn.hmm import GaussianHMM

    from zoo.models import GaussianHSMM

    ours = GaussianHSMM(job.N, job.F, max_duration=1).eval()
    with torch.no_grad():
        p = {k: v.double().numpy() for k, v in ours.distributions().items()}
    theirs = GaussianHMM(job.N, covariance_type="diag")
    theirs.startprob_, theirs.transmat_, theirs.means_, theirs.covars_ = (
        p["start"], p["transition"], p["mean"], p["variance"]
    )
    lengths = torch.randint(job.T // 2, job.T + 1, (job.B,))
    lengths[0] = job.T
    features = torch.randn(job.B, job.T, job.F)
    X = np.concatenate([features[b, :n].double().numpy() for b, n in enumerate(lengths.tolist())])
    return ours, theirs, {"features": features, "lengths": lengths}, X, lengths.numpy()


def path_log_probs(theirs, X: np.ndarray, lengths: np.ndarray, states: np.ndarray) -> float:
    """The summed float64 log p(x, z) of the given state paths under hmmlearn's parameters."""
    var, mean = theirs.covars_.diagonal(axis1=-2, axis2=-1), theirs.means_  # N x F each
    emit = -0.5 * (((X[:, None] - mean) ** 2 / var).sum(-1) + np.log(2 * np.pi * var).sum(-1))  # L x N
    total, start = 0.0, 0
    for n in lengths.tolist():
        z = states[start : start + n]
        total += np.log(theirs.startprob_[z[0]]) + emit[np.arange(start, start + n), z].sum()
        total += np.log(theirs.transmat_[z[:-1], z[1:]]).sum()
        start += n
    return float(total)


def check_agreement(ours, theirs, batch, X, lengths) -> None:
    """Exit if the log-likelihoods differ, or if our Viterbi paths score below hmmlearn's best (float64
    scores, 1e-5 relative: on near-ties float32 and float64 may pick different best paths)."""
    mine = float(ours.log_likelihood(batch).double().sum())
    reference = theirs.score(X, lengths)
    if abs(mine - reference) > 1e-4 * abs(reference):
        raise SystemExit(f"check failed: log-likelihood {mine} against hmmlearn's {reference}")
    _, frames = ours.segment(batch)
    states = torch.cat([frames[b, :n] for b, n in enumerate(lengths.tolist())]).numpy()
    best, _ = theirs.decode(X, lengths)
    found = path_log_probs(theirs, X, lengths, states)
    if best - found > 1e-5 * abs(best):
        raise SystemExit(f"check failed: our Viterbi paths score {found}, hmmlearn's {best}")
    gap = np.abs(posteriors(ours, batch, lengths) - theirs.predict_proba(X, lengths)).max()
    if gap > 1e-4:
        raise SystemExit(f"check failed: our posteriors differ from hmmlearn's by up to {gap}")


def posteriors(ours, batch, lengths: np.ndarray) -> np.ndarray:
    """Our p(z_t = i | x) of every frame, the sequences concatenated as hmmlearn's: sum(lengths) x N."""
    with torch.no_grad():
        marginals = ours.posterior(batch).marginals
    return torch.cat([marginals[b, :n] for b, n in enumerate(lengths.tolist())]).double().numpy()


def build_step(job: Job) -> dict[str, Callable[[], None]]:
    """The calls of one shape, built from the same seed (run in their own process)."""
    torch.manual_seed(0)
    ours, theirs, batch, X, lengths = models_and_batch(job)
    check_agreement(ours, theirs, batch, X, lengths)
    if job.operation == "scoring":
        score = lambda: ours.log_likelihood(batch).sum()  # noqa: E731
        return {METHODS[0]: score, METHODS[1]: lambda: theirs.score(X, lengths), PLAIN: without_chunks(score)}
    if job.operation == "posteriors":
        ours_call = lambda: posteriors(ours, batch, lengths)  # noqa: E731
        theirs_call = lambda: theirs.predict_proba(X, lengths)  # noqa: E731
        return {METHODS[0]: ours_call, METHODS[1]: theirs_call, PLAIN: without_chunks(ours_call)}
    return dict(zip(METHODS, (lambda: ours.segment(batch), lambda: theirs.decode(X, lengths))))


def without_chunks(call: Callable[[], object]) -> Callable[[], None]:
    """``call`` with ``zoo.inference.chain.chunked.pays`` saying no: log Z by the plain scaled forward, the
    marginals by its gradient."""
    from zoo.inference.chain import chunked

    def step() -> None:
        pays = chunked.pays
        chunked.pays = lambda batch, length, states: False
        try:
            call()
        finally:
            chunked.pays = pays

    return step


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
    rows = {"scoring": [], "decoding": [], "posteriors": []}
    with tempfile.TemporaryDirectory(prefix="bench_gaussian_hmm_") as copy:
        version = benchlib.snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        for operation, operation_rows in rows.items():
            for B, T, N, F in plan.shapes:
                methods = (*METHODS, PLAIN) if operation in WITH_PLAIN else METHODS
                results = run(Job(operation, B, T, N, F, methods), plan)
                base, label = results[METHODS[0]], f"B = {B}, T = {T}, N = {N}, F = {F}"
                operation_rows += [[label, m, *cells(r, base, 1e-3, MB)] for m, r in results.items()]
    columns = ["shape", "model", "time (ms)", "time / zoo", "peak (MB)", "peak / zoo"]
    report = paragraphs(
        "## The Gaussian HMM against hmmlearn",
        "\n".join(run_header(started, load_before, args.quick, plan, version)),
        "One thread. `GaussianHSMM(num_states, feature_dim, max_duration=1)` (a diagonal Gaussian HMM: "
        "docs/hsmm.md; eval mode, float32) against hmmlearn 0.3.3's `GaussianHMM(covariance_type=\"diag\")` "
        "(float64, its C forward and Viterbi) holding the same start, transition, means and variances, on "
        "the same ragged batch of standard-normal feature sequences (lengths uniform between T / 2 and T; "
        "hmmlearn gets them concatenated with `lengths`). Median wall time of one call and its peak RSS "
        "growth; ratios against the zoo's. Each shape's methods run in one process on the same inputs, "
        "taking turns, with glibc's default allocator settings; before timing, the summed log-likelihoods "
        "were checked to agree within 1e-4 relative, our Viterbi paths to reach hmmlearn's best score "
        "(1e-5 relative, scored in float64: on near-ties float32 and float64 may choose different paths) "
        "and our posteriors to agree with hmmlearn's within 1e-4.",
        "### Scoring: `model.log_likelihood(batch)` against `hmm.score(X, lengths)`",
        f"`{PLAIN}`: the zoo's call with `zoo.inference.chain.chunked.pays` saying no, so that log Z runs "
        "the scaled forward a position at a time (two kernels a position) where it now runs in chunks "
        "(long sequences, few states, a small batch: docs/chain-api.md).",
        table(columns, rows["scoring"]),
        "### Decoding: `model.segment(batch)` against `hmm.decode(X, lengths)`",
        table(columns, rows["decoding"]),
        "### Posteriors: `model.posterior(batch).marginals` (no grad) against "
        "`hmm.predict_proba(X, lengths)`",
        f"Ours concatenated as hmmlearn's (sum of lengths x N, in NumPy). `{PLAIN}`: the marginals as the "
        "gradient of the plain forward's log Z, where they now run in chunks with messages between them "
        "(`zoo.inference.chain.chunked_marginals`).",
        table(columns, rows["posteriors"]),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_gaussian_hmm", report)


if __name__ == "__main__":
    main()
