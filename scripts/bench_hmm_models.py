"""Benchmark of the zoo.models HMMs: one training step's log-likelihood + backward, per backend.

Each measured call is ``(-model.log_likelihood(batch).sum()).backward()`` in training mode (dropout
0.1), through every parameter (embeddings, residual MLPs, emission normalizer, inference). Every
configuration runs in a fresh spawned process (see ``benchlib``); times are medians, memory is the
peak RSS growth of a call; ratios are against the exact (softmax) HMM of the same sizes.

Usage (from the repository root):
    python scripts/bench_hmm_models.py           # PTB sizes B=32, T=35, N=1024, V=10000 and music
    python scripts/bench_hmm_models.py --quick   # small sizes (a smoke test)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import torch

from benchlib import MB, cells, describe, machine, run_in_child, table


@dataclass(frozen=True)
class Job:
    kind: str  # "categorical" | "bernoulli"
    batch: int
    length: int
    states: int
    size: int  # V or number of keys
    backend: str
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.extra.items())
        return f"{self.backend}" + (f" ({extra})" if extra else "")


def build(job: Job):
    from zoo.models import BernoulliHMM, CategoricalHMM

    B, T = job.batch, job.length
    lengths = torch.randint(T // 2, T + 1, (B,))
    lengths[0] = T
    if job.kind == "categorical":
        model = CategoricalHMM(job.size, job.states, backend=job.backend, **job.extra)
        batch = {"tokens": torch.randint(job.size, (B, T)), "lengths": lengths}
    else:
        model = BernoulliHMM(job.states, num_keys=job.size, backend=job.backend, **job.extra)
        batch = {"frames": (torch.rand(B, T, job.size) < 0.05).float(), "lengths": lengths}
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        (-model.log_likelihood(batch).sum()).backward()

    return step


def jobs(kind: str, B: int, T: int, N: int, size: int) -> list[Job]:
    k = N // 10
    return [
        Job(kind, B, T, N, size, "exact"),
        Job(kind, B, T, N, size, "low-rank", {"rank": N // 8}),
        Job(kind, B, T, N, size, "rank-space", {"rank": N // 4}),
        Job(kind, B, T, N, size, "randomized", {"k1": k, "k2": k}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        suites = [
            ("text", jobs("categorical", 4, 10, 128, 1000)),
            ("music", jobs("bernoulli", 4, 20, 128, 88)),
        ]
    else:
        suites = [
            ("PTB sizes: B=32, T=35, N=1024, V=10000", jobs("categorical", 32, 35, 1024, 10000)),
            ("music: B=16, T=100, N=1024, 88 keys", jobs("bernoulli", 16, 100, 1024, 88)),
        ]
    print(f"machine: {machine()}\n")
    for title, suite in suites:
        results = []
        for job in suite:
            m = run_in_child(build, job, args.repeats, budget_s=120.0)
            print(f"  {job.label}: {describe(m)}", flush=True)
            results.append((job, m))
        base = results[0][1]
        rows = [[job.label, *cells(m, base, 1.0, MB)] for job, m in results]
        print(f"\n{title}: log-likelihood + backward, one training step\n")
        print(table(["backend", "time (s)", "vs exact", "peak (MB)", "vs exact"], rows), "\n")


if __name__ == "__main__":
    main()
