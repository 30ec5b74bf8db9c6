"""GPT-2's byte-level BPE tokenizer, offline, as a ``transformers.GPT2TokenizerFast``.

The Hugging Face Hub is not reachable on every machine, but GPT-2's BPE ranks ship inside the PyPI
package ``openai-whisper`` (``whisper/assets/gpt2.tiktoken``; installed with ``--no-deps``, never
imported). ``gpt2_tokenizer()`` converts those ranks with ``transformers``' tiktoken converter (GPT-2's
pre-tokenizer regex, byte-level decoding, ``<|endoftext|>`` = 50256), caches the converted
``tokenizer.json`` and returns the same ids as GPT-2's own tokenizer ("Hello world" -> [15496, 995]).
"""

from __future__ import annotations

import base64
import importlib.util
import os
from pathlib import Path

from zoo.extras import imported

__all__ = ["END_OF_TEXT", "GPT2_VOCAB_SIZE", "gpt2_ranks_file", "gpt2_tokenizer", "token_texts"]

END_OF_TEXT = "<|endoftext|>"
GPT2_VOCAB_SIZE = 50257  # 50256 BPE tokens + <|endoftext|>
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
INSTALL_HINT = "pip install --no-deps openai-whisper==20250625"
_CACHE: dict[str, object] = {}


def gpt2_ranks_file() -> Path:
    """The path of ``whisper/assets/gpt2.tiktoken`` (GPT-2's BPE ranks), found without importing whisper."""
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"GPT-2's BPE ranks come from the openai-whisper package, not installed: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "gpt2.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def _read_ranks(path: Path) -> dict[bytes, int]:
    """The tiktoken rank file: one ``base64(token bytes) rank`` a line."""
    ranks = {}
    for line in path.read_text(encoding="ascii").splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def token_texts() -> list[str]:
    """Each GPT-2 id's text, by id: its bytes as UTF-8, where a byte of a character that BPE split
    across tokens reads ``\\xNN`` (decoding that token alone gives U+FFFD, one per token, whatever the
    character); ``<|endoftext|>`` last."""
    if "texts" not in _CACHE:
        texts = [END_OF_TEXT] * GPT2_VOCAB_SIZE
        for token, rank in _read_ranks(gpt2_ranks_file()).items():
            texts[rank] = token.decode("utf-8", errors="backslashreplace")
        _CACHE["texts"] = texts
    return _CACHE["texts"]


def _default_cache_dir() -> Path:
    root = (
        os.environ.get("ZOO_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zoo"
    )
    return Path(root) / "gpt2-tokenizer"


def _convert(ranks_file: Path, target: Path) -> None:
    """Write GPT-2's ``tokenizer.json`` (tokenizers format) converted from the tiktoken ranks."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class RanksConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:  # no tiktoken needed
            return _read_ranks(Path(tiktoken_url))

        def tokenizer(self):
            tokenizer = super().tokenizer()
            tokenizer.model.ignore_merges = False  # GPT-2 applies its merges to every pre-token
            return tokenizer

    tokenizer = RanksConverter(
        vocab_file=str(ranks_file), pattern=GPT2_PATTERN, extra_special_tokens=[END_OF_TEXT]
    ).converted()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(str(partial))
    partial.replace(target)  # atomic: a concurrent reader never sees half a file


def gpt2_tokenizer(cache_dir: str | os.PathLike | None = None):
    """GPT-2's tokenizer (``transformers.GPT2TokenizerFast``), built offline from openai-whisper's ranks.

    Args:
        cache_dir: where the converted ``tokenizer.json`` is kept (default ``$ZOO_CACHE`` or
            ``~/.cache/zoo``, under ``gpt2-tokenizer/``). The first call converts (a few seconds).

    ``<|endoftext|>`` (50256) is its bos, eos and pad token; the vocabulary has 50257 ids.
    """
    directory = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    key = str(directory.resolve())
    if key not in _CACHE:
        GPT2TokenizerFast = imported("transformers", "vae", "the GPT-2 tokenizer").GPT2TokenizerFast

        target = directory / "tokenizer.json"
        if not target.is_file():
            _convert(gpt2_ranks_file(), target)
        tokenizer = GPT2TokenizerFast(
            tokenizer_file=str(target), bos_token=END_OF_TEXT, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT
        )
        if len(tokenizer) != GPT2_VOCAB_SIZE or tokenizer.convert_tokens_to_ids(END_OF_TEXT) != 50256:
            raise ValueError(
                f"{target} is not GPT-2's tokenizer ({len(tokenizer)} ids, expected {GPT2_VOCAB_SIZE} with "
                f"{END_OF_TEXT} = 50256): delete it to convert again"
            )
        _CACHE[key] = tokenizer
    return _CACHE[key]
