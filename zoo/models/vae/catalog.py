"""The structured VAE family's declarations (``zoo.hub.families``): the architectures of ``StructuredVAE``
(MSCOCO captions, short PTB sentences), its card, results table, the papers' numbers and test inputs.
"""

from __future__ import annotations

from pathlib import Path

from zoo.hub.families import Family, paper_rows, register_architectures, register_family, token_batch

TEMPLATES = Path(__file__).resolve().parent / "card_templates"  # package data: installs carry it

FU_T5 = "Fu et al. 2022, Table 5"


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
register_architectures(
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
register_architectures(
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
register_architectures(
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


register_family(
    Family(
        "StructuredVAE",
        TEMPLATES / "StructuredVAE",
        "Structured VAEs on short PTB sentences (importance-sampled NLL, 100 samples: nats per sentence, "
        "the metric of Fu et al. 2022, Table 5; per GPT-2 token and perplexity, <|endoftext|> counted; "
        "-ELBO per sentence; distinct MAP states a sentence: 1 is a collapsed posterior; sentence-state "
        "information: the mutual information between a token's state and its sentence given its position, "
        "I(z_t; y | t) under q, nats, 0 when q ignores the sentence; token-state information: the same "
        "without the position given, so it also counts what the state tells about the position)",
        (
            "test/nll_sentence",
            "test/nll",
            "test/ppl",
            "test/neg_elbo_sentence",
            "test/distinct_map_states",
            "test/sentence_state_information",
            "test/token_state_information",
        ),
        token_batch,
        paper_results=(
            *paper_rows(
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
        ),
        test_sizes={  # a random GPT-2 encoder (no Hub), 4 importance samples
            "num_states": 4,
            "vocab_size": 17,
            "pretrained_encoder": None,
            "encoder_layers": 1,
            "encoder_dim": 8,
            "encoder_heads": 2,
            "max_positions": 8,
            "state_dim": 8,
            "decoder_dim": 8,
            "decoder_hidden": 8,
            "eval_samples": 4,
        },
    )
)
