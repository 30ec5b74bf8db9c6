"""Bracketed (Penn Treebank style) trees: reading, the usual unsupervised-parsing preprocessing, spans.

Reading: ``parse_bracketed(text)`` parses any number of trees spread over any number of lines, e.g.
``(S (NP (DT the) (NN cat)) (VP (VBD sat)))``. An outer bracket without a label around a single tree,
``( (S ...) )`` as in WSJ ``.mrg`` files, is removed. Malformed input raises ``ValueError`` naming the
source, line and column.

Preprocessing (``preprocess``), following Kim et al. 2019's PTB preparation (compound-pcfg
``process_ptb.py``, whose tag filter comes from PRPN):

1. remove every preterminal whose tag is in ``REMOVED_TAGS``: the empty elements ``-NONE-`` and the
   punctuation / symbol tags ``'' `` , . : -LRB- -RRB- -LCB- -RCB- # $``. On WSJ this keeps exactly
   the 36 word tags of the Penn tagset that Kim et al. keep (``#`` and ``$`` go, so ``$ 100`` is one
   word);
2. prune every constituent left without words;
3. optionally collapse unary chains into one node labelled ``A+B`` (off by default: as in the
   reference code, each node of a chain then gives its own, repeated, span);
4. lower-case words and replace numbers: every maximal run of characters that starts with a digit and
   continues with digits, ``,`` or ``.`` becomes ``N`` (``3.5`` -> ``N``, ``1,000`` -> ``N``,
   ``12-year-old`` -> ``N-year-old``, ``1990s`` -> ``Ns``; Kim et al.'s ``clean_number``).

The gold spans are ``[i, k)`` (end exclusive) of every phrasal node (not the preterminals), in
pre-order, root ``[0, n)`` included, width-1 phrasal nodes such as ``(NP (PRP it))`` included, not
de-duplicated; labels drop function tags and indices (``NP-SBJ-1`` -> ``NP``). The parsing metrics
(``zoo.metrics``) drop trivial and whole-sentence spans and de-duplicate.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from zoo.data.utf8 import line_and_column, read_utf8, without_line_marks

__all__ = [
    "REMOVED_TAGS",
    "ParsedSentence",
    "Tree",
    "base_label",
    "collapse_unary",
    "normalize_word",
    "parse_bracketed",
    "preprocess",
    "preprocess_trees",
    "read_bracketed",
    "read_mrg",
    "remove_tags",
    "spans_to_tensor",
]

EMPTY_TAG = "-NONE-"
PUNCTUATION_TAGS = frozenset({"''", "``", ",", ".", ":", "-LRB-", "-RRB-", "-LCB-", "-RCB-", "#", "$"})
REMOVED_TAGS = frozenset({EMPTY_TAG}) | PUNCTUATION_TAGS

_NUMBER = re.compile(r"[0-9][0-9,.]*")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True)
class Tree:
    """A node: a preterminal has a ``word`` and no children; a phrasal node has children."""

    label: str
    children: tuple[Tree, ...] = ()
    word: str | None = None

    def __post_init__(self) -> None:
        if (self.word is None) == (not self.children):
            raise ValueError(
                f"a Tree needs either a word (preterminal) or children, got word={self.word!r} "
                f"and {len(self.children)} children for label {self.label!r}"
            )

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def words(self) -> list[str]:
        return [t.word for t in self.preterminals()]

    def tags(self) -> list[str]:
        return [t.label for t in self.preterminals()]

    def preterminals(self) -> list[Tree]:
        out, stack = [], [self]
        while stack:
            node = stack.pop()
            if node.is_preterminal:
                out.append(node)
            else:
                stack.extend(reversed(node.children))
        return out

    def spans(self) -> list[tuple[int, int, str]]:
        """``(start, end, label)`` of every phrasal node, end exclusive, in pre-order."""
        out: list[tuple[int, int, str]] = []
        self._spans(0, out)
        return out

    def _spans(self, start: int, out: list) -> int:
        if self.is_preterminal:
            return start + 1
        row = len(out)
        out.append(None)
        end = start
        for child in self.children:
            end = child._spans(end, out)
        out[row] = (start, end, self.label)
        return end

    def __str__(self) -> str:
        if self.is_preterminal:
            return f"({self.label} {self.word})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


@dataclass(frozen=True)
class ParsedSentence:
    """A preprocessed sentence: words, POS tags, and gold ``(start, end)`` spans with their labels."""

    words: list[str]
    tags: list[str]
    spans: list[tuple[int, int]]
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.words)


# ----------------------------------------------------------------------------------------------- reading


def _where(text: str, offset: int, source: str) -> str:
    line, column = line_and_column(text, offset)
    return f"{source}, line {line}, column {column}"


def parse_bracketed(text: str, source: str = "<string>") -> list[Tree]:
    """Parse every bracketed tree in ``text`` (``source`` names it in error messages)."""
    trees: list[Tree] = []
    # Each open node: [label, children, word, offset of its "(" ].
    stack: list[list] = []
    for match in _TOKEN.finditer(text):
        token, offset = match.group(), match.start()
        if token == "(":
            if stack and stack[-1][2] is not None:
                raise ValueError(
                    f"a subtree after the word {stack[-1][2]!r} of a leaf at {_where(text, offset, source)}"
                )
            stack.append([None, [], None, offset])
        elif token == ")":
            if not stack:
                raise ValueError(f"unbalanced brackets: ')' without '(' at {_where(text, offset, source)}")
            label, children, word, start = stack.pop()
            node = _close(label, children, word, stack, text, start, source)
            if stack:
                stack[-1][1].append(node)
            else:
                trees.append(node)
        else:
            if not stack:
                raise ValueError(f"text outside brackets: {token!r} at {_where(text, offset, source)}")
            top = stack[-1]
            if top[0] is None and not top[1]:
                top[0] = token
            elif top[1]:
                raise ValueError(f"a word {token!r} beside subtrees at {_where(text, offset, source)}")
            elif top[2] is not None:
                where = _where(text, offset, source)
                raise ValueError(f"a leaf with more than one word ({top[2]!r}, {token!r}) at {where}")
            else:
                top[2] = token
    if stack:
        where = _where(text, stack[-1][3], source)
        raise ValueError(f"unbalanced brackets: '(' never closed, opened at {where}")
    if not trees:
        raise ValueError(f"empty input: no bracketed tree in {source}")
    return trees


def _close(label, children, word, stack, text, start, source) -> Tree:
    where = _where(text, start, source)
    if children:
        if label is None:
            if stack or len(children) != 1:
                raise ValueError(
                    f"a node without a label at {where} (only an outer bracket around one tree may lack one)"
                )
            return children[0]
        return Tree(label, tuple(children))
    if label is None:
        raise ValueError(f"an empty bracket '()' at {where}")
    if word is None:
        raise ValueError(f"a leaf without a word: ({label}) at {where}")
    return Tree(label, word=word)


def _mrg_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*.mrg") if p.is_file())
    if not files:
        raise ValueError(f"no .mrg files under {directory}")
    return files


def read_mrg(path: str | os.PathLike) -> list[Tree]:
    """Trees of one bracketed file, or of every ``.mrg`` file under a directory (sorted paths)."""
    path = Path(path)
    if path.is_dir():
        return [tree for f in _mrg_files(path) for tree in read_mrg(f)]
    if not path.is_file():
        raise FileNotFoundError(f"no such file or directory: {path}")
    return parse_bracketed(without_line_marks(read_utf8(path)), source=str(path))


def read_bracketed(text_or_path: str | os.PathLike) -> list[Tree]:
    """Trees from bracketed text, or from a file / directory (a ``Path``, or a string naming one)."""
    if isinstance(text_or_path, os.PathLike):
        return read_mrg(text_or_path)
    if not isinstance(text_or_path, str):
        raise TypeError(f"expected bracketed text or a path, got {type(text_or_path).__name__}")
    if "(" in text_or_path or ")" in text_or_path or not text_or_path.strip():
        if os.path.exists(text_or_path):
            return read_mrg(text_or_path)
        return parse_bracketed(text_or_path)
    return read_mrg(text_or_path)


# ----------------------------------------------------------------------------------------- preprocessing


def base_label(label: str) -> str:
    """The category without function tags or indices: ``NP-SBJ-1`` -> ``NP``; ``-NONE-`` stays."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def normalize_word(word: str, lowercase: bool = True, replace_numbers: bool = True) -> str:
    """Lower-case ``word`` and replace each maximal run ``[0-9][0-9,.]*`` by ``N``."""
    if lowercase:
        word = word.lower()
    if replace_numbers:
        word = _NUMBER.sub("N", word)
    return word


