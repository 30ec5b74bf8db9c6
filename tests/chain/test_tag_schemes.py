"""``transition_constraints``: a tag sequence is allowed exactly when it spells valid spans."""

from __future__ import annotations

import itertools
import re

import pytest

from zoo.inference import transition_constraints

TYPES = ("PER", "LOC")


def _labels(prefixes: str) -> list[str]:
    return ["O"] + [f"{p}-{t}" for t in TYPES for p in prefixes]


def _valid(tags: list[str], scheme: str) -> bool:
    """Whether the tags spell a sequence of spans, by a regular expression over the tag names."""
    begin, inside, end, single = {"BIO": "BI..", "BIOES": "BIES", "BIOUL": "BILU"}[scheme]
    words = " ".join(tags) + " "
    if scheme == "BIO":
        span = "|".join(rf"{begin}-{t} (?:{inside}-{t} )*" for t in TYPES)
    else:
        span = "|".join(rf"{begin}-{t} (?:{inside}-{t} )*{end}-{t} |{single}-{t} " for t in TYPES)
    return re.fullmatch(rf"(?:O |{span})*", words) is not None


@pytest.mark.parametrize("scheme,prefixes", [("BIO", "BI"), ("BIOES", "BIES"), ("BIOUL", "BILU")])
def test_allowed_sequences_are_the_valid_ones(scheme, prefixes):
    labels = _labels(prefixes)
    allowed = transition_constraints(labels, scheme)
    start, trans, end = allowed["allowed_start"], allowed["allowed_transitions"], allowed["allowed_end"]
    for length in range(1, 5):
        for seq in itertools.product(range(len(labels)), repeat=length):
            ok = bool(start[seq[0]]) and bool(end[seq[-1]]) and all(trans[a, b] for a, b in zip(seq, seq[1:]))
            assert ok == _valid([labels[i] for i in seq], scheme), [labels[i] for i in seq]


def test_aliases_and_label_order():
    labels = ["B-X", "O", "I-X"]  # any order
    bio = transition_constraints(labels, "BIO")
    assert bio["allowed_start"].tolist() == [True, True, False]
    assert bio["allowed_transitions"][:, 2].tolist() == [True, False, True]
    iob2 = transition_constraints(labels, "IOB2")
    assert all((bio[k] == iob2[k]).all() for k in bio)
    bioes = transition_constraints(["O", "S-X", "B-X", "I-X", "E-X"], "IOBES")
    assert bioes["allowed_end"].tolist() == [True, True, False, False, True]


def test_bad_labels_are_a_clear_error():
    with pytest.raises(ValueError, match="scheme must be one of"):
        transition_constraints(["O"], "BILOU2")
    with pytest.raises(
        ValueError, match=r"label 'E-X' is not a BIO tag: expected 'O' or one of B-<type>, I-<type>"
    ):
        transition_constraints(["O", "B-X", "E-X"], "BIO")
    with pytest.raises(ValueError, match="label 'PER' is not a BIOES tag"):
        transition_constraints(["O", "PER"], "BIOES")
    with pytest.raises(ValueError, match="labels must be distinct"):
        transition_constraints(["O", "B-X", "O"], "BIO")
