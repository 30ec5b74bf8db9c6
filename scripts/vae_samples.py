"""Are a structured VAE's samples made of real words? Samples of each bundled VAE (or the given tags)
under ancestral sampling and under tempered nucleus sampling (``StructuredVAE.sample(temperature=,
top_p=)``), scored by the share of their words (whitespace-separated, after GPT-2 decoding) that are
real words (``dictionary``), that are the corpus's placeholders (PTB's ``<unk>`` and ``N``, 10 % of its
training words) or that are neither (non-words), beside the test sentences scored the same way, and
shown. ``--baseline NAME=FOLDER`` adds a plain language model exported as a
pretrained folder (``zoo export``), e.g. the LSTM of the flagship's decoder size, sampled the same way on
the flagship's data. Writes the ``vae_samples`` section of docs/vae.md with ``--write``.

    python scripts/vae_samples.py --write --baseline "LSTM LM=runs/lstm-export"
    python scripts/vae_samples.py --tags vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact --samples 100
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import zoo  # noqa: E402
from zoo.hub.bundled import bundled_data  # noqa: E402

from report import write_section  # noqa: E402

SETTINGS = ((1.0, 1.0), (1.0, 0.9), (0.8, 0.9), (0.6, 0.9))  # (temperature, top_p); (1, 1): samples of p(y)
SHOWN = 3
FLAGSHIP = "vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact"  # a baseline is sampled on its data
PLACEHOLDERS = frozenset({"<unk>", "N"})  # Mikolov's PTB: a rare word, a number; occur in training, not words


def sample_texts(model, tokenizer, n: int, temperature: float, top_p: float, seed: int) -> list[str]:
    """``n`` decoded samples (at most 24 tokens each, <|endoftext|> dropped)."""
    generator = torch.Generator().manual_seed(seed)
    drawn = model.sample(n, max_length=24, generator=generator, temperature=temperature, top_p=top_p)
    rows = zip(drawn["tokens"].tolist(), drawn["lengths"].tolist())
    return [tokenizer.decode(tokens[:length], skip_special_tokens=True).strip() for tokens, length in rows]


def dictionary(data) -> set[str]:
    """The words that count as real: for ptb-short (read from PTB, not from ``hf_dataset``), PTB's
    vocabulary (the words of its whole training split, Mikolov's 10,000), of which the short training
    sentences hold only some; else the training split's words."""
    if data.source == "ptb-short" and data.hf_dataset is None:
        from zoo.data.ptb import read_ptb

        return {word for words in read_ptb("train", data.path) for word in words}
    return {word for sentence in data.sentences("train") for word in sentence.split()}


def real_word_rates(texts: list[str], known: set[str]) -> tuple[float, float, float, float]:
    """Of the samples' words, the shares of real words (in ``known``, not ``PLACEHOLDERS``), of
    placeholders and of non-words (neither); and the share of the non-empty samples without a non-word
    (placeholders allowed: half of PTB's own sentences have one)."""
    words = [text.split() for text in texts]
    total = sum(len(w) for w in words)
    real = sum(word in known and word not in PLACEHOLDERS for w in words for word in w)
    placeholders = sum(word in PLACEHOLDERS for w in words for word in w)
    whole = sum(all(word in known or word in PLACEHOLDERS for word in w) for w in words if w)
    samples = max(sum(1 for w in words if w), 1)
    shares = (real, placeholders, total - real - placeholders)
    return (*(count / max(total, 1) for count in shares), whole / samples)


def table_row(label: str, temperature: str, top_p: str, texts: list[str], known: set[str]) -> str:
    rates = real_word_rates(texts, known)
    length = sum(len(t.split()) for t in texts) / len(texts)
    cells = (label, temperature, top_p, *(f"{100 * rate:.1f}" for rate in rates), f"{length:.1f}")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tags", nargs="+", default=None, help="bundled VAE tags (default: all)")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="write the section of docs/vae.md")
    parser.add_argument(
        "--baseline", action="append", default=[], metavar="NAME=FOLDER",
        help="a plain language model's pretrained folder, sampled on the flagship's data (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    tags = args.tags or sorted(t for t in zoo.list_models(pretrained=True) if t.startswith("vae_"))
    models = [(f"`{tag}`", tag, tag) for tag in tags]  # (shown as, source, the bundled data's tag)
    models += [(name, folder, FLAGSHIP) for name, _, folder in (b.partition("=") for b in args.baseline)]
    rows, shown, dictionaries = [], [], {}
    for label, source, data_tag in models:
        model = zoo.from_pretrained(source).eval()
        data = bundled_data(data_tag)
        if data_tag not in dictionaries:  # the bundled VAEs share their data: read its dictionary once
            dictionaries[data_tag] = dictionary(data)
        known = dictionaries[data_tag]
        if not rows:  # the anchor: the flagship's test sentences, scored as the samples are
            rows.append(table_row("the test sentences (`" + data_tag + "`'s data)", "-", "-",
                                  data.sentences("test"), known))  # fmt: skip
        for temperature, top_p in SETTINGS:
            texts = sample_texts(model, data.tokenizer, args.samples, temperature, top_p, args.seed)
            rows.append(table_row(label, f"{temperature:g}", f"{top_p:g}", texts, known))
            quoted = " / ".join(f'"{t}"' for t in texts[:SHOWN])
            shown.append(f"- {label}, T {temperature:g}, top-p {top_p:g}: {quoted}")
            print(rows[-1], flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            "## Samples: real words?",
            "",
            f"Generated by `python scripts/vae_samples.py --write` ({stamp}, torch {torch.__version__}): "
            f"{args.samples} samples (seed {args.seed}, at most 24 GPT-2 tokens) of each bundled VAE, "
            "ancestral (temperature 1, top-p 1: samples of p(y)) and tempered nucleus sampling of the words "
            "(`model.sample(n, temperature=T, top_p=p)`; the states drawn exactly). Of the samples' "
            "whitespace-separated words (after GPT-2 decoding): real words are in the corpus's vocabulary "
            "(PTB's 10,000 words; the short training sentences hold only some of them), "
            f"placeholders are its {' and '.join(f'`{p}`' for p in sorted(PLACEHOLDERS))} (PTB's rare words "
            "and numbers, which a model learns as tokens of their own), non-words are neither (GPT-2 pieces "
            "glued wrong); whole samples: the share of samples without a non-word (binomial standard error "
            f"at most {50 / math.sqrt(args.samples):.1f} points; the words' shares, over several words a "
            "sample, less). The first row scores the test sentences themselves."
            + (
                " Rows not in backquotes are plain language models (--baseline) sampled the same way on the "
                "flagship's data."
                if args.baseline
                else ""
            ),
            "",
            "| model | temperature | top-p | real words (%) | placeholders (%) | non-words (%) | "
            "whole samples (%) | words / sample |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            f"The first {SHOWN} samples of each:",
            "",
            *shown,
        ]
    )
    print(text)
    if args.write:
        write_section(REPO / "docs" / "vae.md", "vae_samples", text)


if __name__ == "__main__":
    main()
