"""Regenerate the linear-chain columns of Tables 2-4 of Fu, Cunningham & Lapata (2022).

"Scaling Structured Inference with Randomization" (ICML 2022) evaluates its randomized dynamic
programs (RDP) on simulated linear-chain CRFs (Sec. 5.1):

* Table 2: MSE of log Z (Alg. 1) and of the entropy (Alg. 3) over 100 runs against the exact DP, for
  TopK (k2 = 0, k1 = K) and RDP (k2 = 1, k1 = K - 1) with K a fraction of N, proposal Eq. 34;
* Table 3: bias and variance of the randomized forward's log Z (dense and long-tailed potentials);
* Table 4: MSE of log Z for the proposals uniform / local / global / local+global.

This script simulates its own potentials (see ``simulate`` and docs/rdp-tables.md), runs the
estimators of ``zoo.inference`` (``LinearChain(..., backend="randomized")``) and prints Markdown
tables with our numbers beside the paper's.

Usage:
    python scripts/rdp_tables.py            # N = 2000, Tables 2-4, a few minutes on one core
    python scripts/rdp_tables.py --write    # also write docs/rdp-tables.md
    python scripts/rdp_tables.py --large    # also N = 10000 for Tables 2-3 (~45 min, ~12 GB RAM)
"""

from __future__ import annotations

import argparse
import datetime
import math
import shlex
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from zoo.inference import EmbeddingChain, LinearChain, RDPOptions

from rdp_hypertree import hypertree_section, simulate_hypertrees

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "rdp-tables.md"
DTYPE = torch.float64

# --- the paper's numbers (copied from the text of Tables 2-4) -------------------------------------

REGIMES = ("dense", "intermediate", "long-tail")

# Table 2, rows "TOPK 20% N" ... "RDP 20%N (ours)"; columns "Linear-chain log Z" D / I / L and
# "Linear-chain Entropy" D / I / L, in the blocks "N = 2000" and "N = 10000".
PAPER_TABLE2 = {
    2000: {
        "log Z": {
            "TopK 20%": (3.874, 1.015, 0.162),
            "TopK 50%": (0.990, 0.251, 0.031),
            "RDP 1%": (0.146, 0.066, 0.076),
            "RDP 10%": (0.067, 0.033, 0.055),
            "RDP 20%": (0.046, 0.020, 0.026),
        },
        "entropy": {
            "TopK 20%": (443.7, 84.35, 8.011),
            "TopK 50%": (131.8, 22.100, 1.816),
            "RDP 1%": (5.925, 1.989, 0.691),
            "RDP 10%": (2.116, 1.298, 0.316),
            "RDP 20%": (1.326, 0.730, 0.207),
        },
    },
    10000: {
        "log Z": {
            "TopK 20%": (6.395, 6.995, 6.381),
            "TopK 50%": (2.134, 2.013, 1.647),
            "RDP 1%": (0.078, 0.616, 0.734),
            "RDP 10%": (0.024, 0.031, 0.024),
            "RDP 20%": (0.004, 0.003, 0.003),
        },
        "entropy": {
            "TopK 20%": (227.36, 171.97, 141.91),
            "TopK 50%": (85.063, 59.877, 46.853),
            "RDP 1%": (6.450, 6.379, 4.150),
            "RDP 10%": (0.513, 1.539, 0.275),
            "RDP 20%": (0.144, 0.080, 0.068),
        },
    },
}

# Table 3 (N = 2000: its TopK biases squared are Table 2's N = 2000 TopK MSEs), rows as Table 2;
# columns "Dense" Bias / Var. and "Long-tail" Bias / Var.
PAPER_TABLE3 = {
    "TopK 20%": {"dense": (-1.968, 0.0), "long-tail": (-0.403, 0.0)},
    "TopK 50%": {"dense": (-0.995, 0.0), "long-tail": (-0.177, 0.0)},
    "RDP 1%": {"dense": (-0.066, 0.141), "long-tail": (-0.050, 0.074)},
    "RDP 10%": {"dense": (-0.030, 0.066), "long-tail": (-0.027, 0.054)},
    "RDP 20%": {"dense": (-0.013, 0.046), "long-tail": (-0.003, 0.026)},
}

