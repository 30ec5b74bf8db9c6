"""The semiring reductions of the brute-force oracles (tests/bruteforce.py for chains,
tests/semimarkov/sm_bruteforce.py, tests/tree_bruteforce.py). Each oracle enumerates its structures
with their scores, a table {structure: score}; every quantity is one reduction of that table, in
Python float arithmetic: ``log_sum`` (the log semiring: log Z), ``best`` (max: the Viterbi score),
``entropy`` (the entropy semiring), and ``distribution`` (the normalized table, for marginals).
Independent of ``zoo``, as the oracles are."""

from __future__ import annotations

import math

NEG_INF = float("-inf")


def log_value(x: float) -> float:
    """log x, -inf at 0."""
    return math.log(x) if x > 0 else NEG_INF


def log_sum(scores) -> float:
    """log sum exp of an iterable of log-scores (-inf when every one is)."""
    values = list(scores)
    m = max(values)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(sum(math.exp(v - m) for v in values))


def distribution(table: dict) -> dict:
    """{structure: probability} of a {structure: log-score} table."""
    log_z = log_sum(table.values())
    return {key: (math.exp(s - log_z) if s > NEG_INF else 0.0) for key, s in table.items()}


def entropy(table: dict) -> float:
    """-sum p log p over the table's distribution."""
    return -sum(p * math.log(p) for p in distribution(table).values() if p > 0)


def best(table: dict) -> tuple:
    """(a structure of the highest score, that score)."""
    key = max(table, key=table.get)
    return key, table[key]
