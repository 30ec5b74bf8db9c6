"""How well each RDP proposal estimates a trained neural HMM's log p(sentence): the bundled randomized
PTB HMM's DenseChain on validation sentences, log Z estimated with K1 top + K2 sampled states per
position under the proposals uniform / local / global / local+global (Fu et al. 2022, Eq. 34),
against the exact log Z. Reports the mean squared error and the bias in nats per sentence.

Usage: python scripts/hmm_proposals.py [--sentences 32] [--seeds 20] [--k1 25] [--k2 25] [--write]
(--write: its block of docs/results.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import zoo
from zoo.data import PTBDataModule
from zoo.inference import DenseChain, LinearChain, RDPOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

TAG = "hmm_categorical_n512_d64.ptb_randomized"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--k1", type=int, default=25)
    parser.add_argument("--k2", type=int, default=25)
    parser.add_argument("--write", action="store_true", help="also write its block of docs/results.md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = zoo.from_pretrained(TAG)
    data = PTBDataModule(vocab_from=TAG)
    data.setup()
    sentences = [data.datasets["valid"][i] for i in range(args.sentences)]
    lengths = torch.tensor([len(s) for s in sentences])
    tokens = torch.nn.utils.rnn.pad_sequence(sentences, batch_first=True)
    with torch.no_grad():
        exact_chain = model.posterior({"tokens": tokens, "lengths": lengths})  # eval mode: exact
        factors = exact_chain.factors
        exact = exact_chain.log_partition.double()
        lines = [
            "## Proposals of the randomized HMM (Fu et al. 2022, Eq. 34)",
            "",
            f"`python scripts/hmm_proposals.py`: the bundled `{TAG}` (N = {model.num_states}) on "
            f"{args.sentences} PTB validation sentences, K1 = {args.k1} top + K2 = {args.k2} sampled "
            f"states per position, {args.seeds} seeds; errors of the estimated log p(sentence) against the "
            "exact one. "
            "The global prior is each state's incoming transition mass (an HMM's outgoing mass is one for "
            "every state, which made it uniform before).",
            "",
            "| proposal | MSE (nats^2) | bias (nats) |",
            "|---|---|---|",
        ]
        for proposal in ("uniform", "local", "global", "local+global"):
            errors = []
            for seed in range(args.seeds):
                options = RDPOptions(args.k1, args.k2, proposal, torch.Generator().manual_seed(seed))
                dense = DenseChain(factors.unary, factors.transition, factors.init)
                estimate = LinearChain(dense, lengths, "randomized", options).log_partition.double()
                errors.append(estimate - exact)
            errors = torch.stack(errors)
            lines.append(f"| {proposal} | {errors.pow(2).mean():.4g} | {errors.mean():+.4g} |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(DOCS, "hmm_proposals", text, title="# Results")


if __name__ == "__main__":
    main()
