"""GPT-2's tokenizer converted offline from openai-whisper's BPE ranks gives GPT-2's known ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.data.gpt2_bpe import END_OF_TEXT, GPT2_VOCAB_SIZE, gpt2_ranks_file, gpt2_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return gpt2_tokenizer(tmp_path_factory.mktemp("gpt2"))


# ids from GPT-2's own vocab.json / merges.txt (the Hugging Face "gpt2" tokenizer)
KNOWN = {
    "Hello world": [15496, 995],
    " the cat sat on the mat.": [262, 3797, 3332, 319, 262, 2603, 13],
    "I'm here": [40, 1101, 994],
    "a    b": [64, 220, 220, 220, 275],
    "<|endoftext|>": [50256],
}


@pytest.mark.parametrize("text", list(KNOWN))
def test_known_ids(tokenizer, text):
    assert tokenizer.encode(text) == KNOWN[text]


def test_vocabulary_and_special_token(tokenizer):
    assert len(tokenizer) == GPT2_VOCAB_SIZE
    assert tokenizer.eos_token == END_OF_TEXT and tokenizer.eos_token_id == 50256
    assert tokenizer.convert_ids_to_tokens([15496, 995]) == ["Hello", "Ġworld"]


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=40))
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert all(0 <= i < GPT2_VOCAB_SIZE for i in ids)
    assert tokenizer.decode(ids) == text


def test_converted_file_is_cached_and_reused(tmp_path):
    first = gpt2_tokenizer(tmp_path)
    cached = tmp_path / "tokenizer.json"
    assert cached.is_file() and cached.stat().st_size > 1_000_000
    stamp = cached.stat().st_mtime_ns
    assert gpt2_tokenizer(tmp_path) is first  # the same object within a process
    assert cached.stat().st_mtime_ns == stamp


def test_a_corrupt_cache_is_a_clear_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text(
        '{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}'
    )
    with pytest.raises(ValueError, match="is not GPT-2.s tokenizer .* delete it"):
        gpt2_tokenizer(tmp_path)


def test_ranks_ship_with_openai_whisper():
    assert gpt2_ranks_file().name == "gpt2.tiktoken"


def test_the_package_names_the_function_after_the_captions_are_imported():
    """docs/vae.md's ``zoo.data.gpt2_tokenizer()``: its module had the same name, and importing the
    captions (which import it) made the package's name the module."""
    import types

    import zoo.data
    from zoo.data import CaptionsDataModule  # noqa: F401

    assert not isinstance(zoo.data.gpt2_tokenizer, types.ModuleType)
    assert zoo.data.gpt2_tokenizer is gpt2_tokenizer


def test_token_texts_are_the_tokenizer_s_and_name_the_bytes_of_split_characters(tokenizer):
    """The captions' prediction writer decoded each token alone: a character split across tokens was
    one U+FFFD a token (audit). token_texts gives the tokenizer's text wherever a token is whole UTF-8,
    and the bytes otherwise, which together spell the character."""
    from zoo.data.gpt2_bpe import token_texts

    texts = token_texts()
    assert len(texts) == 50257 and texts[50256] == "<|endoftext|>"
    whole = [i for i in range(50256) if "\\x" not in texts[i]]
    assert len(whole) > 49000
    assert all(tokenizer.decode([i]) == texts[i] for i in whole[::50])
    ids = tokenizer.encode(" 🤗")  # one character, several byte-level tokens
    assert len(ids) > 1 and all("\ufffd" in tokenizer.decode([i]) for i in ids[1:])
    spelled = "".join(texts[i] for i in ids).encode().decode("unicode_escape").encode("latin-1").decode()
    assert spelled == " 🤗"
