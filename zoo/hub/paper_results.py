"""Published numbers that model cards show beside ours (REFERENCE.md section 1, with each source).

One row per published result: the model class it compares with, the dataset name our results use
(``zoo.hub.cards.dataset_name``), our metric name it corresponds to (``test/ppl``, ``test/nll``,
``test/sentence_f1``, ``test/nll_sequence``, ``test/nll_sentence``; conventions in REFERENCE.md
section 2), and the paper.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperResult:
    model_class: str  # the zoo class it compares with (short name, e.g. "CategoricalHMM")
    dataset: str
    model: str  # as the paper names it
    setting: str  # size / rank as published
    metric: str  # our metric name
    value: float
    source: str


def _rows(model_class: str, dataset: str, metric: str, rows: list[tuple[str, str, float, str]]):
    return [PaperResult(model_class, dataset, m, s, metric, v, src) for m, s, v, src in rows]


CHIU_T1 = "Chiu et al. 2021, Table 1"
CHIU_T2 = "Chiu et al. 2021, Table 2"
CHIU_F2 = "Chiu et al. 2021, Fig. 2"
CHIU_T2_VIDEO = "Chiu et al. 2021, Table 2 (right)"
YANG = "Yang et al. 2022"
FU_T5 = "Fu et al. 2022, Table 5"

PAPER_RESULTS: list[PaperResult] = [
    *_rows(
        "CategoricalHMM",
        "ptb",
        "val/ppl",
        [
            ("softmax HMM", "2^14 states", 144.3, CHIU_T1),
            ("LHMM", "2^14 states, 2^11 features", 141.4, CHIU_T1),
            ("rank-space HMM", "2^14..2^15 states, rank 2048..8192", 135.6, YANG),
        ],
    ),
    *_rows(
        "CategoricalHMM",
        "ptb",
        "test/ppl",
        [
            ("softmax HMM", "2^14 states", 136.8, CHIU_T1),
            ("LHMM", "2^14 states, 2^11 features", 131.8, CHIU_T1),
            ("LHMM, swapped sizes", "2048 states, 2^14 features", 133.49, f"{YANG}, Sec. 5.2"),
            ("rank-space HMM", "2^14..2^15 states, rank 2048..8192", 126.4, YANG),
        ],
    ),
    *(
        PaperResult(
            "BernoulliHMM",
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
    *_rows(
        "PCFG",
        "ptb",
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
    *_rows(
        "PCFG",
        "ptb-wsj",
        "test/sentence_f1",
        [
            ("N-PCFG", "NT 30, PT 60 (best of runs)", 52.6, "Kim et al. 2019, code README"),
            ("C-PCFG", "NT 30, PT 60 (best of runs)", 60.1, "Kim et al. 2019, code README"),
            ("TN-PCFG", "NT 250, PT 500, rank 500 (mean)", 57.7, "Yang et al. 2021b"),
            ("rank-space PCFG", "NT 4500, PT 9000, rank 1000 (mean of 4)", 64.1, YANG),
        ],
    ),
    *_rows(
        "GaussianHSMM",
        "crosstask",
        "test/nll_sequence",
        [
            ("HSMM", "2^6 states", 1.428e5, CHIU_T2_VIDEO),
            ("HSMM", "2^7 states", 1.427e5, CHIU_T2_VIDEO),
            ("HSMM", "2^8 states", 1.426e5, CHIU_T2_VIDEO),
            ("LHSMM", "2^10 states, rank 2^4", 1.423e5, CHIU_T2_VIDEO),
        ],
    ),
    *_rows(
        "StructuredVAE",
        "mscoco",
        "test/nll_sentence",
        [
            ("FULL-100", "100 states, exact", 39.71, FU_T5),
            ("TOPK-100", "100 states, top-K", 39.76, FU_T5),
            ("RDP-100", "100 states, K1 = K2 = 10", 39.59, FU_T5),
            ("TOPK-2000", "2000 states, top-K", 39.84, FU_T5),
            ("RDP-2000", "2000 states, K1 = K2 = 200", 39.48, FU_T5),
        ],
    ),
]


def paper_results(model_class: str, dataset: str | None = None) -> list[PaperResult]:
    """The published rows for a zoo model class (short name), optionally on one dataset."""
    return [r for r in PAPER_RESULTS if r.model_class == model_class and dataset in (None, r.dataset)]
