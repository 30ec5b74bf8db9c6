"""Benchmark of decoding where it changed: the semi-Markov Viterbi, the Viterbi of chains whose low-rank
transitions change with the position (the rank-space HMM's) and of chains with few states and long
sequences, each against the implementation it replaced, and the PCFG's Viterbi against torch-struct's.

* Semi-Markov chains: ``SemiMarkovChain(DenseSemiMarkov(...)).argmax`` (the max-product forward keeps each
  segment's best duration; the walk back recomputes the previous state from one column) against
  ``general walk back``, the decoding before it, kept here as it was: log Z first (to raise where no
  segmentation covers a sequence), the max-product forward, then the walk back over (duration, previous
  state) pairs that sampling uses. torch-struct 0.5's ``SemiMarkovCRF.argmax`` where it fits.
* Rank-space HMM chains: ``viterbi.best_paths`` on the ``RankSpaceChain`` (each step's N x N formed a block
  of columns at a time) against ``dense form``, the same Viterbi on ``chain.dense()``, the
  B x (T-1) x N x N tensor it was run on before.
* Chains with few states: ``LinearChain(DenseChain(...)).argmax`` where ``viterbi_scan.pays`` (the max-plus
  forward as a parallel prefix and the walk back by pointer jumping, O(log T) rounds of tensor operations)
  against ``step by step``, the same Viterbi a position at a time, what these sizes ran before.
* PCFGs: ``TreeDistribution(DenseGrammar(...)).argmax`` (values-only max-plus CKY, each decomposition on
  the best tree recomputed) against torch-struct 0.5's ``SentCFG.argmax`` (the gradient of its max).

One thread; full lengths; float32; under ``torch.no_grad()``. Each shape's methods run in one spawned
process on the same potentials, taking turns (``benchlib.measure_interleaved``), with glibc's default
allocator settings; every method's best score is checked against the others' before timing.

Usage (from the repository root):
    python scripts/bench_decoding.py            # the full run (about 10 minutes)
    python scripts/bench_decoding.py --quick    # a small smoke test
    python scripts/bench_decoding.py --write    # also write its section of docs/benchmarks.md
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
from bench_semimarkov import Shape, dense_args, torch_struct_edges
from torch import Tensor

import benchlib
from benchlib import GB, MB, MEMORY_CAP, Measurement, cells, paragraphs, run_header, table
from report import write_section

THREADS = benchlib.THREADS = 1  # module level: also in each spawned configuration, before it measures
DOCS = benchlib.REPO / "docs" / "benchmarks.md"
COLUMNS = ["time (ms)", "time / ours", "peak (MB)", "peak / ours"]


@dataclass(frozen=True)
class Job:
    kind: str  # "semimarkov", "rank-space chain", "few-state chain" or "pcfg"
    B: int
    T: int
    N: int  # states, or nonterminals (PCFG)
    D_or_R: int  # the maximum duration (semi-Markov), the rank (chain) or the preterminals (PCFG)
    methods: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    semimarkov: tuple[tuple[str, int, int, int, int], ...]  # label, B, T, N, D
    fits: tuple[tuple[int, int, int, int], ...]  # B, T, N, D: torch-struct beside ours
    chains: tuple[tuple[int, int, int, int], ...]  # B, T, N, R
    few_states: tuple[tuple[int, int, int], ...]  # B, T, N
    grammars: tuple[tuple[int, int, int, int], ...]  # B, T, NT, PT
    repeats: int
    budget_s: float


SEMIMARKOV = ("ours", "general walk back")
CHAIN = ("ours", "dense form")
FEW_STATES = ("ours", "step by step")
PCFG = ("ours", "torch-struct 0.5")
FULL = Plan(
    semimarkov=(
        ("semi-CRF tagger", 32, 50, 16, 8),
        ("short segments", 8, 100, 8, 16),
        ("HSMM", 4, 256, 64, 32),
        ("HSMM", 4, 256, 256, 32),
    ),
    fits=((1, 16, 16, 32), (1, 16, 64, 8)),
    chains=((4, 32, 512, 64), (4, 32, 1024, 128), (4, 32, 2048, 256), (4, 32, 4096, 512)),
    few_states=((1, 5000, 4), (8, 1000, 3), (8, 1000, 8), (32, 1000, 4), (4, 200, 8)),
    grammars=((4, 20, 30, 60), (4, 40, 30, 60), (4, 20, 60, 120)),
    repeats=20,
    budget_s=60.0,
)
QUICK = Plan(
    semimarkov=(("short segments", 4, 40, 8, 8),),
    fits=((1, 8, 8, 8),),
    chains=((2, 16, 128, 16),),
    few_states=((2, 200, 3),),
    grammars=((2, 8, 5, 10),),
    repeats=3,
    budget_s=5.0,
)


# --- the semi-Markov decoders ----------------------------------------------------------------------------
def ours_semimarkov(factors, lengths: Tensor) -> tuple[Tensor, Tensor]:
    from zoo.inference import SemiMarkovChain

    dist = SemiMarkovChain(factors, lengths)
    return dist.max_score, dist.argmax


def general_walk_back(factors, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The decoding before the duration back-pointers, as it was."""
    from zoo.inference.semimarkov.engine import check_covered
    from zoo.inference.semimarkov.exact import dense_log_partition, dense_problem
    from zoo.inference.semimarkov.forward import backtrack, factorized_choice, forward
    from zoo.inference.semiring import Max

    check_covered(dense_log_partition(factors, lengths), lengths, factors.max_duration)
    problem = dense_problem(factors)
    score, ends, _, offsets = forward(problem, lengths, semiring=Max)
    choice = factorized_choice(problem, ends, factors.transition_columns, offsets)
    segmentation, _ = backtrack(ends, None, choice, lengths, factors.max_duration, 1, noise=False)
    return score, segmentation[0]