# Table 4, rows "Uniform", "LOCAL", "GLOBAL", "Local + Global"; columns Dense / Interm. / Long-tail.
# MSE of log Z; the paper states neither N nor K for this table.
PAPER_TABLE4 = {
    "uniform": (0.655, 11.05, 0.160),
    "local": (2.908, 9.171, 0.481),
    "global": (0.453, 0.096, 0.100),
    "local+global": (0.028, 0.017, 0.022),
}

# --- the simulation ----------------------------------------------------------------------------------

LENGTH = 10  # T, as in the paper's simulation
EMBED_DIM = 50  # h
TRANSITION_SCALE = 3.0  # log Psi(i, j) = 3 * minmax(e_i . e_j), in [0, 3], the same in every regime
# Mean entropy of the local emission distributions softmax(unary_t), as a fraction of log N. Chosen so
# that at N = 2000 the TopK-20% log Z bias comes out near the paper's (Table 3: -1.97 dense, -0.40
# long-tail; Table 2: sqrt(1.015) = 1.0 intermediate).
ENTROPY_TARGETS = {"dense": 0.84, "intermediate": 0.75, "long-tail": 0.61}


@dataclass
class Regime:
    """One simulated chain (batch 1) with its calibration and exact values."""

    name: str
    factors: EmbeddingChain
    unary_scale: float
    target_entropy: float  # nats
    local_entropy: float  # achieved mean entropy of softmax(unary_t)
    log_partition: float  # exact, float64
    entropy: float  # exact, float64
    float32_error: tuple[float, float]  # |float32 - float64| of (log Z, entropy), exact backend


def minmax(x: Tensor) -> Tensor:
    return (x - x.min()) / (x.max() - x.min())


def mean_local_entropy(unary: Tensor) -> float:
    """Mean over positions of the entropy of softmax(unary_t) (the local emission distribution)."""
    log_p = torch.log_softmax(unary, -1)
    return float(-(log_p.exp() * log_p).sum(-1).mean())


