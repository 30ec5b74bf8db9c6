"""The README's main job: load a pretrained model of each family and use it, on a CPU, in under a minute.

Every model is a checkpoint bundled with the package (``zoo/weights/``; no network, no training), each
family's flagship where it is bundled:

* HMM language model (PTB): score a sentence and the same words shuffled (log p, perplexity), its
  most likely states, and sample sentences;
* HMM on the Bach chorales: NLL per frame of held-out chorales;
* PCFG (PTB): parse a sentence (MBR tree) and sample sentences from the grammar;
* HSMM (smartwatch): segment a held-out recording (found segments beside the gold exercises);
* structured VAE (short PTB sentences, GPT-2 BPE): score a sentence and the same words shuffled by
  importance sampling, the most likely latent states of its CRF posterior, and sample sentences.

A word model's vocabulary comes with it (``model.vocab``, the folder's ``vocab.json``), the VAE's
GPT-2 tokenizer from ``zoo.data.gpt2_tokenizer``; the held-out data of the other uses comes from the
data of the checkpoint's own ``training_config.yaml`` (the chorales from ``music21``, the smartwatch
recordings).

Usage: python scripts/pretrained_demo.py [--sentence "..."]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zoo  # noqa: E402
from zoo.hub.bundled import bundled_data, first_test_batch  # noqa: E402


def first_tag(*patterns: str) -> str | None:
    """The first bundled tag matching the patterns, in order of preference."""
    for pattern in patterns:
        tags = zoo.list_models(pattern, pretrained=True)
        if tags:
            return tags[0]
    return None


def sentence_batch(vocab, words: list[str]) -> dict[str, torch.Tensor]:
    ids = vocab.encode(words, add_eos=True)
    return {"tokens": torch.tensor([ids]), "lengths": torch.tensor([len(ids)])}


def hmm_language_model(tag: str, sentence: str) -> None:
    model = zoo.from_pretrained(tag)
    vocab = model.vocab
    words = vocab.lowered(sentence.split())  # PTB's text: lower case but for N
    shuffled = random.Random(0).sample(words, len(words))
    print(f"HMM language model {tag} ({model.config['num_states']} states, {model.config['backend']})")
    for label, text in (("sentence", words), ("shuffled", shuffled)):
        batch = sentence_batch(vocab, text)
        with torch.no_grad():
            log_p = float(model.log_likelihood(batch))
        tokens = int(model.num_events(batch))
        ppl = math.exp(-log_p / tokens)
        print(f"  {label:9s} log p = {log_p:8.2f}, perplexity {ppl:8.1f}: {' '.join(text)}")
        if label == "sentence":
            states = model.decode(batch)[0].tolist()  # Viterbi: the most probable state sequence
            shown = " ".join(f"{word}/{state}" for word, state in zip([*text, vocab.eos], states))
            print(f"  most likely states (Viterbi), word/state: {shown}")
    drawn = model.sample(3, max_length=30, generator=torch.Generator().manual_seed(0))  # each ends at <eos>
    for row, length in zip(drawn["tokens"], drawn["lengths"].tolist()):
        print("  HMM sample:", " ".join(vocab.decode(row[:length])))


def hmm_music(tag: str) -> None:
    model = zoo.from_pretrained(tag)
    batch = first_test_batch(tag)
    with torch.no_grad():
        nll = -float(model.log_likelihood(batch).sum()) / int(model.num_events(batch).sum())
    print(
        f"HMM on the Bach chorales {tag}: {nll:.3f} nats per frame on {len(batch['lengths'])} test chorales"
    )


def bracket(words: list[str], spans: list[tuple[int, int]]) -> str:
    """A tree's spans (start, end exclusive) of two or more words as brackets around the words."""
    opens, closes = [0] * len(words), [0] * len(words)
    for start, end in spans:
        if end - start > 1:
            opens[start] += 1
            closes[end - 1] += 1
    return " ".join("(" * o + w + ")" * c for w, o, c in zip(words, opens, closes))


def pcfg(tag: str, sentence: str) -> None:
    model = zoo.from_pretrained(tag)
    vocab = model.vocab
    words = vocab.lowered(sentence.split())  # PTB's text: lower case but for N
    batch = sentence_batch(vocab, words)
    trees, lengths = model.parse(batch)
    spans = [(int(s), int(e)) for s, e in trees[0].tolist() if s >= 0]
    shown = [w if w in vocab else "<unk>" for w in words]
    print(f"PCFG {tag} ({model.config['backend']}), MBR parse:\n  {bracket(shown, spans)}")
    samples, _ = model.sample([6, 8, 10], generator=torch.Generator().manual_seed(0))
    for row in samples[0]:
        print("  sample:", " ".join(vocab.tokens[i] for i in row.tolist() if i >= 0))


