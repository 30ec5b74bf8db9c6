"""The capability table (structure x backend x operation), generated from the engines' declarations.

Each structure registers one ``Structure`` in ``STRUCTURES``: its name, its backend -> engine class
map and the operations of its distribution. Every engine class declares ``capabilities``, a dict
operation -> (kind, note), where kind is ``native`` (its own algorithm), ``estimate`` (a randomized
estimator), ``exact fallback`` (computed exactly on an equivalent materialized form) or
``unsupported`` (raises an error that names the alternative).
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.inference.chain.distribution import ENGINES as CHAIN_ENGINES
from zoo.inference.semimarkov.distribution import ENGINES as SEMIMARKOV_ENGINES
from zoo.inference.tree.distribution import ENGINES as TREE_ENGINES


@dataclass(frozen=True)
class Structure:
    """One structure's row block: name, engines by backend, operations in display order."""

    name: str
    engines: dict
    operations: tuple[str, ...]


STRUCTURES = [
    Structure(
        "linear chain",
        CHAIN_ENGINES,
        (
            "log_partition",
            "marginals",
            "pairwise_marginals",
            "entropy",
            "log_prob",
            "argmax",
            "sample",
            "rsample",
        ),
    ),
    Structure(
        "tree (CNF grammar)",
        TREE_ENGINES,
        (
            "log_partition",
            "span_marginals",
            "marginals",
            "entropy",
            "log_prob",
            "argmax",
            "mbr",
            "sample",
        ),
    ),
    Structure(
        "semi-Markov chain",
        SEMIMARKOV_ENGINES,
        (
            "log_partition",
            "segment_marginals",
            "marginals",
            "entropy",
            "log_prob",
            "argmax",
            "sample",
            "rsample",
        ),
    ),
]


def structure_table(structure: Structure) -> str:
    """A Markdown table: one row per operation, one column per backend."""
    backends = list(structure.engines)
    head = f"| {structure.name} | " + " | ".join(f"`{b.value}`" for b in backends) + " |"
    rule = "| --- |" + " --- |" * len(backends)
    rows = [head, rule]
    for op in structure.operations:
        cells = []
        for b in backends:
            kind, note = structure.engines[b].capabilities[op]
            cells.append(f"**{kind}**: {note}")
        rows.append(f"| `{op}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def capability_table() -> str:
    """Every structure's table, one after another (Markdown)."""
    return "\n\n".join(structure_table(s) for s in STRUCTURES)