def simulate_embeddings(num_states: int, seed: int) -> tuple[Tensor, Tensor]:
    """State embeddings e_i ~ U(0,1)^h (N x h) and word embeddings r_t ~ U(0,1)^h (T x h)."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.rand(num_states, EMBED_DIM, generator=generator, dtype=DTYPE)
    words = torch.rand(LENGTH, EMBED_DIM, generator=generator, dtype=DTYPE)
    return states, words


def build_chain(states: Tensor, words: Tensor, unary_scale: float) -> EmbeddingChain:
    """unary[t, i] = s_u minmax(e_i . r_t), log Psi(i, j) = s_T minmax(e_i . e_j).

    The transition stays an ``EmbeddingChain``: s_T (e_i . e_j - lo) / (hi - lo) is the dot product of
    the scaled embeddings sqrt(s_T / (hi - lo)) e plus the constant -s_T lo / (hi - lo), which every
    path collects once per position 2..T, so it is added to the unary there.
    """
    gram = states @ states.T
    lo, hi = gram.min(), gram.max()
    del gram
    c = TRANSITION_SCALE / (hi - lo)
    unary = unary_scale * minmax(words @ states.T)  # T x N, min-max over all positions and states
    unary[1:] -= c * lo
    return EmbeddingChain(unary.unsqueeze(0), states * c.sqrt())


def calibrate_unary_scale(words_states: Tensor, target: float) -> float:
    """The s_u with mean_local_entropy(s_u minmax(e . r)) = target (monotone in s_u: bisection)."""
    scores = minmax(words_states)
    lo, hi = 0.0, 1.0
    while mean_local_entropy(hi * scores) > target:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_local_entropy(mid * scores) > target else (lo, mid)
    return 0.5 * (lo + hi)


def simulate(num_states: int, seed: int) -> list[Regime]:
    """The three regimes: the same embeddings, unary scales calibrated to the entropy targets."""
    states, words = simulate_embeddings(num_states, seed)
    regimes = []
    for name in REGIMES:
        target = ENTROPY_TARGETS[name] * math.log(num_states)
        scale = calibrate_unary_scale(words @ states.T, target)
        factors = build_chain(states, words, scale)
        exact = LinearChain(factors)
        log_z, entropy = exact.log_partition.item(), exact.entropy.item()
        single = LinearChain(EmbeddingChain(factors.unary.float(), factors.states.float()))
        error = (abs(single.log_partition.item() - log_z), abs(single.entropy.item() - entropy))
        regimes.append(
            Regime(name, factors, scale, target, mean_local_entropy(factors.unary[0]), log_z, entropy, error)
        )
    return regimes


# --- the estimators ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimator:
    """TopK (k2 = 0, k1 = K) or RDP (k2 = 1, k1 = K - 1) with K = fraction * N (Sec. 5.1)."""

    name: str
    fraction: float
    randomized: bool

    def sizes(self, num_states: int) -> tuple[int, int]:
        budget = round(self.fraction * num_states)
        return (budget - 1, 1) if self.randomized else (budget, 0)


ESTIMATORS = (
    Estimator("TopK 20%", 0.20, False),
    Estimator("TopK 50%", 0.50, False),
    Estimator("RDP 1%", 0.01, True),
    Estimator("RDP 10%", 0.10, True),
    Estimator("RDP 20%", 0.20, True),
)

TABLE4_BUDGET = 0.10  # K = 10% of N for Table 4


@dataclass(frozen=True)
class Stats:
    """Error statistics of estimates against the exact value; mse = bias^2 + var (as in the paper)."""

    mse: float
    bias: float
    var: float
    runs: int

    @classmethod
    def of(cls, estimates: Tensor, exact: float) -> Stats:
        error = estimates - exact
        return cls(float((error**2).mean()), float(error.mean()), float(error.var(correction=0)), len(error))


def derive_seed(*parts) -> int:
    """A stable seed for one (table, regime, estimator) cell."""
    return zlib.crc32(repr(parts).encode())


def run_estimates(
    factors: EmbeddingChain,
    k1: int,
    k2: int,
    proposal: str | Tensor,
    runs: int,
    seed: int,
    with_entropy: bool,
) -> Tensor:
    """runs x (1 or 2) estimates (log Z[, entropy]), one randomized LinearChain per run.

    With k2 = 0 (TopK) nothing is random, so a single run stands for all of them.
    """
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(runs if k2 > 0 else 1):
        options = RDPOptions(k1, k2, proposal, generator)
        dist = LinearChain(factors, backend="randomized", options=options)
        row = [dist.log_partition.item()]
        if with_entropy:
            row.append(dist.entropy.item())  # reuses the index sets of log_partition (Alg. 3)
        rows.append(row)
    return torch.tensor(rows, dtype=DTYPE)


def table2_results(regimes: list[Regime], runs: int, seed: int) -> dict:
    """{(estimator, regime): (log Z stats, entropy stats)}."""
    results = {}
    for regime in regimes:
        num_states = regime.factors.num_states
        for est in ESTIMATORS:
            k1, k2 = est.sizes(num_states)
            cell_seed = derive_seed(seed, "table2", num_states, regime.name, est.name)
            values = run_estimates(regime.factors, k1, k2, "local+global", runs, cell_seed, True)
            results[est.name, regime.name] = (
                Stats.of(values[:, 0], regime.log_partition),
                Stats.of(values[:, 1], regime.entropy),
            )
    return results


def table4_proposals(regime: Regime, states: Tensor) -> dict[str, str | Tensor]:
    """The paper's four proposals plus two diagnostics (tensor proposals, B x T x N)."""
    factors = regime.factors
    local = torch.softmax(factors.unary, -1)
    code_prior = torch.softmax(states.abs().sum(-1), -1).expand_as(local)
    marginals = LinearChain(factors).marginals
    return {
        "uniform": "uniform",
        "local": "local",
        "global": "global",
        "local+global": "local+global",
        "local+softmax(L1) (extra)": 0.5 * local + 0.5 * code_prior,
        "exact marginals (extra)": marginals.clamp_min(torch.finfo(DTYPE).tiny),
    }