def runs(labels: list[int]) -> list[tuple[int, int]]:
    """(label, frames) of each run of equal labels."""
    out: list[tuple[int, int]] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1] + 1)
        else:
            out.append((label, 1))
    return out


def hsmm(tag: str) -> None:
    model = zoo.from_pretrained(tag)
    batch = first_test_batch(tag)
    with torch.no_grad():
        _, frames = model.segment(batch)
    length = int(batch["lengths"][0])
    found = runs(frames[0, :length].tolist())
    gold = runs(batch["labels"][0, :length].tolist())
    seconds = bundled_data(tag).window / 50  # SmartwatchDataModule: samples at 50 Hz per frame
    backend = model.config["backend"]
    print(f"HSMM {tag} ({backend}): a held-out recording of {length} frames ({seconds:g} s each)")
    print(f"  {len(found)} segments found (state x frames): " + " ".join(f"{s}x{n}" for s, n in found[:12]))
    print(f"  {len(gold)} gold exercise segments (label x frames): " + " ".join(f"{s}x{n}" for s, n in gold))


def vae(tag: str, sentence: str) -> None:
    model = zoo.from_pretrained(tag)
    data = bundled_data(tag)  # its GPT-2 tokenizer, <|endoftext|> appended as in training
    words = sentence.lower().split()
    shuffled = random.Random(0).sample(words, len(words))
    config = model.config
    print(f"structured VAE {tag} ({config['num_states']} states, {config['backend']}), "
          f"NLL by importance sampling ({config['eval_samples']} samples of q):")  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    for label, text in (("sentence", words), ("shuffled", shuffled)):
        (ids,) = data.encode([" ".join(text)])
        batch = {"tokens": torch.tensor([ids]), "lengths": torch.tensor([len(ids)])}
        with torch.no_grad():
            log_p = float(model.log_likelihood(batch, generator))
        ppl = math.exp(-log_p / len(ids))
        print(f"  {label:9s} log p ~ {log_p:8.2f}, perplexity {ppl:8.1f}: {' '.join(text)}")
        if label == "sentence":
            states = model.decode(batch)[0].tolist()
            pieces = data.tokenizer.convert_ids_to_tokens(ids)
            shown = " ".join(f"{piece.replace('Ġ', '')}/{state}" for piece, state in zip(pieces, states))
            print(f"  most likely states of q(z | y), token/state: {shown}")
    drawn = model.sample(3, max_length=24, generator=generator, temperature=0.8, top_p=0.9)
    for tokens, length in zip(drawn["tokens"].tolist(), drawn["lengths"].tolist()):
        text = data.tokenizer.decode(tokens[:length], skip_special_tokens=True).strip()
        print("  sample (temperature 0.8, top-p 0.9):", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentence", default="the company said its profit rose in the third quarter")
    args = parser.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:  # yours wins: on a busy machine one thread can be far faster
        torch.set_num_threads(2)
    started = time.perf_counter()
    uses = [  # each family's flagship first (docs/results.md), else any of its checkpoints
        (
            ("hmm_categorical_n1024_d128.ptb_exact", "hmm_categorical_*.ptb_*"),
            lambda tag: hmm_language_model(tag, args.sentence),
        ),
        (("hmm_bernoulli_n1024_d128.chorales_exact", "hmm_bernoulli_*.chorales_*"), hmm_music),
        (("pcfg_nt1000_pt2000_d64.ptb_rank_space", "pcfg_*.ptb_*"), lambda tag: pcfg(tag, args.sentence)),
        (("hsmm_*.smartwatch_exact", "hsmm_*.smartwatch_*"), hsmm),
        (
            ("vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact", "vae_*.ptb_*"),
            lambda tag: vae(tag, args.sentence),
        ),
    ]
    for patterns, use in uses:
        tag = first_tag(*patterns)
        if tag is None:
            print(f"(no bundled checkpoint matches {patterns[-1]})")
            continue
        use(tag)
    seconds = time.perf_counter() - started
    print(f"{len(zoo.list_models(pretrained=True))} bundled checkpoints; this took {seconds:.0f} s")


if __name__ == "__main__":
    main()
