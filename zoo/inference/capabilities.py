"""The capability table (structure x backend x operation), generated from the engines' declarations.

Each structure registers one ``Structure`` in ``STRUCTURES``: its name, its backend -> engine class
map and the operations of its distribution. Every engine class declares ``capabilities``, a dict
operation -> (kind, note), where kind is ``native`` (its own algorithm), ``estimate`` (a randomized
estimator), ``exact fallback`` (computed exactly on an equivalent materialized form) or
``unsupported`` (raises an error that names the alternative).
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.inference import chain, semimarkov, tree  # noqa: F401  (their engines register on import)
from zoo.inference.engines import engines_of


@dataclass(frozen=True)
class Structure:
    """One structure's row block: name, engines by backend, operations in display order."""

    name: str
    engines: dict
    operations: tuple[str, ...]


STRUCTURES = [
    Structure(
        "linear chain",
        engines_of("chain"),
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
        engines_of("tree"),
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
        engines_of("semimarkov"),
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