def table4_settings(num_states: int) -> list[tuple[str, int, int]]:
    budget = round(TABLE4_BUDGET * num_states)
    half = budget // 2
    return [
        (f"K = 10% N = {budget}: k1 = {budget - 1}, k2 = 1", budget - 1, 1),
        (f"K = 10% N = {budget}: k1 = k2 = {half}", budget - half, half),
    ]


def table4_results(regimes: list[Regime], states: Tensor, runs: int, seed: int) -> dict:
    """{(setting label, proposal, regime): log Z stats}."""
    results = {}
    for regime in regimes:
        num_states = regime.factors.num_states
        proposals = table4_proposals(regime, states)
        for label, k1, k2 in table4_settings(num_states):
            for name, proposal in proposals.items():
                cell_seed = derive_seed(seed, "table4", num_states, regime.name, k1, k2, name)
                values = run_estimates(regime.factors, k1, k2, proposal, runs, cell_seed, False)
                results[label, name, regime.name] = Stats.of(values[:, 0], regime.log_partition)
    return results


# --- Markdown -------------------------------------------------------------------------------------------


def fmt(x: float, signed: bool = False) -> str:
    """Three decimals like the paper, fewer for large numbers, two significant digits below 0.001."""
    sign = "+" if signed and x != 0 else ""
    if 0 < abs(x) < 1e-3:
        return f"{x:{sign}.1e}"
    digits = 1 if abs(x) >= 100 else 2 if abs(x) >= 10 else 3
    return f"{x:{sign}.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def regime_section(regimes: list[Regime]) -> list[str]:
    num_states = regimes[0].factors.num_states
    rows = []
    for r in regimes:
        rows.append(
            [
                r.name,
                f"{r.unary_scale:.3f}",
                f"{r.target_entropy:.3f} ({ENTROPY_TARGETS[r.name]:.2f} log N)",
                f"{r.local_entropy:.3f}",
                f"{r.log_partition:.4f}",
                f"{r.entropy:.4f}",
                f"{r.entropy / LENGTH:.3f}",
                f"{r.float32_error[0]:.1e} / {r.float32_error[1]:.1e}",
            ]
        )
    header = [
        "regime",
        "unary scale s_u",
        "target local entropy",
        "achieved",
        "exact log Z",
        "exact entropy",
        "entropy / T",
        "float32 error (log Z / H)",
    ]
    return [
        f"### Simulated potentials, N = {num_states} (log N = {math.log(num_states):.3f})",
        "",
        *markdown_table(header, rows),
        "",
    ]


def table2_section(results: dict, num_states: int, runs: int) -> list[str]:
    paper = PAPER_TABLE2[num_states]
    lines = [f"### Table 2, linear chain, N = {num_states}: MSE over {runs} runs (ours / paper)", ""]
    for quantity, index in (("log Z", 0), ("entropy", 1)):
        rows = []
        for est in ESTIMATORS:
            k1, k2 = est.sizes(num_states)
            row = [est.name, str(k1), str(k2)]
            for j, regime in enumerate(REGIMES):
                row += [fmt(results[est.name, regime][index].mse), fmt(paper[quantity][est.name][j])]
            rows.append(row)
        header = ["estimator", "k1", "k2"]
        for regime in REGIMES:
            header += [f"{regime} ours", "paper"]
        lines += [f"MSE of {quantity}:", "", *markdown_table(header, rows), ""]
    return lines


