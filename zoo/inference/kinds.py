"""How an engine computes an operation, the kinds of its ``capabilities`` entries (the capability
table, ``zoo.inference.capabilities``): its own algorithm, a randomized estimate, an exact computation
on an equivalent materialized form, or an error that names the alternative."""

NATIVE, ESTIMATE, FALLBACK, UNSUPPORTED = "native", "estimate", "exact fallback", "unsupported"