def torch_struct_semimarkov(edges: Tensor, lengths: Tensor) -> Tensor:
    """torch-struct's best segmentation (the gradient of its max), in our layout: the state at each
    segment's start, -1 elsewhere."""
    import warnings

    from torch_struct import SemiMarkovCRF

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        parts = SemiMarkovCRF(edges, lengths=lengths + 1).argmax  # B x T x (D+1) x N x N, one-hot
    b, s, _, z, _ = parts.nonzero(as_tuple=True)
    segmentation = torch.full(parts.shape[:2], -1, dtype=torch.long)
    segmentation[b, s] = z
    return segmentation


def semimarkov_calls(job: Job) -> dict[str, Callable[[], None]]:
    from zoo.inference import DenseSemiMarkov
    from zoo.inference.semimarkov.engine import segmentation_score

    args = dense_args(Shape(job.B, job.T, job.N, job.D_or_R))
    factors, lengths = DenseSemiMarkov(*args), torch.full((job.B,), job.T)
    calls = {
        "ours": lambda: ours_semimarkov(factors, lengths),
        "general walk back": lambda: general_walk_back(factors, lengths),
    }
    edges = torch_struct_edges(*args) if "torch-struct 0.5" in job.methods else None
    calls["torch-struct 0.5"] = lambda: torch_struct_semimarkov(edges, lengths)
    with torch.no_grad():
        best, _ = ours_semimarkov(factors, lengths)
        for method in job.methods[1:]:
            found = calls[method]()
            found = found[1] if isinstance(found, tuple) else found
            check_score(method, segmentation_score(factors, found, lengths), best)
    return {method: no_grad(calls[method]) for method in job.methods}


# --- the chain decoders ----------------------------------------------------------------------------------
def rank_space_chain(B: int, T: int, N: int, R: int):
    """A rank-space HMM's chain: softmax U (rows) and V (columns), emission log-weights N(0, 3^2)."""
    from zoo.inference import RankSpaceChain

    start = torch.rand(N)
    U, V = torch.randn(N, R).softmax(-1), torch.randn(N, R).softmax(0)
    return RankSpaceChain(start / start.sum(), U, V, 3 * torch.randn(B, T, R))


def chain_calls(job: Job) -> dict[str, Callable[[], None]]:
    from zoo.inference.chain.engine import sequence_score
    from zoo.inference.chain.viterbi import best_paths

    chain = rank_space_chain(job.B, job.T, job.N, job.D_or_R)
    lengths = torch.full((job.B,), job.T)
    calls = {
        "ours": lambda: best_paths(chain, lengths),
        "dense form": lambda: best_paths(chain.dense(), lengths),
    }
    if job.N <= 1024:  # the check builds the dense form, as the baseline does
        with torch.no_grad():
            best = sequence_score(chain, calls["ours"](), lengths)
            check_score("dense form", sequence_score(chain, calls["dense form"](), lengths), best)
    return {method: no_grad(calls[method]) for method in job.methods}