def remove_tags(tree: Tree, tags: Iterable[str] = REMOVED_TAGS) -> Tree | None:
    """Drop preterminals tagged with ``tags`` and the constituents left empty (``None`` if all go)."""
    tags = frozenset(tags)

    def prune(node: Tree) -> Tree | None:
        if node.is_preterminal:
            return None if node.label in tags else node
        kept = tuple(c for c in (prune(child) for child in node.children) if c is not None)
        return Tree(node.label, kept) if kept else None

    return prune(tree)


def collapse_unary(tree: Tree, join: str = "+") -> Tree:
    """Merge each chain of phrasal nodes with one phrasal child into one node labelled ``A+B``."""
    if tree.is_preterminal:
        return tree
    labels, node = [tree.label], tree
    while len(node.children) == 1 and not node.children[0].is_preterminal:
        node = node.children[0]
        labels.append(node.label)
    return Tree(join.join(labels), tuple(collapse_unary(c, join) for c in node.children))


def preprocess(
    tree: Tree,
    *,
    removed_tags: Iterable[str] = REMOVED_TAGS,
    lowercase: bool = True,
    replace_numbers: bool = True,
    collapse_unary_chains: bool = False,
) -> ParsedSentence | None:
    """Preprocess one gold tree (module docstring); ``None`` if no word is left."""
    pruned = remove_tags(tree, removed_tags)
    if pruned is None:
        return None
    if collapse_unary_chains:
        pruned = collapse_unary(pruned)
    spans = pruned.spans()
    return ParsedSentence(
        words=[normalize_word(w, lowercase, replace_numbers) for w in pruned.words()],
        tags=pruned.tags(),
        spans=[(i, k) for i, k, _ in spans],
        labels=["+".join(base_label(p) for p in lab.split("+")) for _, _, lab in spans],
    )


