"""Sentences with their trees, drawn exactly from a PCFG: p(words, tree | length).

Summing the emission table over the vocabulary gives the terms of a word not yet chosen,
log sum_v p(v | P); trees drawn exactly under those terms are distributed as p(tree | length), and
each leaf's word is then drawn from p(v | its preterminal).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.checks import (
    as_dp_tensor,
    check_finite,
    check_lengths,
    check_same_dtype,
    check_sample_count,
)
from zoo.inference.numerics import logsumexp
from zoo.inference.tree.factors import GrammarFactors, RankSpaceGrammar
from zoo.inference.tree.rank_space import sample_rank_space
from zoo.inference.tree.sampling import gumbel_argmax, sample_trees


def sample_sentences(
    grammar: GrammarFactors, emission: Tensor, lengths: Tensor, n: int = 1, generator=None
) -> tuple[Tensor, Tensor]:
    """n sentences of each requested length with their trees.

    Args:
        grammar: any grammar (a CPD grammar samples through its rank nodes; the others through
            their dense rules); emission: (B x) PT x V log-probabilities; lengths: (B,) lengths >= 2.
    Returns:
        words n x B x T long (-1 past each length; T = max length) and trees n x B x (2T-1) x 3.
    """
    if not isinstance(grammar, GrammarFactors):
        raise TypeError(
            "grammar must be a DenseGrammar, LowRankGrammar or RankSpaceGrammar, "
            f"got {type(grammar).__name__}"
        )
    emission = as_dp_tensor("emission", emission)
    check_same_dtype("sample_sentences", **{"the grammar": grammar.root}, emission=emission)
    PT = grammar.num_preterminals
    if emission.dim() == 2:
        emission = emission.unsqueeze(0)
    if emission.dim() != 3 or emission.shape[1] != PT or emission.shape[2] == 0:
        raise ValueError(
            f"emission must have shape (B x) PT x V with PT = {PT} preterminals, got {tuple(emission.shape)}"
        )
    check_finite("emission", emission)
    check_sample_count(n)
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"lengths must have shape (B,), got {tuple(lengths.shape)}")
    B = lengths.shape[0]
    T = int(lengths.max())
    why = " (sentences need at least 2 words: a CNF tree's root is a nonterminal)"
    if lengths.dtype != torch.bool and (lengths < 2).any():  # T is the longest asked for: name no range
        raise ValueError(f"lengths must be at least 2{why}, got {lengths.tolist()}")
    lengths = check_lengths(lengths, B, T, emission.device, 2, why)
    for name, size in (("emission", emission.shape[0]), ("grammar", grammar.grammar_batch)):
        if size not in (1, B):
            raise ValueError(f"the {name} has batch size {size} but lengths has B = {B}")
    any_word = logsumexp(emission, -1)  # G x PT
    terms = any_word.expand(B, PT).unsqueeze(1).expand(B, T, PT)
    if isinstance(grammar, RankSpaceGrammar):
        trees = sample_rank_space(grammar, terms, lengths, n, generator)
    else:
        trees = sample_trees(grammar.dense(), terms, lengths, n, generator)
    leaf = (trees[..., 1] - trees[..., 0] == 1) & (trees[..., 0] >= 0)  # n x B x M
    labels = torch.zeros((n, B, T + 1), dtype=torch.long, device=terms.device)
    position = torch.where(leaf, trees[..., 0], T)  # leaves write at their position, others into column T
    labels.scatter_(-1, position, torch.where(leaf, trees[..., 2], 0))  # each position's preterminal
    group = torch.arange(B, device=terms.device) if emission.shape[0] > 1 else torch.zeros_like(lengths)
    with torch.no_grad():
        words = _words_of(emission.flatten(0, 1), group.view(1, B, 1) * PT + labels[..., :T], generator)
    return torch.where(torch.arange(T, device=terms.device) < lengths.unsqueeze(-1), words, -1), trees


WORDS_AT_ONCE = 2**22  # the most word logits (positions x V) drawn in one Gumbel-argmax


def _words_of(emission: Tensor, rows: Tensor, generator) -> Tensor:
    """A word drawn at each position from its emission row (``rows``: ... long into the (G PT) x V
    ``emission``), WORDS_AT_ONCE logits at a time: n B T x V at once took 1.6 MB a sample of 6 words
    at V = 10,000 (n = 20,000 was killed for memory)."""
    flat, chunk = rows.flatten(), max(1, WORDS_AT_ONCE // emission.shape[-1])
    drawn = [gumbel_argmax(emission[flat[i : i + chunk]], generator) for i in range(0, len(flat), chunk)]
    return torch.cat(drawn).view(rows.shape)