def table3_section(results: dict, num_states: int, runs: int) -> list[str]:
    lines = [f"### Table 3, N = {num_states}: bias and variance of log Z over {runs} runs", ""]
    rows = []
    for est in ESTIMATORS:
        row = [est.name]
        for regime in ("dense", "long-tail"):
            ours = results[est.name, regime][0]
            paper = PAPER_TABLE3[est.name][regime] if num_states == 2000 else ("-", "-")
            row += [fmt(ours.bias, True), _cell(paper[0], True), fmt(ours.var), _cell(paper[1])]
        rows.append(row)
    header = ["estimator"]
    for regime in ("dense", "long-tail"):
        header += [f"{regime} bias", "paper", f"{regime} var", "paper"]
    lines += [*markdown_table(header, rows), ""]
    # not in the paper: the same decomposition for every regime and for the entropy
    rows = []
    for est in ESTIMATORS:
        row = [est.name]
        for regime in REGIMES:
            logz, ent = results[est.name, regime]
            row += [f"{fmt(logz.bias, True)} / {fmt(logz.var)}", f"{fmt(ent.bias, True)} / {fmt(ent.var)}"]
        rows.append(row)
    header = ["estimator"]
    for regime in REGIMES:
        header += [f"{regime}: log Z bias / var", "entropy bias / var"]
    lines += [
        "Not in the paper: bias / variance of log Z and of the entropy in all three regimes:",
        "",
        *markdown_table(header, rows),
        "",
    ]
    return lines


def _cell(x, signed: bool = False) -> str:
    return x if isinstance(x, str) else fmt(x, signed)


def table4_section(results: dict, num_states: int, runs: int) -> list[str]:
    lines = [f"### Table 4, N = {num_states}: MSE of log Z per proposal over {runs} runs", ""]
    settings = table4_settings(num_states)
    names = list(dict.fromkeys(name for _, name, _ in results))
    for label, _, _ in settings:
        rows = []
        for name in names:
            paper = PAPER_TABLE4.get(name)
            row = [name]
            for j, regime in enumerate(REGIMES):
                row += [fmt(results[label, name, regime].mse), fmt(paper[j]) if paper else "-"]
            rows.append(row)
        header = ["proposal"]
        for regime in REGIMES:
            header += [f"{regime} ours", "paper"]
        lines += [f"{label}:", "", *markdown_table(header, rows), ""]
    return lines