def preprocess_trees(
    trees: Iterable[Tree], *, min_length: int = 2, max_length: int | None = None, **options
) -> list[ParsedSentence]:
    """``preprocess`` each tree, keeping sentences of ``min_length..max_length`` words.

    The default ``min_length=2`` drops length-1 sentences (Kim et al. 2019); ``max_length`` caps
    training data (e.g. 40), ``None`` keeps all (validation and test).
    """
    out = []
    for tree in trees:
        sent = preprocess(tree, **options)
        if sent is not None and len(sent) >= min_length and (max_length is None or len(sent) <= max_length):
            out.append(sent)
    return out


# ------------------------------------------------------------------------------------------------ tensors


def spans_to_tensor(span_lists: Sequence[Iterable[Sequence[int]]], T: int, width: int = 2) -> Tensor:
    """Pad span lists into a long ``B x (2T-1) x width`` tensor (``-1`` padding), rows in pre-order.

    Each span is ``(start, end[, label])`` with ``0 <= start < end <= T``; ``width=2`` keeps
    ``(start, end)``, ``width=3`` also an integer label. Rows are stably sorted by start ascending,
    end descending (the contract's pre-order for a tree).
    """
    if width not in (2, 3):
        raise ValueError(f"width must be 2 (start, end) or 3 (start, end, label), got {width}")
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    rows = 2 * T - 1
    out = torch.full((len(span_lists), rows, width), -1, dtype=torch.long)
    for b, spans in enumerate(span_lists):
        spans = [_int_row(span, width, f"span {j} of sentence {b}") for j, span in enumerate(spans)]
        if len(spans) > rows:
            raise ValueError(f"sentence {b} has {len(spans)} spans, more than 2T - 1 = {rows}")
        for j, (start, end, *_) in enumerate(spans):
            if not 0 <= start < end <= T:
                raise ValueError(
                    f"span {j} of sentence {b} is ({start}, {end}), outside 0 <= start < end <= T = {T}"
                )
        spans.sort(key=lambda s: (s[0], -s[1]))
        if spans:
            out[b, : len(spans)] = torch.tensor(spans, dtype=torch.long)
    return out


def _int_row(span, width: int, where: str) -> tuple[int, ...]:
    try:
        values = tuple(span)[:width]
        if len(values) < width or any(isinstance(v, bool) for v in values):
            raise TypeError
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise ValueError(f"{where} must hold {width} integers, got {span!r}") from None
