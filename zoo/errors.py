"""``SetupError``: parts of a run that do not fit together, said in one line."""

from __future__ import annotations


class SetupError(ValueError):
    """A run whose parts do not fit together (the model's vocabulary and the data's, more processes than
    an evaluation split has sequences, a trainer that would split the zoo's batches again): the message
    says what to change, and ``zoo fit | validate | test | predict`` prints it as one line."""
