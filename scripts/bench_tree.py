"""Benchmark of the tree engine: log Z + backward of a PCFG, wall time and peak memory.

Every measured call is ``TreeDistribution(...).log_partition.sum().backward()`` with respect to the
grammar's tensors and the terms, in float32 on 2 threads, each configuration in its own process
(``benchlib``). Tables:

1. every backend and torch-struct 0.5's ``SentCFG`` at (NT, PT) in {(30, 60), (60, 120), (100, 200)},
   T in {20, 40}, B = 4 (one shared grammar, as in a PCFG);
2. the rank-space inside against the state-space CPD inside on the same TD-PCFG at NT = 4500,
   PT = 9000, r = 1000;
3. peak memory against the batch size.

Usage (from the repository root):
    python scripts/bench_tree.py            # the full run
    python scripts/bench_tree.py --quick    # a small smoke test (about a minute)
    python scripts/bench_tree.py --write    # also write its section of docs/benchmarks.md
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

from benchlib import (
    MB,
    REPO,
    Measurement,
    Section,
    cells,
    describe,
    num,
    paragraphs,
    prepare_environment,
    run_header,
    run_in_child,
    snapshot_zoo,
    speedup,
    table,
    verdict,
)
from report import write_section

DOCS = REPO / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Shape:
    B: int
    T: int
    NT: int
    PT: int
    R: int = 0  # features (low-rank) or rank (rank-space)
    K: int = 0  # kept labels per span (randomized)


@dataclass(frozen=True)
class Job:
    case: str  # a key of GRAMMARS, or "torch-struct"
    shape: Shape
    backend: str | None = None
    options: str | None = None  # "state-space" for the rank-space grammar's second algorithm


@dataclass(frozen=True)
class Plan:
    sizes: tuple[tuple[int, int], ...]
    lengths: tuple[int, ...]
    big: tuple[int, int, int]  # NT, PT, r of table 2
    big_lengths: tuple[int, ...]
    memory_batches: tuple[int, ...]
    repeats: int
    budget_s: float


FULL = Plan(((30, 60), (60, 120), (100, 200)), (20, 40), (4500, 9000, 1000), (20, 30, 40), (2, 4, 8), 3, 40.0)
QUICK = Plan(((30, 60),), (10,), (450, 900, 100), (10,), (2, 4), 1, 5.0)


# --- grammars: leaf tensors -> container ----------------------------------------------------------------
def dense_leaves(s: Shape) -> list[Tensor]:
    S = s.NT + s.PT
    root = torch.randn(s.NT).log_softmax(-1)
    rules = torch.randn(s.NT, S * S).log_softmax(-1).view(s.NT, S, S)
    return [root, rules]


def low_rank_leaves(s: Shape) -> list[Tensor]:
    root, rules = dense_leaves(s)
    head = torch.randn(s.NT, s.R).mul(0.3).exp()
    children = torch.randn(s.NT, s.NT, s.R).mul(0.3).exp() / (s.NT * s.NT * s.R)
    return [root, rules, head, children]


def rank_space_leaves(s: Shape) -> list[Tensor]:
    """TD-PCFG normalization (Yang et al. 2021b): U row-stochastic, V and W column-stochastic."""
    S = s.NT + s.PT
    root = torch.randn(s.NT).log_softmax(-1)
    U = torch.randn(s.NT, s.R).softmax(-1)
    V, W = (torch.randn(S, s.R).softmax(0) for _ in range(2))
    return [root, U, V, W]


def grammar_classes():
    from zoo.inference import DenseGrammar, LowRankGrammar, RankSpaceGrammar

    return {"dense": DenseGrammar, "low-rank": LowRankGrammar, "rank-space": RankSpaceGrammar}


LEAVES = {"dense": dense_leaves, "low-rank": low_rank_leaves, "rank-space": rank_space_leaves}


def terms_of(s: Shape) -> Tensor:
    return torch.randn(s.B, s.T, s.PT).log_softmax(-1)


def zoo_step(job: Job) -> Callable[[], None]:
    from zoo.inference import RDPOptions, TreeDistribution

    s = job.shape
    leaves = [x.requires_grad_() for x in [*LEAVES[job.case](s), terms_of(s)]]
    container = grammar_classes()[job.case]
    options = job.options
    if job.backend == "randomized":
        generator = torch.Generator(torch.get_default_device()).manual_seed(0)
        options = RDPOptions(k1=s.K - 1, k2=1, proposal="uniform", generator=generator)

    def step():
        grammar = container(*leaves[:-1])
        TreeDistribution(
            grammar, leaves[-1], backend=job.backend, options=options
        ).log_partition.sum().backward()
        for x in leaves:
            x.grad = None

    return step


def torch_struct_step(job: Job) -> Callable[[], None]:
    from torch_struct import SentCFG

    s = job.shape
    root, rules = (x.requires_grad_() for x in dense_leaves(s))
    terms = terms_of(s).requires_grad_()

    def step():
        B = s.B
        dist = SentCFG((terms, rules.expand(B, -1, -1, -1), root.expand(B, -1)))
        dist.partition.sum().backward()
        for x in (root, rules, terms):
            x.grad = None

    return step


def build_step(job: Job) -> Callable[[], None]:
    """The measured call of a configuration (run in its own process by ``benchlib.run_in_child``)."""
    return torch_struct_step(job) if job.case == "torch-struct" else zoo_step(job)


def run(job: Job, plan: Plan) -> Measurement:
    result = run_in_child(build_step, job, plan.repeats, plan.budget_s)
    label = f"{job.case} {job.backend or ''} {job.options or ''}"
    print(f"  {label:36} {job.shape} -> {describe(result)}", file=sys.stderr, flush=True)
    return result


def check_log_partition() -> str:
    """Our exact log Z against torch-struct's SentCFG on one small grammar; exits if they disagree."""
    from torch_struct import SentCFG

    from zoo.inference import DenseGrammar, TreeDistribution

    s = Shape(4, 8, 5, 7)
    root, rules = dense_leaves(s)
    terms = terms_of(s)
    lengths = torch.tensor([8, 5, 2, 7])
    ours = TreeDistribution(DenseGrammar(root, rules), terms, lengths).log_partition
    theirs = SentCFG((terms, rules.expand(4, -1, -1, -1), root.expand(4, -1)), lengths=lengths).partition
    error = (ours - theirs).abs().max().item()
    if not error <= 1e-4:
        raise SystemExit(f"log Z check failed: torch-struct SentCFG differs from exact by {error:.3g}")
    return (
        "log Z check against torch-struct SentCFG at NT = 5, PT = 7, ragged lengths: "
        f"max difference {error:.2g}."
    )