def discussion(regimes: list[Regime], t2: dict, t4: dict) -> list[str]:
    """Observations computed from the results (N = 2000), then the reasons for the differences."""
    num_states = regimes[0].factors.num_states
    cells = [(i, q, r) for i, q in ((0, "log Z"), (1, "entropy")) for r in REGIMES]

    def wins(better: str, worse: str) -> list[str]:
        return [f"{q}/{r}" for i, q, r in cells if t2[better, r][i].mse < t2[worse, r][i].mse]

    same_budget, small_budget = wins("RDP 20%", "TopK 20%"), wins("RDP 1%", "TopK 20%")
    rdp = [e.name for e in ESTIMATORS if e.randomized]
    shrinking = [
        f"{q}/{r}"
        for i, q, r in cells
        if all(t2[a, r][i].mse > t2[b, r][i].mse for a, b in zip(rdp, rdp[1:]))
    ]
    lines = [
        "## Discussion",
        "",
        f"Observations (N = {num_states}):",
        "",
        f"- **RDP vs TopK at the same budget K = 20% N**: RDP has the smaller MSE in {len(same_budget)} of "
        f"{len(cells)} cells ({', '.join(same_budget) or 'none'}); the paper: all cells.",
        f"- **RDP with K = 1% N vs TopK with 20% N**: RDP wins in {len(small_budget)} of {len(cells)} cells "
        f"({', '.join(small_budget) or 'none'}); the paper: all cells.",
        f"- **More budget, less error**: the RDP MSE falls from 1% to 10% to 20% of N in {len(shrinking)} of "
        f"{len(cells)} cells, as in the paper.",
    ]

    topk_logz = [t2[e.name, r][0].bias for e in ESTIMATORS if not e.randomized for r in REGIMES]
    topk_ent = [t2[e.name, r][1].bias for e in ESTIMATORS if not e.randomized for r in REGIMES]
    rdp_logz = {(e, r): t2[e, r][0] for e in rdp for r in REGIMES}
    positive = [
        f"{e}/{r} ({fmt(s.bias, True)}, standard error {fmt(math.sqrt(s.var / s.runs))})"
        for (e, r), s in rdp_logz.items()
        if s.bias > 0
    ]
    lines.append(
        f"- **Bias directions**: TopK underestimates log Z in every cell (it sums a subset of the paths; "
        f"biases {fmt(min(topk_logz), True)} to {fmt(max(topk_logz), True)}) and the entropy in "
        f"{sum(b < 0 for b in topk_ent)} of "
        f"{len(topk_ent)} cells. The randomized log Z has a negative mean error in "
        f"{len(rdp_logz) - len(positive)} of {len(rdp_logz)} cells, as Jensen's inequality requires for "
        "log Z_hat when E[Z_hat] = Z"
        + (f"; positive in {', '.join(positive)}." if positive else ".")
        + " The randomized entropy (Alg. 3, biased by construction) has mean errors "
        + "; ".join(f"{r}: {' / '.join(fmt(t2[e, r][1].bias, True) for e in rdp)}" for r in REGIMES)
        + " (RDP 1% / 10% / 20%)."
    )
    ratios = ", ".join(f"{r} {t2['TopK 50%', r][0].bias / t2['TopK 20%', r][0].bias:.2f}" for r in REGIMES)
    paper = PAPER_TABLE2[2000]["log Z"]
    paper_ratios = ", ".join(
        f"{r} {math.sqrt(paper['TopK 50%'][j] / paper['TopK 20%'][j]):.2f}" for j, r in enumerate(REGIMES)
    )
    lines.append(
        f"- **Tail weight**: the TopK 50% / TopK 20% log Z bias ratio is {ratios} here and {paper_ratios} in "
        "the paper (from the square roots of Table 2's MSEs): beyond the top 20% our distributions carry "
        "much less mass than the paper's, so TopK 50% looks far better here than there."
    )

    settings = table4_settings(num_states)
    for label, _, _ in settings:
        best = {r: min(PAPER_TABLE4, key=lambda name, r=r: t4[label, name, r].mse) for r in REGIMES}
        lines.append(
            f"- **Table 4, {label}**: best of the paper's four proposals: "
            + ", ".join(f"{r}: {p}" for r, p in best.items())
            + " (paper: local+global everywhere)."
        )
    prior = torch.softmax(regimes[0].factors.state_prior()[0], -1) * num_states
    k1 = settings[0][1]  # the k2 = 1 setting
    shares = ", ".join(f"{r.name} {global_tail_share(r.factors, k1):.0%}" for r in regimes)
    lines += [
        "- **The Eq. 34 global term is nearly uniform** for U(0,1) state embeddings: N times its entries "
        f"lie in [{float(prior.min()):.2f}, {float(prior.max()):.2f}]. So `global` ranks states almost "
        f"arbitrarily, and in `local+global` it dominates the tail: after removing the top {k1} states, "
        f"the global half supplies {shares} of the tail proposal's mass (mean over positions), i.e. the "
        "sampled state is drawn mostly uniformly and its importance weight is poorly matched to the "
        "exponentially varying summands. `local` alone does not have that problem here.",
        "",
    ]
    return lines + DISCUSSION_STATIC


def global_tail_share(factors: EmbeddingChain, k1: int) -> float:
    """Fraction of the local+global proposal's tail mass (outside its top k1) from the global half."""
    local = torch.softmax(factors.unary, -1)
    glob = torch.softmax(factors.state_prior(), -1).unsqueeze(1).expand_as(local)
    q = 0.5 * local + 0.5 * glob
    outside = torch.ones_like(q).scatter(-1, q.topk(k1, -1).indices, 0.0)
    return float(((0.5 * glob * outside).sum(-1) / (q * outside).sum(-1)).mean())


