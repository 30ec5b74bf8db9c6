"""Vocabulary: building, encoding, decoding, JSON round trips and errors."""

import json

import pytest
import torch

from zoo.data import Vocabulary

LINES = ["the cat sat", "the dog sat down", "a cat"]


def test_build_orders_specials_then_counts_then_first_appearance():
    vocab = Vocabulary.build(LINES)
    assert vocab.tokens == ["<eos>", "<unk>", "the", "cat", "sat", "dog", "down", "a"]
    assert (vocab.size, len(vocab), vocab.eos_id, vocab.unk_id) == (8, 8, 0, 1)
    assert vocab.eos == "<eos>" and vocab.unk == "<unk>"
    assert Vocabulary.build([line.split() for line in LINES]) == vocab  # token lists work too


def test_build_keeps_an_existing_unk_once():
    vocab = Vocabulary.build(["<unk> a <unk>", "b"])
    assert vocab.tokens == ["<eos>", "<unk>", "a", "b"]


def test_encode_decode_round_trip_with_eos_and_unk():
    vocab = Vocabulary.build(LINES)
    ids = vocab.encode("the zebra sat", add_eos=True)
    assert ids == [2, 1, 4, 0]
    assert vocab.encode(["the", "zebra", "sat"]) == ids[:-1]
    assert vocab.decode(ids) == ["the", "<unk>", "sat", "<eos>"]
    assert vocab.decode(torch.tensor(ids)) == vocab.decode(ids)
    assert vocab.decode(vocab.encode(LINES[1])) == LINES[1].split()
    assert "cat" in vocab and "zebra" not in vocab


def test_decode_drops_the_padding_of_sampled_words():
    vocab = Vocabulary.build(LINES)
    assert vocab.decode(torch.tensor([2, 4, -1, -1])) == vocab.decode([2, 4]) == ["the", "sat"]
    with pytest.raises(IndexError, match="token id must be in 0..7, got -2"):
        vocab.decode([2, -2])


def test_min_count_and_max_size_map_rare_words_to_unk():
    vocab = Vocabulary.build(LINES, min_count=2)
    assert vocab.tokens == ["<eos>", "<unk>", "the", "cat", "sat"]
    assert Vocabulary.build(LINES, max_size=4).tokens == ["<eos>", "<unk>", "the", "cat"]
    with pytest.raises(ValueError, match="needs an unk token"):
        Vocabulary.build(LINES, unk=None, min_count=2)
    with pytest.raises(ValueError, match="min_count must be >= 1"):
        Vocabulary.build(LINES, min_count=0)


def test_json_round_trip():
    for vocab in (Vocabulary.build(LINES), Vocabulary.build(LINES, unk=None, eos="</s>")):
        data = json.loads(json.dumps(vocab.to_dict()))
        assert data == {"tokens": vocab.tokens, "eos": vocab.eos, "unk": vocab.unk}
        again = Vocabulary.from_dict(data)
        assert again == vocab and hash(again) == hash(vocab)
        assert again.encode(LINES[0], add_eos=True) == vocab.encode(LINES[0], add_eos=True)


def test_unknown_token_without_unk_is_a_clear_error():
    vocab = Vocabulary.build(LINES, unk=None)
    assert vocab.unk is None and vocab.unk_id is None and "<unk>" not in vocab
    with pytest.raises(KeyError, match=r"'zebra' at position 1 is not in the vocabulary .*no unk token"):
        vocab.encode("the zebra sat")
    with pytest.raises(KeyError, match="'zebra'"):
        vocab.token_to_id("zebra")
    with pytest.raises(IndexError, match=r"token id must be in 0..6, got 7"):
        vocab.decode([0, 7])


def test_constructor_validates_the_token_list():
    assert Vocabulary(["<eos>", "a"], unk=None).tokens == ["<eos>", "a"]
    with pytest.raises(ValueError, match="eos token '<eos>' is not among the 2 tokens"):
        Vocabulary(["<unk>", "a"])
    with pytest.raises(ValueError, match="unk token '<unk>' is not among .* unk=None"):
        Vocabulary(["<eos>", "a"])
    with pytest.raises(ValueError, match="unique, got 1 duplicated: \\['a'\\]"):
        Vocabulary(["<eos>", "<unk>", "a", "a"])
    with pytest.raises(ValueError, match="without whitespace, got 'a b' at id 2"):
        Vocabulary(["<eos>", "<unk>", "a b"])
    with pytest.raises(ValueError, match="expected a dict with keys 'tokens'"):
        Vocabulary.from_dict({"words": ["<eos>"]})
    with pytest.raises(ValueError, match="unexpected keys .*'size'"):
        Vocabulary.from_dict({"tokens": ["<eos>", "<unk>"], "size": 2})


def test_encode_can_lower_case_as_ptb_expects():
    vocab = Vocabulary(["<eos>", "<unk>", "the", "company"])
    assert vocab.encode("The Company", add_eos=True) == [1, 1, 0]
    assert vocab.encode("The Company", add_eos=True, lower=True) == [2, 3, 0]
    assert vocab.encode(["THE"], lower=True) == [2]


def test_lower_case_keeps_the_tokens_the_vocabulary_has_as_written():
    """PTB's number placeholder "N" stays "N" (lower-cased, it became <unk>)."""
    vocab = Vocabulary(["<eos>", "<unk>", "the", "N", "%"])
    assert vocab.encode("The profit rose N %", lower=True) == [2, 1, 1, 3, 4]
    assert vocab.lowered(["The", "N", "n", "X"]) == ["the", "N", "n", "x"]


def test_a_word_in_either_unicode_form_is_the_same_word():
    """"café" with "é" (NFC) and with "e" and a combining accent (NFD) print alike: they were two ids in
    a built vocabulary, and a model that had seen one form read the other as <unk>."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    built = Vocabulary.build([f"{composed} au lait", f"{decomposed} noir"])
    assert built.tokens == ["<eos>", "<unk>", composed, "au", "lait", "noir"]
    for saved in (composed, decomposed):  # a vocabulary saved in either form
        vocab = Vocabulary(["<eos>", "<unk>", saved])
        assert vocab.encode([composed, decomposed, "cafe"]) == [2, 2, 1]
        assert vocab.token_to_id(composed) == vocab.token_to_id(decomposed) == 2
        assert composed in vocab and decomposed in vocab
        assert vocab.coverage([[composed, decomposed]]).unseen == {}
    assert Vocabulary(["<eos>", composed], unk=None).encode([decomposed]) == [1]
    full_width = "\uff43afe"  # a look-alike, not the same text: another word
    assert Vocabulary(["<eos>", "<unk>", "cafe"]).encode([full_width]) == [1]
