"""The HMM families' declarations (``zoo.hub.families``): the architectures of ``CategoricalHMM`` (PTB
language models) and ``BernoulliHMM`` (polyphonic music), their cards, results tables, the papers' numbers
and test inputs. Sizes and backend settings are those of the recipes (Yang et al. 2022, App. D, and the
small CPU variants); a test checks that every recipe's model is one of these architectures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from zoo.hub.families import (
    Family,
    PaperResult,
    paper_rows,
    register_architectures,
    register_family,
    token_batch,
)

TEMPLATES = Path(__file__).resolve().parent / "card_templates"  # package data: installs carry it
CHIU_T1 = "Chiu et al. 2021, Table 1"
CHIU_F2 = "Chiu et al. 2021, Fig. 2"
YANG = "Yang et al. 2022"


def _hmm(states: int, width: int, **extra: Any) -> dict[str, Any]:
    return {"num_states": states, "embedding_dim": width, "hidden_dim": width, **extra}


# --- CategoricalHMM: PTB language models (10k words incl. <unk> and <eos>) ---------------------------
register_architectures(
    "zoo.models.CategoricalHMM",
    "hmm_categorical",
    [
        (
            "n16384_d256",
            _hmm(16384, 256, vocab_size=10000),
            {
                "exact": {},
                "low-rank": {"rank": 2048, "feature_dropout": 0.1},
                "rank-space": {"rank": 4096},
                "randomized": {"k1": 1638, "k2": 1638, "proposal": "local+global"},
            },
            "rank-space",
            ("hmm/ptb-exact", "hmm/ptb-low-rank", "hmm/ptb-rank-space", "hmm/ptb-randomized"),
            "PTB HMM at the papers' size: 2^14 states (Chiu et al. 2021; Yang et al. 2022)",
        ),
        (
            "n1024_d128",
            _hmm(1024, 128, vocab_size=10000),
            {"exact": {}},
            "exact",
            ("hmm/ptb-exact-cpu-flagship",),
            "PTB softmax HMM, state dropout 0.5, trained 75 minutes on one CPU core: the zoo's CPU flagship",
        ),
        (
            "n4096_d64",
            _hmm(4096, 64, vocab_size=10000),
            {"rank-space": {"rank": 256}},
            "rank-space",
            ("hmm/ptb-rank-space-small",),
            "small PTB rank-space HMM for a CPU (the README's main job)",
        ),
        (
            "n1024_d64",
            _hmm(1024, 64, vocab_size=10000),
            {"low-rank": {"rank": 128}},
            "low-rank",
            ("hmm/ptb-low-rank-small",),
            "small PTB low-rank HMM for a CPU",
        ),
        (
            "n512_d64",
            _hmm(512, 64, vocab_size=10000),
            {"exact": {}, "randomized": {"k1": 32, "k2": 32}},
            "exact",
            ("hmm/ptb-exact-small", "hmm/ptb-randomized-small"),
            "small PTB softmax / randomized HMM for a CPU",
        ),
    ],
    dropout=0.1,
)

# --- BernoulliHMM: polyphonic music, 88 keys -------------------------------------------------------
register_architectures(
    "zoo.models.BernoulliHMM",
    "hmm_bernoulli",
    [
        (
            "n2048_d256",
            _hmm(2048, 256, num_keys=88),
            {"exact": {}, "low-rank": {"rank": 512}},
            "exact",
            tuple(
                f"hmm/{d}-{b}"
                for d in ("jsb", "nottingham", "musedata", "piano")
                for b in ("exact", "low-rank")
            ),
            "music HMM at the paper's size: 2^11 states, LHMM rank 2^9 (Chiu et al. 2021, Fig. 2)",
        ),
        (
            "n1024_d128",
            _hmm(1024, 128, num_keys=88),
            {"exact": {}},
            "exact",
            ("hmm/chorales-exact-cpu-flagship",),
            "Bach-chorales HMM with state dropout trained on one CPU core: the zoo's CPU music flagship",
        ),
        (
            "n256_d64",
            _hmm(256, 64, num_keys=88),
            {
                "exact": {},
                "low-rank": {"rank": 64},
                "rank-space": {"rank": 64},
                "randomized": {"k1": 16, "k2": 16},
            },
            "exact",
            tuple(f"hmm/chorales-{b}-small" for b in ("exact", "low-rank", "rank-space", "randomized")),
            "small Bach-chorales HMM for a CPU",
        ),
    ],
    dropout=0.1,
)


def frame_batch(model, generator: torch.Generator) -> dict:
    """0/1 frames of the model's keys, lengths 5, 3 and 4 (``Family.example_batch``)."""
    frames = (torch.rand(3, 5, model.config["num_keys"], generator=generator) < 0.3).float()
    return {"frames": frames, "lengths": torch.tensor([5, 3, 4])}


register_family(
    Family(
        "CategoricalHMM",
        TEMPLATES / "CategoricalHMM",
        "HMM language models on PTB (perplexity, <eos> counted)",
        ("test/ppl", "test/nll"),
        token_batch,
        paper_results=(
            *paper_rows(
                "ptb",
                "val/ppl",
                [
                    ("softmax HMM", "2^14 states", 144.3, CHIU_T1),
                    ("LHMM", "2^14 states, 2^11 features", 141.4, CHIU_T1),
                    ("rank-space HMM", "2^14..2^15 states, rank 2048..8192", 135.6, YANG),
                ],
            ),
            *paper_rows(
                "ptb",
                "test/ppl",
                [
                    ("softmax HMM", "2^14 states", 136.8, CHIU_T1),
                    ("LHMM", "2^14 states, 2^11 features", 131.8, CHIU_T1),
                    ("LHMM, swapped sizes", "2048 states, 2^14 features", 133.49, f"{YANG}, Sec. 5.2"),
                    ("rank-space HMM", "2^14..2^15 states, rank 2048..8192", 126.4, YANG),
                ],
            ),
        ),
        test_sizes={"vocab_size": 17, "num_states": 6, "embedding_dim": 8, "hidden_dim": 8},
    )
)
register_family(
    Family(
        "BernoulliHMM",
        TEMPLATES / "BernoulliHMM",
        "HMMs on the Bach chorales (NLL in nats per frame of 88 keys)",
        ("test/nll",),
        frame_batch,
        paper_results=(
            *(
                PaperResult(
                    dataset,
                    model,
                    "2^11 states" + (", rank 2^9" if model == "LHMM" else ""),
                    "test/nll",
                    value,
                    CHIU_F2,
                )  # fmt: skip
                for model, values in (("HMM", (2.43, 8.51, 7.34, 5.74)), ("LHMM", (2.60, 8.89, 7.60, 5.80)))
                for dataset, value in zip(("Nottingham", "Piano-midi.de", "MuseData", "JSB_Chorales"), values)
            ),
        ),
        test_sizes={"num_keys": 5, "num_states": 6, "embedding_dim": 8, "hidden_dim": 8},
    )
)
