"""The PCFG family's declarations (``zoo.hub.families``): its architectures (PTB language models and
unsupervised parsers), card, results table, the papers' numbers and test inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.hub.families import Family, paper_rows, register_architectures, register_family, token_batch

TEMPLATES = Path(__file__).resolve().parent / "card_templates"  # package data: installs carry it

CHIU_T2 = "Chiu et al. 2021, Table 2"
YANG = "Yang et al. 2022"


def _pcfg(nt: int, pt: int, width: int) -> dict[str, Any]:
    return {
        "vocab_size": 10000,
        "num_nonterminals": nt,
        "num_preterminals": pt,
        "embedding_dim": width,
        "hidden_dim": width,
    }


# --- PCFG: PTB language models and unsupervised parsers ---------------------------------------------
register_architectures(
    "zoo.models.PCFG",
    "pcfg",
    [
        (
            "nt30_pt60_d256",
            _pcfg(30, 60, 256),
            {"exact": {}, "low-rank": {"rank": 8}},
            "exact",
            (
                "pcfg/ptb-exact-30-60",
                "pcfg/wsj-exact-30-60",
                *(f"pcfg/ptb-low-rank-30-60{r}" for r in ("", "-r16", "-r32", "-r64")),
            ),
            "N-PCFG / LPCFG at Kim et al. 2019's size (Chiu et al. 2021, Table 2)",
        ),
        (
            "nt60_pt120_d256",
            _pcfg(60, 120, 256),
            {"exact": {}, "low-rank": {"rank": 32}},
            "exact",
            ("pcfg/ptb-exact-60-120", "pcfg/ptb-low-rank-60-120"),
            "N-PCFG / LPCFG, 60 / 120 symbols (Chiu et al. 2021, Table 2)",
        ),
        (
            "nt100_pt200_d256",
            _pcfg(100, 200, 256),
            {"exact": {}, "low-rank": {"rank": 64}, "randomized": {"k1": 20, "k2": 20}},
            "exact",
            ("pcfg/ptb-exact-100-200", "pcfg/ptb-low-rank-100-200", "pcfg/ptb-randomized-100-200"),
            "N-PCFG / LPCFG / randomized inside, 100 / 200 symbols (Chiu et al. 2021, Table 2)",
        ),
        (
            "nt250_pt500_d256",
            _pcfg(250, 500, 256),
            {"rank-space": {"rank": 500}},
            "rank-space",
            ("pcfg/ptb-rank-space-250-500",),
            "TN-PCFG, 250 / 500 symbols, rank 500 (Yang et al. 2021b)",
        ),
        (
            "nt4500_pt9000_d256",
            _pcfg(4500, 9000, 256),
            {"rank-space": {"rank": 1000}},
            "rank-space",
            ("pcfg/ptb-rank-space-4500-9000",),
            "rank-space PCFG, 4500 / 9000 symbols, rank 1000 (Yang et al. 2022)",
        ),
        (
            "nt1000_pt2000_d64",
            _pcfg(1000, 2000, 64),
            {"rank-space": {"rank": 500}},
            "rank-space",
            ("pcfg/ptb-rank-space-cpu-flagship",),
            "rank-space PCFG trained for hours on one CPU core: the zoo's CPU flagship grammar",
        ),
        (
            "nt10_pt20_d64",
            _pcfg(10, 20, 64),
            {
                "exact": {},
                "low-rank": {"rank": 8},
                "rank-space": {"rank": 32},
                "randomized": {"k1": 3, "k2": 3},
            },
            "exact",
            tuple(f"pcfg/ptb-{b}-small" for b in ("exact", "low-rank", "rank-space", "randomized")),
            "small PTB PCFG for a CPU",
        ),
    ],
)


register_family(
    Family(
        "PCFG",
        TEMPLATES / "PCFG",
        "PCFGs on PTB (perplexity, one end token per sentence; sentence F1 (%) on the synthetic grammar)",
        ("test/ppl", "test/nll", "synthetic/sentence_f1"),
        token_batch,
        paper_results=(
            *paper_rows(  # Kim et al. 2019's PTB (WSJ 2-21 / 22 / 23 trees), not Mikolov's text
                "ptb-wsj",
                "test/ppl",
                [
                    ("PCFG", "NT 30, PT 60", 252.60, CHIU_T2),
                    ("LPCFG", "NT 30, PT 60, 8 features", 247.02, CHIU_T2),
                    ("PCFG", "NT 60, PT 120", 234.01, CHIU_T2),
                    ("LPCFG", "NT 60, PT 120, 32 features", 213.81, CHIU_T2),
                    ("PCFG", "NT 100, PT 200", 191.08, CHIU_T2),
                    ("LPCFG", "NT 100, PT 200, 64 features", 194.25, CHIU_T2),
                ],
            ),
            *paper_rows(
                "ptb-wsj",
                "test/sentence_f1",
                [
                    ("N-PCFG", "NT 30, PT 60 (best of runs)", 52.6, "Kim et al. 2019, code README"),
                    ("C-PCFG", "NT 30, PT 60 (best of runs)", 60.1, "Kim et al. 2019, code README"),
                    ("TN-PCFG", "NT 250, PT 500, rank 500 (mean)", 57.7, "Yang et al. 2021b"),
                    ("rank-space PCFG", "NT 4500, PT 9000, rank 1000 (mean of 4)", 64.1, YANG),
                ],
            ),
        ),
        test_sizes={
            "vocab_size": 17,
            "num_nonterminals": 3,
            "num_preterminals": 4,
            "embedding_dim": 8,
            "hidden_dim": 8,
        },
    )
)
