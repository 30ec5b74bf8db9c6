"""The HSMM family's declarations (``zoo.hub.families``): the architectures of ``GaussianHSMM`` (CrossTask
videos, smartwatch recordings), its card, results table, the papers' numbers and test inputs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from zoo.hub.families import Family, paper_rows, register_architectures, register_family

TEMPLATES = Path(__file__).resolve().parent / "card_templates"  # package data: installs carry it

CHIU_T2_VIDEO = "Chiu et al. 2021, Table 2 (right)"


def _hsmm(states: int, duration: int, input_dim: int, feature_dim: int, width: int) -> tuple[str, dict]:
    """(size, config) of a GaussianHSMM: the name's size ``n<states>_dur<D>_in<raw>_f<modelled>`` and
    the arguments that shape its weights (the input projection's included)."""
    config = {
        "num_states": states,
        "max_duration": duration,
        "input_dim": input_dim,
        "feature_dim": feature_dim,
        "embedding_dim": width,
        "hidden_dim": width,
    }
    return f"n{states}_dur{duration}_in{input_dim}_f{feature_dim}_d{width}", config


def _crosstask(states: int) -> tuple[str, dict]:
    return _hsmm(states, 60, 3200, 200, 256)


# --- GaussianHSMM: CrossTask videos (3200-dim features, PCA to 200 fitted at zoo fit; D = 60 s) ------
register_architectures(
    "zoo.models.GaussianHSMM",
    "hsmm_gaussian",
    [
        (
            *_crosstask(64),
            {"exact": {}},
            "exact",
            ("hsmm/crosstask-exact-64",),
            "CrossTask softmax HSMM, 2^6 states (Chiu et al. 2021, Table 2)",
        ),
        (
            *_crosstask(128),
            {"exact": {}, "low-rank": {"rank": 128}},
            "exact",
            ("hsmm/crosstask-exact-128", "hsmm/crosstask-low-rank-128-r128"),
            "CrossTask HSMM / LHSMM, 2^7 states, LHSMM rank 2^7 (Chiu et al. 2021, Table 2)",
        ),
        (
            *_crosstask(256),
            {"exact": {}, "low-rank": {"rank": 64}},
            "exact",
            ("hsmm/crosstask-exact-256", "hsmm/crosstask-low-rank-256-r64"),
            "CrossTask HSMM / LHSMM, 2^8 states, LHSMM rank 2^6 (Chiu et al. 2021, Table 2)",
        ),
        (
            *_crosstask(512),
            {"low-rank": {"rank": 32}},
            "low-rank",
            ("hsmm/crosstask-low-rank-512-r32",),
            "CrossTask LHSMM, 2^9 states, rank 2^5 (Chiu et al. 2021, Table 2)",
        ),
        (
            *_crosstask(1024),
            {"low-rank": {"rank": 16}, "rank-space": {"rank": 128}, "randomized": {"k1": 64, "k2": 64}},
            "low-rank",
            (
                "hsmm/crosstask-low-rank-1024-r16",
                "hsmm/crosstask-rank-space-1024-r128",
                "hsmm/crosstask-rank-space-1024-r16",
                "hsmm/crosstask-randomized-1024",
            ),
            "CrossTask LHSMM, 2^10 states, rank 2^4 (Chiu et al. 2021, Table 2); rank-space, randomized",
        ),
    ],
    dropout=0.1,
)

# --- GaussianHSMM: seglearn's smartwatch IMU recordings (12 features, each recording standardized; one
# frame per 2 s window, D = 32 frames) ------------------------------------------------------------------
register_architectures(
    "zoo.models.GaussianHSMM",
    "hsmm_gaussian",
    [
        (
            *_hsmm(8, 32, 12, 12, 32),
            {
                "exact": {"self_transitions": False},
                "low-rank": {"rank": 4, "self_transitions": False},
                "rank-space": {"rank": 8},  # always allows self-transitions
                "randomized": {"k1": 2, "k2": 2, "self_transitions": False},
            },
            "exact",
            tuple(f"hsmm/smartwatch-{b}-small" for b in ("exact", "low-rank", "rank-space", "randomized")),
            "smartwatch exercise segmentation for a CPU: 8 states, Poisson durations up to 64 s",
        ),
    ],
    standardize_sequences=True,
    duration="poisson",
)


def feature_batch(model, generator: torch.Generator) -> dict:
    """Raw feature frames of the model's input size, lengths 5, 3 and 4 (``Family.example_batch``)."""
    features = torch.randn(
        3, 5, model.config["input_dim"] or model.config["feature_dim"], generator=generator
    )
    return {"features": features, "lengths": torch.tensor([5, 3, 4])}


register_family(
    Family(
        "GaussianHSMM",
        TEMPLATES / "GaussianHSMM",
        "HSMMs on the smartwatch recordings (NLL in nats per frame; frame accuracy, boundary F1, "
        "segments / known)",
        ("test/nll", "test/frame_accuracy", "test/boundary_f1", "test/segment_ratio"),
        feature_batch,
        paper_results=(
            *paper_rows(
                "crosstask",
                "test/nll_sequence",
                [
                    ("HSMM", "2^6 states", 1.428e5, CHIU_T2_VIDEO),
                    ("HSMM", "2^7 states", 1.427e5, CHIU_T2_VIDEO),
                    ("HSMM", "2^8 states", 1.426e5, CHIU_T2_VIDEO),
                    ("LHSMM", "2^10 states, rank 2^4", 1.423e5, CHIU_T2_VIDEO),
                ],
            ),
        ),
        test_sizes={
            "num_states": 4,
            "max_duration": 3,
            "input_dim": 5,
            "feature_dim": 3,
            "embedding_dim": 8,
            "hidden_dim": 8,
        },
    )
)
