"""The capability table (structure x backend x operation), generated from the engines' declarations."""

from __future__ import annotations

from zoo.inference.chain.distribution import ENGINES

OPERATIONS = (
    "log_partition",
    "marginals",
    "pairwise_marginals",
    "entropy",
    "log_prob",
    "argmax",
    "sample",
    "rsample",
)


def capability_table() -> str:
    """A Markdown table: one row per operation, one column per chain backend.

    Each cell says how the backend computes the operation: ``native`` (its own algorithm),
    ``estimate`` (a randomized estimator) or ``exact fallback`` (computed exactly on an equivalent
    materialized form), with the note the engine declares.
    """
    backends = list(ENGINES)
    head = "| linear chain | " + " | ".join(f"`{b.value}`" for b in backends) + " |"
    rule = "| --- |" + " --- |" * len(backends)
    rows = [head, rule]
    for op in OPERATIONS:
        cells = []
        for b in backends:
            kind, note = ENGINES[b].capabilities[op]
            cells.append(f"**{kind}**: {note}")
        rows.append(f"| `{op}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)