DISCUSSION_STATIC = [
    "Why our numbers differ from the paper's:",
    "",
    "- **The potentials are not the paper's.** The paper describes its regimes only as dense /",
    '  intermediate / long-tailed, "controlled by entropy". We fix the transition scale and set the',
    "  unary scale so that the mean local emission entropy hits a target; the targets were chosen so",
    "  that the TopK-20% log Z bias lands near the paper's (Table 3; Table 2 for intermediate). Our",
    "  scores e . r are bell-shaped (sums of 50 uniforms), so our tails are lighter (see the ratios",
    "  above) and TopK, especially TopK 50%, is much closer to exact than in the paper.",
    "- **k2 = 1 makes the RDP error heavy-tailed.** With one sampled state per position the whole tail",
    "  is estimated by one importance weight 1 / q_tail(delta). When the proposal is not matched to the",
    "  tail summands, most runs miss the heavy tail states (log Z_hat too low) and a few hit one with a",
    "  large weight: in log space a negative bias plus a large variance. With Eq. 34's nearly uniform",
    "  global half (above) that is what happens here, so our RDP needs a much larger K than the paper's",
    "  for the same error. Splitting the same K as k1 = k2 (second part of Table 4) cuts the error by one",
    "  to two orders of magnitude. The proposal matters at both splits, since it also chooses the top-k1",
    "  states that are summed exactly.",
    "- **Eq. 34 versus the public code.** The authors' public simulation code (read for understanding",
    "  only) mixes the local softmax with a softmax over the L1 norms, not with the linearly",
    "  normalized L1 norms of Eq. 34: a much sharper prior on the high-norm states, which dominate",
    "  e_i . e_j transitions. The row `local+softmax(L1) (extra)` uses such a prior (our own",
    "  implementation, a tensor proposal); `exact marginals (extra)` uses p(z_t = i), an oracle-like",
    "  proposal showing how small the error gets when the proposal matches the summands.",
    '- **Uniform proposal**: its "top k1" is whatever `torch.topk` returns on a constant vector, a',
    "  fixed arbitrary set of states, so with k2 = 1 it is by far the worst proposal here.",
    "- **TopK is deterministic**: one run stands for the 100 (variance 0, MSE = bias^2), as in Table 3.",
    "- **Definitions**: the paper's tables are internally consistent: Table 3's bias^2 + variance gives",
    "  Table 2's N = 2000 log Z MSEs (dense RDP 1%: 0.066^2 + 0.141 = 0.145 vs 0.146), so we use the same",
    "  definitions (variance with 1 / runs). Table 4's local+global row matches no Table 2 cell, so its",
    "  N and K are unknown; we use N = 2000 and K = 10% N.",
    "",
]