def few_state_calls(job: Job) -> dict[str, Callable[[], None]]:
    """The Viterbi of a dense chain (shared transition, N(0, 1) scores) as the O(log T) scan and step by
    step (``viterbi_scan.pays`` set to say no); the step-by-step paths score the scan's best."""
    from zoo.inference import DenseChain, LinearChain
    from zoo.inference.chain import viterbi_scan
    from zoo.inference.chain.engine import sequence_score

    if not viterbi_scan.pays(job.B, job.T, job.N):
        raise SystemExit(f"the scan is not taken at B = {job.B}, T = {job.T}, N = {job.N}")
    chain = DenseChain(torch.randn(job.B, job.T, job.N), torch.randn(job.N, job.N))
    lengths = torch.full((job.B,), job.T)
    pays = viterbi_scan.pays

    def step_by_step() -> Tensor:
        viterbi_scan.pays = lambda batch, length, states: False
        try:
            return LinearChain(chain, lengths).argmax
        finally:
            viterbi_scan.pays = pays

    calls = {"ours": lambda: LinearChain(chain, lengths).argmax, "step by step": step_by_step}
    with torch.no_grad():
        best = sequence_score(chain, calls["ours"](), lengths)
        check_score("step by step", sequence_score(chain, step_by_step(), lengths), best)
    return {method: no_grad(calls[method]) for method in job.methods}


# --- the PCFG decoders -----------------------------------------------------------------------------------
def pcfg_calls(job: Job) -> dict[str, Callable[[], None]]:
    """Ours and torch-struct's Viterbi on one grammar shared by the batch (``bench_tree``'s), full
    lengths; torch-struct's best score checked against ours."""
    import warnings

    from bench_tree import Shape as TreeShape
    from bench_tree import dense_leaves, terms_of
    from torch_struct import SentCFG

    from zoo.inference import DenseGrammar, TreeDistribution

    shape = TreeShape(job.B, job.T, job.N, job.D_or_R)
    root, rules = dense_leaves(shape)
    terms = terms_of(shape)
    batched = (terms, rules.expand(job.B, -1, -1, -1), root.expand(job.B, -1))
    theirs = [x.clone().requires_grad_() for x in batched]

    def torch_struct_argmax():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")
            return SentCFG(tuple(theirs)).argmax

    def ours():
        with torch.no_grad():
            return TreeDistribution(DenseGrammar(root, rules), terms).argmax

    with torch.no_grad():
        best = TreeDistribution(DenseGrammar(root, rules), terms).max_score
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        check_score("torch-struct 0.5", SentCFG(tuple(theirs)).max.detach(), best)
    return {"ours": ours, "torch-struct 0.5": torch_struct_argmax}


def dense_form_bytes(job: Job) -> float:
    """What the dense form needs at least: log Psi, B x (T-1) x N x N, and the log features it is built from,
    B x (T-1) x N x R, in float32."""
    return 4 * job.B * (job.T - 1) * job.N * (job.N + job.D_or_R)


# --- running and checking --------------------------------------------------------------------------------
def no_grad(call: Callable[[], object]) -> Callable[[], None]:
    def step() -> None:
        with torch.no_grad():
            call()

    return step


def check_score(method: str, found: Tensor, best: Tensor) -> None:
    """Exit if ``method``'s decoding scores below our best (float32: by more than 1e-5 relative)."""
    gap = (best - found).abs().max().item()
    if gap > 1e-5 * best.abs().max().item():
        raise SystemExit(f"decoding check failed: {method}'s paths score up to {gap:.3g} from ours")


def build_step(job: Job) -> dict[str, Callable[[], None]]:
    """The calls of one shape, built from the same seed (run in their own process)."""
    torch.manual_seed(0)
    calls = {
        "semimarkov": semimarkov_calls, "rank-space chain": chain_calls, "few-state chain": few_state_calls,
        "pcfg": pcfg_calls,
    }  # fmt: skip
    return calls[job.kind](job)


def run(job: Job, plan: Plan) -> dict[str, Measurement]:
    return benchlib.run_methods(build_step, job, plan.repeats, plan.budget_s)


