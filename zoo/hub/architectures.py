"""The built-in architectures, one block per family (names: ``zoo.hub.registry``'s docstring).

Sizes and backend settings are those of the recipes (recipes/*.yaml; papers' sizes from
REFERENCE.md section 3, and the small CPU variants); a test checks that every recipe's model is one of
these architectures with one of its backends. Adding a family: one ``_family(...)`` block below
(docs/zoo-api.md).
"""

from __future__ import annotations

from typing import Any

from zoo.hub.registry import Architecture, register_architecture


def _family(class_path: str, prefix: str, entries: list[tuple[str, dict, dict, str, tuple, str]], **shared):
    """Register ``prefix_<size>`` architectures of one class: (size, config, backends, default backend,
    recipes, description) each; ``shared`` arguments go into every architecture's ``defaults``."""
    for size, config, backends, default, recipes, description in entries:
        register_architecture(
            Architecture(
                name=f"{prefix}_{size}",
                class_path=class_path,
                config=config,
                backends=backends,
                default_backend=default,
                defaults=dict(shared),
                recipes=tuple(f"recipes/{r}.yaml" for r in recipes),
                description=description,
            )
        )


def _hmm(states: int, width: int, **extra: Any) -> dict[str, Any]:
    return {"num_states": states, "embedding_dim": width, "hidden_dim": width, **extra}


def _pcfg(nt: int, pt: int, width: int) -> dict[str, Any]:
    return {
        "vocab_size": 10000,
        "num_nonterminals": nt,
        "num_preterminals": pt,
        "embedding_dim": width,
        "hidden_dim": width,
    }


# --- CategoricalHMM: PTB language models (10k words incl. <unk> and <eos>) ---------------------------
_family(
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
_family(
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

# --- PCFG: PTB language models and unsupervised parsers ---------------------------------------------
_family(
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
_family(
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
_family(
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


def _vae(
    states: int, layers: int, encoder: int, heads: int, lstm: int, width: int, shortlist: int | None = None
) -> tuple[str, dict]:
    """(size, config) of a StructuredVAE: ``n<states>_enc<layers>x<encoder width>_lstm<decoder hidden>``,
    ``_v<K>`` with a decoder shortlist of K words, and ``d<width>`` (state and decoder embeddings); GPT-2
    ids, 1024 positions."""
    config = {
        "num_states": states,
        "vocab_size": 50257,
        "encoder_layers": layers,
        "encoder_dim": encoder,
        "encoder_heads": heads,
        "max_positions": 1024,
        "state_dim": width,
        "decoder_dim": width,
        "decoder_hidden": lstm,
        "decoder_layers": 1,
    }
    if shortlist is not None:
        config["decoder_vocab"] = shortlist
    vocab = f"_v{shortlist}" if shortlist is not None else ""
    return f"n{states}_enc{layers}x{encoder}_lstm{lstm}{vocab}_d{width}", config


# --- StructuredVAE: MSCOCO captions with GPT-2 base as the encoder (Fu et al. 2022, Sec. 5.2) --------
# The top-K baseline recipes (-topk-) are the randomized backend with k1 = K1 + K2, k2 = 0.
_family(
    "zoo.models.StructuredVAE",
    "vae_crf",
    [
        (
            *_vae(100, 12, 768, 12, 256, 256),
            {"exact": {}, "randomized": {"k1": 10, "k2": 10}},
            "randomized",
            ("vae/mscoco-full-100", "vae/mscoco-rdp-100", "vae/mscoco-topk-100"),
            "MSCOCO structured VAE, 100 states: FULL / RDP / TOPK-100 (Fu et al. 2022, Table 5)",
        ),
        (
            *_vae(2000, 12, 768, 12, 256, 256),
            {"randomized": {"k1": 200, "k2": 200}},
            "randomized",
            ("vae/mscoco-rdp-2000", "vae/mscoco-topk-2000"),
            "MSCOCO structured VAE, 2000 states: RDP / TOPK-2000 (Fu et al. 2022, Table 5)",
        ),
    ],
    pretrained_encoder="gpt2",
    dropout=0.1,
)

# --- StructuredVAE: short PTB sentences, a random 2-layer GPT-2 encoder, for a CPU --------------------
_family(
    "zoo.models.StructuredVAE",
    "vae_crf",
    [
        (
            *_vae(100, 2, 128, 2, 128, 64, shortlist=8000),
            {"exact": {}, "low-rank": {"rank": 32}, "randomized": {"k1": 10, "k2": 10}},
            "randomized",
            (
                *(f"vae/ptb-short-{b}-small" for b in ("exact", "low-rank", "rdp", "topk")),
                "vae/ptb-short-exact-cpu-flagship",
            ),
            "small structured VAE on short PTB sentences for a CPU (random GPT-2 encoder, 8,000-word "
            "decoder shortlist)",
        ),
        (
            *_vae(100, 2, 64, 2, 128, 56, shortlist=8000),
            {"exact": {}, "low-rank": {"rank": 32}, "randomized": {"k1": 10, "k2": 10}},
            "randomized",
            tuple(f"vae/ptb-short-{b}-bundled" for b in ("exact", "low-rank", "rdp", "topk")),
            "the bundled structured VAEs on short PTB sentences: a 2 x 64 encoder and an 8,000-word decoder "
            "shortlist",
        ),
    ],
    dropout=0.1,
)

# --- StructuredVAE with one latent state: the plain LSTM language model beside the CPU flagship VAE ---
_family(
    "zoo.models.StructuredVAE",
    "vae_crf",
    [
        (
            *_vae(1, 1, 16, 2, 128, 64, shortlist=8000),
            {"exact": {}},
            "exact",
            ("vae/ptb-short-lstm-baseline-cpu",),
            "the LSTM language model of the CPU flagship VAE's decoder size (one state: log p(y) is exact)",
        ),
    ],
    dropout=0.1,
    eval_samples=1,
)