def header_section(args: argparse.Namespace, sizes: list[int], elapsed: float) -> list[str]:
    command = "python scripts/rdp_tables.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# RDP estimators on simulated chains and hypertrees (Fu, Cunningham & Lapata 2022, Tables 2-4)",
        "",
        "Generated by `scripts/rdp_tables.py`; do not edit by hand.",
        "",
        f"- Command: `{command.strip()}`",
        f"- Date: {now}; torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"runtime {elapsed / 60:.1f} min",
        f"- Seeds: embeddings `torch.Generator().manual_seed({args.seed})`; every table cell draws its index "
        f"sets from its own generator seeded with crc32 of (seed, table, N, regime, estimator).",
        f"- N = {', '.join(map(str, sizes))}; T = {LENGTH}; batch 1; {args.runs} runs per randomized cell; "
        "float64 throughout.",
        "",
        "## Simulation",
        "",
        f"State embeddings e_i ~ U(0,1)^{EMBED_DIM} and word embeddings r_t ~ U(0,1)^{EMBED_DIM}",
        f"(t = 1..{LENGTH}), the same in every regime. Log-potentials (an `EmbeddingChain`, so the",
        "randomized backend builds only K x K transition blocks and the global proposal is Eq. 34's",
        "normalized L1 norm):",
        "",
        "    unary[t, i]  = s_u * minmax(e_i . r_t)      (min-max over all t, i)",
        f"    log Psi(i,j) = s_T * minmax(e_i . e_j),  s_T = {TRANSITION_SCALE} in every regime",
        "",
        "(as `states = sqrt(s_T / (max - min)) e` with the constant `-s_T min / (max - min)` added to the",
        "unary of positions 2..T, which leaves the distribution and log Z exactly those of the min-max",
        "potentials). The regimes differ only in s_u, set by bisection so that the mean entropy of the local",
        "emission distributions softmax(unary_t) hits a target fraction of log N; the smaller the entropy,",
        "the more long-tailed the distribution, as in the paper. Exact values come from",
        "`LinearChain(factors)` in float64 (the last column shows how far float32 would be off).",
        'Estimators: `LinearChain(factors, backend="randomized", options=RDPOptions(k1, k2, proposal,',
        "generator))`, one object per run; its `log_partition` and `entropy` share the index sets.",
        "TopK: k2 = 0, k1 = K; RDP: k2 = 1, k1 = K - 1; proposal local+global (Eq. 34) unless stated.",
        "",
        "We use `EmbeddingChain` rather than a materialized `DenseChain`: its global proposal is Eq. 34's",
        "normalized L1 norm of the state embeddings, and the K x K blocks are built without an N x N matrix.",
        "",
        "Cost: the default run (N = 2000) takes 1-3 minutes on one core. `--large` adds N = 10000 for",
        "Tables 2-3 at ~11 GB of peak memory (exact entropy, TopK 50% entropy) and up to 10 s per run at",
        "K = 20% N: 6 min with `--runs 10`, roughly 45 min with the default 100 runs. One torch thread is",
        "the default: the per-run tensors are small and a second thread only adds synchronization overhead.",
        "",
    ]


# --- main --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--large", action="store_true", help="also N = 10000 for Tables 2 and 3")
    parser.add_argument("--write", action="store_true", help=f"also write {DOC_PATH}")
    parser.add_argument("--runs", type=int, default=100, help="runs per randomized cell (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: the per-run tensors are small, extra threads only add "
        "synchronization overhead)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.threads < 1:
        parser.error("--runs and --threads must be positive")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()

    sizes = [2000, 10000] if args.large else [2000]
    body, notes = [], []
    with torch.no_grad():
        for num_states in sizes:
            regimes = simulate(num_states, args.seed)
            t2 = table2_results(regimes, args.runs, args.seed)
            body += [f"## N = {num_states}", "", *regime_section(regimes)]
            body += table2_section(t2, num_states, args.runs)
            trees = simulate_hypertrees(
                num_states, LENGTH, EMBED_DIM, ENTROPY_TARGETS, args.seed, minmax, calibrate_unary_scale
            )
            body += hypertree_section(
                trees, ESTIMATORS, args.runs, args.seed, fmt, markdown_table, derive_seed
            )
            body += table3_section(t2, num_states, args.runs)
            if num_states == 2000:
                states, _ = simulate_embeddings(num_states, args.seed)
                t4 = table4_results(regimes, states, args.runs, args.seed)
                body += table4_section(t4, num_states, args.runs)
                notes = discussion(regimes, t2, t4)
            print(f"[N = {num_states} done after {time.perf_counter() - start:.0f} s]", file=sys.stderr)
    text = "\n".join(header_section(args, sizes, time.perf_counter() - start) + body + notes)
    print(text)
    if args.write:
        DOC_PATH.write_text(text + "\n")
        print(f"[wrote {DOC_PATH}]", file=sys.stderr)


if __name__ == "__main__":
    main()