def rows_of(label: str, results: dict[str, Measurement]) -> list[list[str]]:
    return [[label, method, *cells(m, results["ours"], 1e-3, MB)] for method, m in results.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run, as a smoke test")
    parser.add_argument("--write", action="store_true", help=f"also write the report to {DOCS}")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    benchlib.prepare_environment()
    started, load_before = time.time(), os.getloadavg()[0]
    semimarkov, fits, chains, few_states, grammars = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench_decoding_") as copy:
        version = benchlib.snapshot_zoo(Path(copy))
        sys.path.insert(0, copy)  # ahead of the editable install's finder, in every spawned configuration
        for label, B, T, N, D in plan.semimarkov:
            job = Job("semimarkov", B, T, N, D, SEMIMARKOV)
            semimarkov += rows_of(f"{label}: B = {B}, T = {T}, N = {N}, D = {D}", run(job, plan))
        for B, T, N, D in plan.fits:
            job = Job("semimarkov", B, T, N, D, (*SEMIMARKOV, "torch-struct 0.5"))
            fits += rows_of(f"B = {B}, T = {T}, N = {N}, D = {D}", run(job, plan))
        for B, T, N, R in plan.chains:
            job = Job("rank-space chain", B, T, N, R, CHAIN)
            need = dense_form_bytes(job)
            if need > MEMORY_CAP:
                job = Job("rank-space chain", B, T, N, R, ("ours",))
            results = run(job, plan)
            if need > MEMORY_CAP:
                results["dense form"] = Measurement(status=f"OOM (skipped: needs > {need / GB:,.0f} GB)")
            chains += rows_of(f"B = {B}, T = {T}, N = {N}, R = {R}", results)
        for B, T, N in plan.few_states:
            results = run(Job("few-state chain", B, T, N, 0, FEW_STATES), plan)
            few_states += rows_of(f"B = {B}, T = {T}, N = {N}", results)
        for B, T, NT, PT in plan.grammars:
            results = run(Job("pcfg", B, T, NT, PT, PCFG), plan)
            grammars += rows_of(f"B = {B}, T = {T}, NT = {NT}, PT = {PT}", results)
    header = run_header(started, load_before, args.quick, plan, version)
    report = paragraphs(
        "## Decoding",
        "\n".join(header),
        "One thread. Median wall time of one decoding under `torch.no_grad()` (float32, full lengths) and "
        "its peak RSS growth; ratios against ours at the same shape. Each shape's methods run in one "
        "process on the same potentials, taking turns, with glibc's default allocator settings; before "
        "timing, every method's paths were scored and found to reach our best score (within 1e-5 "
        "relative; the dense form was checked up to N = 1024).",
        "### Semi-Markov Viterbi",
        "`ours`: `SemiMarkovChain(DenseSemiMarkov(...)).argmax` (the max-product forward keeps each "
        "segment's best duration; the walk back recomputes the previous state from one column). "
        "`general walk back`: the decoding it replaced, as it was: log Z first (the coverage check), the "
        "max-product forward, then the walk back over (duration, previous state) pairs that sampling uses. "
        "The HSMMs of `bench_semimarkov.py` (Gaussian-like frame scores, no self-transitions); with "
        "random potentials most segments are one or two frames long, what a semi-CRF tagger decodes.",
        table(["shape", "method", *COLUMNS], semimarkov),
        "### Semi-Markov Viterbi, where torch-struct fits",
        "torch-struct 0.5's `SemiMarkovCRF(edges).argmax` (the gradient of its max through its "
        "parallel scan over (D N) x (D N) blocks: see the semi-Markov section).",
        table(["shape", "method", *COLUMNS], fits),
        "### Viterbi of rank-space HMM chains",
        "`ours`: `viterbi.best_paths` on the `RankSpaceChain` (each step's N x N log-potentials formed a "
        "block of columns at a time by a guarded product, the walk back one column). `dense form`: the "
        "same Viterbi on `chain.dense()`, the B x (T-1) x N x N tensor decoding ran on before. Rank R = "
        "N / 8; softmax U and V, emission log-weights N(0, 3^2). Both take O(T N^2 R) time.",
        table(["shape", "method", *COLUMNS], chains),
        "### Viterbi of chains with few states",
        "`ours`: `LinearChain(DenseChain(unary, transition)).argmax`, which at these sizes (few states, long "
        "sequences, a small batch: `viterbi_scan.pays`) runs the max-plus forward as a parallel prefix and "
        "the walk back by pointer jumping, O(log T) rounds of tensor operations and O(T N^3) work. `step by "
        "step`: the same Viterbi a position at a time (a few tensor operations a position), what these sizes "
        "ran before. A shared N x N transition and unary scores N(0, 1).",
        table(["shape", "method", *COLUMNS], few_states),
        "### PCFG Viterbi",
        "`ours`: `TreeDistribution(DenseGrammar(root, rules), terms).argmax` (values-only max-plus CKY: the "
        "best pair of children over the splits, then the rules over label pairs; each decomposition on the "
        "best tree recomputed from the chart). torch-struct 0.5: `SentCFG((terms, rules, root)).argmax`, the "
        "gradient of its max (its inputs require grad); its best score equals ours. `bench_tree.py`'s "
        "grammar: log-softmax rules and terms, one grammar shared by the batch.",
        table(["shape", "method", *COLUMNS], grammars),
    )
    print(report)
    if args.write:
        write_section(DOCS, "bench_decoding", report)


if __name__ == "__main__":
    main()