# --- tables --------------------------------------------------------------------------------------------
def backends(NT: int) -> list[tuple[str, str, str | None, int, int]]:
    """(row name, grammar, backend, R, K) of table 1."""
    R, r, K = max(8, NT // 4), NT, max(2, NT // 10)
    return [
        ("exact", "dense", None, 0, 0),
        (f"low-rank (LPCFG, R = {R})", "low-rank", None, R, 0),
        (f"rank-space (TD-PCFG, r = {r})", "rank-space", None, r, 0),
        (f"randomized (K = {K} of NT)", "dense", "randomized", 0, K),
        (f"randomized on the LPCFG (R = {R}, K = {K})", "low-rank", "randomized", R, K),
    ]


TABLE1_NOTE = (
    "Median wall time of one `log_partition.sum().backward()` and its peak RSS growth; ratios against "
    "`exact` at the same size. One grammar shared by the batch (a PCFG); torch-struct's `SentCFG` gets the "
    "same dense grammar expanded to the batch. Low-rank and rank-space run their own parameterizations "
    "(same sizes, not the same distribution); randomized runs the dense grammar, and the LPCFG, with K - 1 "
    "top and 1 sampled label per span."
)


def table1(plan: Plan) -> Section:
    rows, measured, verdicts = [], [], []
    for NT, PT in plan.sizes:
        for T in plan.lengths:
            res = {}
            for name, case, backend, R, K in backends(NT):
                res[name] = run(Job(case, Shape(4, T, NT, PT, R, K), backend), plan)
            res["torch-struct 0.5 SentCFG"] = run(Job("torch-struct", Shape(4, T, NT, PT)), plan)
            rows += [[f"{NT} / {PT}", str(T), n, *cells(m, res["exact"], 1e-3, MB)] for n, m in res.items()]
            measured += list(res.values())
            if (NT, PT, T) == (30, 60, 20):
                ts, ex = res["torch-struct 0.5 SentCFG"], res["exact"]
                verdicts.append(
                    verdict(
                        "exact >= 20x faster than torch-struct SentCFG at (30, 60), T = 20, B = 4",
                        speedup(ts, ex),
                        20,
                        "torch-struct time / exact time",
                    )
                )
    text = paragraphs(
        "### Table 1: log Z + backward, B = 4, float32",
        TABLE1_NOTE,
        table(["NT / PT", "T", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )
    return Section(text, verdicts, measured)


TABLE2_NOTE = (
    "One TD-PCFG (U row-stochastic, V and W column-stochastic, as in Yang et al. 2021b), B = 4, both "
    "algorithms on the same tensors: the state-space CPD inside (beta = U gamma, then V^T beta and W^T "
    "beta per span: O(T^3 r + T^2 NT r)) and the rank-space inside (H = V^T U, I = W^T U once, then r x r "
    "per span: O(T^3 r + T^2 r^2 + NT r^2)). The once-per-grammar NT r^2 products do not shrink with the "
    "sentence, so the ratio grows with B T^2."
)


def table2(plan: Plan) -> Section:
    NT, PT, r = plan.big
    rows, measured, verdicts = [], [], []
    for T in plan.big_lengths:
        s = Shape(4, T, NT, PT, r)
        state = run(Job("rank-space", s, None, "state-space"), plan)
        rank = run(Job("rank-space", s), plan)
        rows += [
            [str(T), n, *cells(m, state, 1e-3, MB)]
            for n, m in (("state-space CPD", state), ("rank-space", rank))
        ]
        measured += [state, rank]
        if T == 30:
            verdicts.append(
                verdict(
                    f"rank-space >= 5x faster than state-space CPD at NT = {NT}, PT = {PT}, r = {r}, T = 30",
                    speedup(state, rank),
                    5,
                    "state-space time / rank-space time",
                )
            )
    text = paragraphs(
        f"### Table 2: rank-space against state-space inside, NT = {NT}, PT = {PT}, r = {r}, B = 4",
        TABLE2_NOTE,
        table(["T", "algorithm", "time (ms)", "time / state-space", "peak (MB)", "peak / state-space"], rows),
    )
    return Section(text, verdicts, measured)


def table3(plan: Plan) -> Section:
    NT, PT = plan.sizes[0]
    T = plan.lengths[0]
    S = NT + PT
    rows, measured, worst_growth, worst_share = [], [], 0.0, 0.0
    for name, case, backend, R, K in backends(NT):
        peaks = {}
        for B in plan.memory_batches:
            m = run(Job(case, Shape(B, T, NT, PT, R, K), backend), plan)
            measured.append(m)
            peaks[B] = m.peak_bytes
        cube = {B: 4 * B * T * T * S**3 for B in peaks}  # bytes of a B x T^2 x S^3 float32 tensor
        growth = max(
            peaks[b2] / peaks[b1] / (b2 / b1) for b1, b2 in zip(plan.memory_batches, plan.memory_batches[1:])
        )
        share = max(peaks[B] / cube[B] for B in peaks)
        worst_growth, worst_share = max(worst_growth, growth), max(worst_share, share)
        rows.append([name, *(num(peaks[B] / MB) for B in peaks), num(growth), f"{share:.2g}"])
    batches = plan.memory_batches
    text = paragraphs(
        f"### Table 3: peak memory (MB) against the batch size, NT / PT = {NT} / {PT}, T = {T}",
        "Growth = the largest ratio peak(2B) / (2 peak(B)) (1 = linear, below 1 = sub-linear); share = the "
        "largest peak / the bytes of one B x T^2 x S^3 float32 tensor.",
        table(["method", *(f"B = {B}" for B in batches), "growth", "share of B T^2 S^3"], rows),
    )
    verdicts = [
        verdict(
            "peak memory of every backend at most linear in B (growth)",
            worst_growth,
            1.1,
            "largest growth",
            True,
        ),
        verdict("peak memory never B x T^2 x S^3 (share of it)", worst_share, 0.1, "largest share", True),
    ]
    return Section(text, verdicts, measured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, as a smoke test")
    parser.add_argument("--write", action="store_true", help=f"also write its section of {DOCS}")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    prepare_environment()
    torch.set_num_threads(2)
    started, load_before = time.time(), os.getloadavg()[0]
    check = check_log_partition()
    with tempfile.TemporaryDirectory(prefix="bench_tree_") as copy:
        version = snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)
        sections = [table1(plan), table2(plan), table3(plan)]
    header = run_header(started, load_before, args.quick, plan, version)
    report = paragraphs(
        "## Trees (PCFG inside)",
        "\n".join([*header, f"- {check}"]),
        "### Targets",
        *(
            ["Quick run: targets evaluated at the quick shapes, not at those they name."]
            if args.quick
            else []
        ),
        "\n".join(v for s in sections for v in s.verdicts),
        *(s.text for s in sections),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_tree", report)
    if any(m.status.startswith("error") for s in sections for m in s.measurements):
        sys.exit(1)


if __name__ == "__main__":
    main()
