"""Word vocabularies: token <-> id maps with an end-of-sentence token and an optional unknown token.

``Vocabulary(tokens)`` takes the complete id -> token list; ``Vocabulary.build(lines)`` counts the
training text and orders the ids as ``eos``, ``unk`` (if any), then the words by decreasing count (ties
by first appearance), so the same text always gives the same ids. ``to_dict()`` / ``from_dict()`` give
plain JSON-able data (for ``config.json`` and checkpoints).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo.data.utf8 import nfc

__all__ = ["EOS", "UNK", "Coverage", "Vocabulary"]

EOS = "<eos>"
UNK = "<unk>"
PADDING = -1  # the id past each length of sampled word ids (``decode`` drops it)


class Vocabulary:
    """A fixed map between tokens (``str``) and ids (``0 .. size - 1``).

    Args:
        tokens: every token, in id order (``tokens[i]`` has id ``i``); no duplicates.
        eos: the end-of-sentence token; must be one of ``tokens``.
        unk: the token that unknown words map to, or ``None`` to make unknown words an error; when
            given it must be one of ``tokens``.
    """

    def __init__(self, tokens: Sequence[str], eos: str = EOS, unk: str | None = UNK) -> None:
        tokens = list(tokens)
        for i, token in enumerate(tokens):
            if not isinstance(token, str) or not token or token != token.strip() or len(token.split()) != 1:
                raise ValueError(
                    f"tokens must be non-empty strings without whitespace, got {token!r} at id {i}"
                )
        index = {token: i for i, token in enumerate(tokens)}
        if len(index) != len(tokens):
            dup = [t for t, c in Counter(tokens).items() if c > 1]
            raise ValueError(f"tokens must be unique, got {len(dup)} duplicated: {dup[:5]!r}")
        if eos not in index:
            raise ValueError(
                f"the eos token {eos!r} is not among the {len(tokens)} tokens; add it to the list"
            )
        if unk is not None and unk not in index:
            raise ValueError(
                f"the unk token {unk!r} is not among the {len(tokens)} tokens; add it to the list, or pass "
                "unk=None to make unknown words an error"
            )
        for i, token in enumerate(tokens):  # a token saved in another form is found by its NFC form too
            index.setdefault(nfc(token), i)
        self._tokens = tokens
        self._index = index
        self.eos = eos
        self.unk = unk

    @classmethod
    def build(
        cls,
        lines: Iterable[str | Sequence[str]],
        eos: str = EOS,
        unk: str | None = UNK,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Build from training text: each line a whitespace-separated string or a list of tokens.

        Ids: ``eos`` first, then ``unk`` (if not ``None``), then the other tokens (in NFC form,
        ``zoo.data.utf8.nfc``) by decreasing count, ties by first appearance. Tokens seen fewer than
        ``min_count`` times, or beyond ``max_size`` tokens in all (specials included), are left out and
        need an ``unk``.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        counts: Counter[str] = Counter()
        for line in lines:
            counts.update(map(nfc, line.split() if isinstance(line, str) else line))
        specials = [eos] if unk is None or unk == eos else [eos, unk]
        words = [w for w, c in counts.most_common() if c >= min_count and w not in specials]
        if max_size is not None:
            if max_size < len(specials):
                raise ValueError(f"max_size must be >= {len(specials)} (the special tokens), got {max_size}")
            words = words[: max_size - len(specials)]
        if unk is None and len(words) < sum(1 for w in counts if w not in specials):
            raise ValueError(
                f"min_count={min_count} / max_size={max_size} leave words out of the vocabulary, which "
                "needs an unk token; pass unk='<unk>' (or another token)"
            )
        return cls(specials + words, eos=eos, unk=unk)

    @property
    def size(self) -> int:
        """The number of tokens (ids are ``0 .. size - 1``)."""
        return len(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._find(token) is not None

    def _find(self, token: str) -> int | None:
        """The id of ``token`` as written or in its NFC form (``zoo.data.utf8.nfc``: the same text), or
        None."""
        i = self._index.get(token)
        return i if i is not None or token.isascii() else self._index.get(nfc(token))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self._tokens, self.eos, self.unk) == (other._tokens, other.eos, other.unk)

    def __hash__(self) -> int:
        return hash((tuple(self._tokens), self.eos, self.unk))

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size}, eos={self.eos!r}, unk={self.unk!r})"

    @property
    def tokens(self) -> list[str]:
        """The tokens in id order (a copy)."""
        return list(self._tokens)

    @property
    def eos_id(self) -> int:
        return self._index[self.eos]

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self._index[self.unk]

    def token_to_id(self, token: str) -> int:
        """The id of ``token``; an unknown token gives ``unk_id``, or ``KeyError`` without an unk."""
        i = self._find(token)
        if i is not None:
            return i
        if self.unk is None:
            raise KeyError(
                f"token {token!r} is not in the vocabulary ({self.size} tokens) and it has no unk token "
                "(build it with unk='<unk>' to map unknown words)"
            )
        return self._index[self.unk]

    def coverage(self, sentences: Iterable[Sequence[str]]) -> Coverage:
        """How much of ``sentences`` (token lists) the vocabulary covers: the tokens that are not in it
        (``unk`` itself counts as covered: PTB's text already holds ``<unk>``)."""
        tokens, unseen = 0, Counter()
        for words in sentences:
            tokens += len(words)
            unseen.update(w for w in words if self._find(w) is None)
        return Coverage(tokens, unseen)

    def id_to_token(self, i: int) -> str:
        """The token with id ``i`` (``0 <= i < size``)."""
        if not 0 <= int(i) < self.size:
            raise IndexError(f"token id must be in 0..{self.size - 1}, got {i}")
        return self._tokens[int(i)]

    def lowered(self, tokens: Sequence[str]) -> list[str]:
        """Each token as written where the vocabulary has it, else lower-cased: PTB's text is lower case
        ("The" is not in its vocabulary) but for its number placeholder "N", its second most frequent
        token, which lower-casing every token made ``<unk>``."""
        return [t if self._find(t) is not None else t.lower() for t in tokens]

    def encode(self, tokens: str | Sequence[str], add_eos: bool = False, lower: bool = False) -> list[int]:
        """Ids of ``tokens`` (a list, or one whitespace-separated string), plus ``eos_id`` if ``add_eos``;
        ``lower``: each token the vocabulary lacks as written is looked up lower-cased (``lowered``).

        Unknown tokens map to ``unk_id``; without an unk token they raise ``KeyError`` naming the token
        and its position.
        """
        if isinstance(tokens, str):
            tokens = tokens.split()
        if lower:
            tokens = self.lowered(tokens)
        found = [self._find(t) for t in tokens]
        if self.unk is None:
            missing = [(pos, t) for pos, (t, i) in enumerate(zip(tokens, found)) if i is None]
            if missing:
                pos, token = missing[0]
                raise KeyError(
                    f"token {token!r} at position {pos} is not in the vocabulary ({self.size} tokens; "
                    f"{len(missing)} unknown in this sequence) and it has no unk token (build it with "
                    "unk='<unk>' to map unknown words)"
                )
            ids = found
        else:
            unk_id = self.unk_id
            ids = [unk_id if i is None else i for i in found]
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` (ints or a 1-D tensor); -1 is padding (``PCFG.sample``'s words past each
        length) and is dropped; any other id outside ``0..size-1`` raises ``IndexError``."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return [self.id_to_token(i) for i in ids if i != PADDING]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: ``{"tokens": [...], "eos": str, "unk": str | None}``."""
        return {"tokens": list(self._tokens), "eos": self.eos, "unk": self.unk}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vocabulary:
        """Inverse of ``to_dict``."""
        if isinstance(data, Mapping) and "tokens" not in data and data and all(
            isinstance(i, int) for i in data.values()
        ):
            first = ", ".join(repr(t) for t in list(data)[:3])
            raise ValueError(
                "expected a dict with keys 'tokens', 'eos', 'unk' (from to_dict), got a map of "
                f"{len(data):,} tokens to ids ({first}, ...), as transformers' vocab.json: make it "
                '{"tokens": [the tokens in id order], "eos": its end token, "unk": its unknown token}'
            )
        if not isinstance(data, Mapping) or "tokens" not in data:
            got = sorted(data)[:10] if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"expected a dict with keys 'tokens', 'eos', 'unk' (from to_dict), got {got}")
        extra = set(data) - {"tokens", "eos", "unk"}
        if extra:
            raise ValueError(
                f"unexpected keys in vocabulary data: {sorted(extra)}; expected 'tokens', 'eos', 'unk'"
            )
        return cls(data["tokens"], eos=data.get("eos", EOS), unk=data.get("unk", UNK))


@dataclass(frozen=True)
class Coverage:
    """``Vocabulary.coverage``: ``tokens`` counted, and the ``unseen`` words with their counts."""

    tokens: int
    unseen: Counter

    @property
    def unknown_share(self) -> float:
        """The share of the tokens that are not in the vocabulary (0..1)."""
        return sum(self.unseen.values()) / max(self.tokens, 1)

    def describe(self) -> str:
        """One line, e.g. "2.1% of 929,589 tokens are not in it (1,234 distinct words, most often 'x' 12)"."""
        if not self.unseen:
            return f"every one of {self.tokens:,} tokens is in it"
        common = ", ".join(f"{w!r} {c:,}" for w, c in self.unseen.most_common(5))
        return (
            f"{100 * self.unknown_share:.2f}% of {self.tokens:,} tokens are not in it ({len(self.unseen):,} "
            f"distinct words; most often {common})"
        )
