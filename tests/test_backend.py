"""zoo.Backend: a str Enum of the inference backends."""

from __future__ import annotations

import enum
import json

import pytest

VALUES = ("exact", "low-rank", "rank-space", "randomized")


def test_importable_from_zoo_and_zoo_inference():
    import zoo
    import zoo.inference

    assert zoo.Backend is zoo.inference.Backend


def test_is_a_str_enum_with_the_four_values():
    from zoo import Backend

    assert issubclass(Backend, enum.Enum)
    assert issubclass(Backend, str)
    assert sorted(b.value for b in Backend) == sorted(VALUES)
    for v in VALUES:
        member = Backend(v)
        assert isinstance(member, str)
        assert member == v  # str Enum compares equal to its value


def test_str_is_the_value():
    from zoo import Backend

    assert str(Backend.LOW_RANK) == "low-rank"
    for v in VALUES:
        assert str(Backend(v)) == v
        assert f"{Backend(v)}" == v


@pytest.mark.parametrize(
    "text,value",
    [
        ("exact", "exact"),
        ("low-rank", "low-rank"),
        ("low_rank", "low-rank"),
        ("Rank_Space", "rank-space"),
        ("rank-space", "rank-space"),
        ("RANDOMIZED", "randomized"),
    ],
)
def test_parse(text, value):
    from zoo import Backend

    assert Backend.parse(text) is Backend(value)


def test_parse_member_is_identity():
    from zoo import Backend

    for b in Backend:
        assert Backend.parse(b) is b


def test_parse_unknown_lists_choices():
    from zoo import Backend

    with pytest.raises(ValueError) as ei:
        Backend.parse("fast")
    msg = str(ei.value)
    assert "fast" in msg
    for v in VALUES:
        assert v in msg, f"choice {v!r} missing from {msg!r}"


def test_json_round_trip():
    from zoo import Backend

    for b in Backend:
        text = json.dumps({"backend": b.value})
        assert Backend(json.loads(text)["backend"]) is b
        # a str Enum serializes as its value directly
        assert json.loads(json.dumps(b)) == b.value
