"""Brute-force reference for the tree (PCFG) engine (see docs/tree-api.md).

Independent of ``zoo``: every quantity of one batch element is computed by enumerating all binary
trees of its sentence and all their labellings (nonterminals on spans of width >= 2, preterminals
on leaves), scoring each one term by term from the raw container arguments in Python float64.

Trees are tuples of rows in the contract's pre-order (start ascending, then end descending):
a labelled tree is a tuple of ``(start, end, label)``, an unlabelled tree a tuple of
``(start, end)``. ``to_tensor_trees`` / ``from_tensor_trees`` convert to and from the contract's
padded ``B x (2T-1) x 3`` (or ``x 2``) long tensors.

``tests/tree_strategies.py`` has the hypothesis strategies that draw small specs.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import reductions
import torch
from reductions import log_value

NEG_INF = float("-inf")

KINDS = ("dense", "lowrank", "rankspace")

# number of dimensions of each grammar argument without its optional leading batch axis
GRAMMAR_DIMS = {"root": 1, "rules": 3, "head": 2, "children": 3, "U": 2, "V": 2, "W": 2}
GRAMMAR_ARGS = {
    "dense": ("root", "rules"),
    "lowrank": ("root", "rules", "head", "children"),
    "rankspace": ("root", "U", "V", "W"),
}


@dataclass
class TreeSpec:
    """Raw arguments of one batch of grammars and sentences.

    kind: "dense" | "lowrank" | "rankspace"
    args: the container arguments by their contract names, each (B x) ...:
        dense:     root NT, rules NT x S x S (log)
        lowrank:   root NT, rules NT x S x S (log), head NT x R >= 0, children NT x NT x R >= 0
        rankspace: root NT (log), U NT x r, V S x r, W S x r (all >= 0)
      plus terms: B x T x PT log-scores of the preterminals (absent for a bare grammar, as given
      to ``sentence_distribution``).
    lengths: (B,) long tensor or None (= all T); every length is >= 2.
    """

    kind: str
    args: dict
    lengths: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)

    @property
    def batch(self) -> int:
        if "terms" in self.args:
            return self.args["terms"].shape[0]
        batched = [self.args[n].shape[0] for n in GRAMMAR_ARGS[self.kind] if self._batched(n)]
        return batched[0] if batched else 1

    @property
    def T(self) -> int:
        return self.args["terms"].shape[1]

    @property
    def NT(self) -> int:
        return self.args["root"].shape[-1]

    @property
    def S(self) -> int:
        key = "V" if self.kind == "rankspace" else "rules"
        return self.args[key].shape[-2]

    @property
    def PT(self) -> int:
        return self.S - self.NT

    @property
    def rank(self) -> int | None:
        key = {"dense": None, "lowrank": "head", "rankspace": "U"}[self.kind]
        return None if key is None else self.args[key].shape[-1]

    def length(self, b: int) -> int:
        n = self.T if self.lengths is None else int(self.lengths[b])
        if n < 2:
            raise ValueError(f"sentence length {n} < 2 (batch element {b})")
        return n

    def _batched(self, name: str) -> bool:
        return self.args[name].dim() == GRAMMAR_DIMS[name] + 1

    def grammar(self, name: str, b: int) -> torch.Tensor:
        """Grammar argument `name` of batch element b (the leading batch axis, if any, removed)."""
        t = self.args[name].detach().double()
        return t[b] if self._batched(name) else t

    def __repr__(self) -> str:  # readable hypothesis falsifying examples
        parts = [f"kind={self.kind!r}", f"NT={self.NT}", f"PT={self.PT}"]
        if "terms" in self.args:
            parts += [f"B={self.batch}", f"T={self.T}"]
        parts.append(f"lengths={None if self.lengths is None else self.lengths.tolist()}")
        for k, v in self.args.items():
            parts.append(f"{k}={v.tolist() if isinstance(v, torch.Tensor) else v!r}")
        return "TreeSpec(" + ", ".join(parts) + ")"


# --------------------------------------------------------------------------- potentials
def rule_log_potential(spec: TreeSpec, b: int, A: int, bsym: int, csym: int) -> float:
    """log psi(A, bsym, csym) of batch element b, straight from the contract's table."""
    NT = spec.NT
    if spec.kind == "dense":
        return float(spec.grammar("rules", b)[A, bsym, csym])
    if spec.kind == "lowrank":
        if bsym < NT and csym < NT:
            head, children = spec.grammar("head", b), spec.grammar("children", b)
            terms = (float(head[A, r]) * float(children[bsym, csym, r]) for r in range(spec.rank))
            return log_value(sum(terms))
        return float(spec.grammar("rules", b)[A, bsym, csym])
    if spec.kind == "rankspace":
        U, V, W = spec.grammar("U", b), spec.grammar("V", b), spec.grammar("W", b)
        terms = (float(U[A, r]) * float(V[bsym, r]) * float(W[csym, r]) for r in range(spec.rank))
        return log_value(sum(terms))
    raise ValueError(spec.kind)


def rule_table(spec: TreeSpec, b: int) -> list:
    """psi[A][bsym][csym] = rule_log_potential(spec, b, A, bsym, csym), nested lists."""
    S = spec.S
    return [
        [[rule_log_potential(spec, b, A, x, y) for y in range(S)] for x in range(S)] for A in range(spec.NT)
    ]


def to_dense(spec: TreeSpec) -> TreeSpec:
    """An equivalent "dense" spec: rules[b] = rule_table(spec, b) (batched), same root, terms, lengths."""
    rules = torch.tensor([rule_table(spec, b) for b in range(spec.batch)], dtype=torch.float64)
    root = torch.stack([spec.grammar("root", b) for b in range(spec.batch)])
    args = {"root": root, "rules": rules}
    if "terms" in spec.args:
        args["terms"] = spec.args["terms"]
    return TreeSpec("dense", args, spec.lengths, dict(spec.meta))


# --------------------------------------------------------------------------- trees
@functools.cache
def _subtrees(i: int, k: int) -> tuple:
    """Every binary tree over [i, k) as a tuple of spans (unordered)."""
    if k - i == 1:
        return (((i, k),),)
    out = []
    for j in range(i + 1, k):
        for left in _subtrees(i, j):
            for right in _subtrees(j, k):
                out.append(((i, k),) + left + right)
    return tuple(out)


def preorder(rows) -> tuple:
    """Rows sorted by start ascending then end descending (the contract's pre-order)."""
    return tuple(sorted(rows, key=lambda r: (r[0], -r[1])))


@functools.cache
def enumerate_trees(n: int) -> tuple:
    """Every unlabelled binary tree over n >= 2 words: tuples of (start, end) in pre-order."""
    if n < 2:
        raise ValueError(f"sentence length {n} < 2")
    return tuple(preorder(t) for t in _subtrees(0, n))


def labelled_trees(n: int, NT: int, PT: int):
    """Every labelled tree over n words (generator of tuples of (start, end, label))."""
    for spans in enumerate_trees(n):
        choices = [range(NT) if k - i >= 2 else range(PT) for i, k in spans]
        for labels in itertools.product(*choices):
            yield tuple((i, k, a) for (i, k), a in zip(spans, labels))


def catalan(m: int) -> int:
    return math.comb(2 * m, m) // (m + 1)


def is_valid_tree(tree, n: int, NT: int, PT: int) -> bool:
    """True iff `tree` is a labelled tree of a length-n sentence in the contract's row order."""
    tree = tuple(tuple(int(x) for x in row) for row in tree)
    if any(len(row) != 3 for row in tree):
        return False
    spans = tuple((i, k) for i, k, _ in tree)
    if spans not in set(enumerate_trees(n)):
        return False
    return all(0 <= a < (NT if k - i >= 2 else PT) for i, k, a in tree)


def unlabel(tree) -> tuple:
    """(start, end) rows of a labelled tree."""
    return tuple((row[0], row[1]) for row in tree)


# --------------------------------------------------------------------------- scores
def _tables(spec: TreeSpec, b: int):
    """(root[NT], psi[NT][S][S], terms[n][PT]) as Python floats for batch element b."""
    n = spec.length(b)
    root = spec.grammar("root", b).tolist()
    terms = spec.args["terms"].detach().double()[b, :n].tolist()
    return root, rule_table(spec, b), terms


def _score(tree, tables, NT: int) -> float:
    root, psi, terms = tables
    label = {(i, k): a for i, k, a in tree}
    s = 0.0
    for i, k, a in tree:
        if k - i == 1:
            s += terms[i][a]
            continue
        if i == 0 and k == len(terms):
            s += root[a]
        j = next(j for j in range(i + 1, k) if (i, j) in label and (j, k) in label)
        bsym = label[(i, j)] + (NT if j - i == 1 else 0)
        csym = label[(j, k)] + (NT if k - j == 1 else 0)
        s += psi[a][bsym][csym]
    return s


def tree_score(spec: TreeSpec, b: int, tree) -> float:
    """score(tree) of batch element b; `tree` must be a valid labelled tree of its length."""
    n = spec.length(b)
    tree = tuple(tuple(int(x) for x in row) for row in tree)
    if not is_valid_tree(tree, n, spec.NT, spec.PT):
        raise ValueError(f"not a labelled tree of length {n}: {tree}")
    return _score(tree, _tables(spec, b), spec.NT)


def tree_scores(spec: TreeSpec, b: int) -> list:
    """[(labelled tree, score)] over every labelled tree of batch element b."""
    root, psi, terms = _tables(spec, b)
    n, NT, PT = spec.length(b), spec.NT, spec.PT
    out = []
    for spans in enumerate_trees(n):
        # per row: (True, position) for a leaf; (False, left row, right row, left is a leaf,
        # right is a leaf) for a binary node
        index = {s: r for r, s in enumerate(spans)}
        plan = []
        for i, k in spans:
            if k - i == 1:
                plan.append((True, i))
                continue
            j = next(j for j in range(i + 1, k) if (i, j) in index and (j, k) in index)
            plan.append((False, index[(i, j)], index[(j, k)], j - i == 1, k - j == 1))
        choices = [range(NT) if k - i >= 2 else range(PT) for i, k in spans]
        for labels in itertools.product(*choices):
            s = root[labels[0]]
            for a, p in zip(labels, plan):
                if p[0]:
                    s += terms[p[1]][a]
                else:
                    bsym = labels[p[1]] + (NT if p[3] else 0)
                    csym = labels[p[2]] + (NT if p[4] else 0)
                    s += psi[a][bsym][csym]
            out.append((tuple((i, k, a) for (i, k), a in zip(spans, labels)), s))
    return out


# --------------------------------------------------------------------------- quantities
def log_partition(spec: TreeSpec, b: int) -> float:
    return reductions.log_sum(s for _, s in tree_scores(spec, b))


def tree_distribution(spec: TreeSpec, b: int) -> dict:
    """{labelled tree: p(tree)} over every labelled tree of batch element b."""
    return reductions.distribution(dict(tree_scores(spec, b)))


def log_prob(spec: TreeSpec, b: int, tree) -> float:
    """score(tree) - log Z."""
    return tree_score(spec, b, tree) - log_partition(spec, b)


def labelled_span_marginals(spec: TreeSpec, b: int) -> dict:
    """{(start, end, label): p(that labelled span is in the tree)} (absent = 0)."""
    acc = {}
    for tree, p in tree_distribution(spec, b).items():
        for row in tree:
            acc[row] = acc.get(row, 0.0) + p
    return acc


def span_marginals(spec: TreeSpec, b: int) -> torch.Tensor:
    """T x (T+1), [i, k] = p(span [i, k) in the tree); zero where k <= i or k > length."""
    out = torch.zeros(spec.T, spec.T + 1, dtype=torch.float64)
    for (i, k, _), p in labelled_span_marginals(spec, b).items():
        out[i, k] += p
    return out


def marginals(spec: TreeSpec, b: int) -> torch.Tensor:
    """T x (T+1) x NT, [i, k, A] = p(span [i, k) is a node labelled A); zero for width < 2."""
    out = torch.zeros(spec.T, spec.T + 1, spec.NT, dtype=torch.float64)
    for (i, k, a), p in labelled_span_marginals(spec, b).items():
        if k - i >= 2:
            out[i, k, a] = p
    return out


def preterminal_marginals(spec: TreeSpec, b: int) -> torch.Tensor:
    """T x PT, [t, P] = p(leaf t labelled P); zero past the length."""
    out = torch.zeros(spec.T, spec.PT, dtype=torch.float64)
    for (i, k, a), p in labelled_span_marginals(spec, b).items():
        if k - i == 1:
            out[i, a] = p
    return out


def entropy(spec: TreeSpec, b: int) -> float:
    """-sum p log p over the labelled trees of batch element b."""
    return reductions.entropy(dict(tree_scores(spec, b)))


def best(spec: TreeSpec, b: int, tol: float = 1e-9):
    """(max score, set of every tree whose score is within tol of it: the admissible argmaxes)."""
    sc = tree_scores(spec, b)
    m = max(s for _, s in sc)
    return m, {t for t, s in sc if s >= m - tol * max(1.0, abs(m))}


def max_score(spec: TreeSpec, b: int) -> float:
    return best(spec, b)[0]


def mbr_trees(span_marginals_n, n: int, tol: float = 1e-9) -> set:
    """Unlabelled trees over n words maximizing the sum of span_marginals_n[i][k] over their spans
    (all maximizers within tol, to allow ties). span_marginals_n: tensor or nested lists."""
    m = span_marginals_n.tolist() if isinstance(span_marginals_n, torch.Tensor) else span_marginals_n
    gains = {t: sum(float(m[i][k]) for i, k in t) for t in enumerate_trees(n)}
    top = max(gains.values())
    return {t for t, g in gains.items() if g >= top - tol}


# --------------------------------------------------------------------------- sentences
def element_spec(spec: TreeSpec, b: int, terms: torch.Tensor) -> TreeSpec:
    """Batch-of-one spec: the grammar of element b (no batch axis) with terms (n x PT), length n."""
    args = {name: spec.grammar(name, b) for name in GRAMMAR_ARGS[spec.kind]}
    args["terms"] = terms.detach().double().reshape(1, *terms.shape)
    return TreeSpec(spec.kind, args, None, dict(spec.meta))


def sentence_scores(grammar_spec: TreeSpec, emission: torch.Tensor, n: int, b: int = 0) -> dict:
    """{(words, tree): joint score} over all V^n words and all labelled trees of length n, where
    the score is the tree score with terms[t, P] = emission[P, words[t]] (emission (B x) PT x V)."""
    em = emission.detach().double()
    em = em[b] if em.dim() == 3 else em
    out = {}
    for words in itertools.product(range(em.shape[1]), repeat=n):
        terms = em[:, list(words)].T
        for tree, s in tree_scores(element_spec(grammar_spec, b, terms), 0):
            out[(words, tree)] = s
    return out


def sentence_distribution(grammar_spec: TreeSpec, emission: torch.Tensor, n: int, b: int = 0) -> dict:
    """{(words, tree): p(words, tree | length n)} for batch element b (see sentence_scores)."""
    sc = sentence_scores(grammar_spec, emission, n, b)
    return reductions.distribution(sc)


# --------------------------------------------------------------------------- tensor form
def to_tensor_trees(trees, T: int) -> torch.Tensor:
    """B trees (tuples of 3- or 2-column rows) -> B x (2T-1) x 3 (or x 2) long, padded with -1."""
    trees = [tuple(trees_b) for trees_b in trees]
    cols = len(trees[0][0])
    out = torch.full((len(trees), 2 * T - 1, cols), -1, dtype=torch.long)
    for b, tree in enumerate(trees):
        if len(tree) > 2 * T - 1:
            raise ValueError(f"tree of {len(tree)} rows does not fit T={T}")
        if tree:
            out[b, : len(tree)] = torch.tensor(tree, dtype=torch.long)
    return out


def from_tensor_tree(rows: torch.Tensor) -> tuple:
    """(2T-1) x 3 (or x 2) long -> tuple of row tuples, the all -1 padding rows dropped."""
    return tuple(tuple(r) for r in rows.tolist() if any(x != -1 for x in r))


def from_tensor_trees(trees: torch.Tensor) -> list:
    """... x B x (2T-1) x C long -> nested lists (same leading axes) of tuple trees."""
    if trees.dim() == 2:
        return from_tensor_tree(trees)
    return [from_tensor_trees(t) for t in trees]


# --------------------------------------------------------------------------- random specs
def _lengths_tensor(lengths, B: int, T: int):
    if lengths is None:
        return None
    lengths = torch.as_tensor(lengths, dtype=torch.long).reshape(B)
    if (lengths < 2).any() or (lengths > T).any():
        raise ValueError(f"lengths {lengths.tolist()} outside 2..{T}")
    return lengths


def protected_rules(NT: int) -> list:
    """Rule entries (A, b, c) never made -inf: the all-label-0 tree of any length stays finite."""
    return [(0, x, y) for x in (0, NT) for y in (0, NT)]


def random_spec(
    kind: str,
    B: int,
    T: int,
    NT: int,
    PT: int,
    rank: int = 2,
    lengths=None,
    generator: torch.Generator | None = None,
    shared_grammar: bool = False,
    scale: float = 1.0,
    forbid: float = 0.0,
) -> TreeSpec:
    """Random float64 TreeSpec: log-potentials randn * scale, features exp(randn * scale).

    shared_grammar: grammar tensors without the batch axis. forbid (dense, lowrank): the
    probability that a rule entry is -inf (never one of ``protected_rules``).
    """
    if kind not in KINDS:
        raise ValueError(kind)
    g = generator
    S = NT + PT
    lead = () if shared_grammar else (B,)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    def feature(*shape):
        return randn(*shape).exp()

    args = {"root": randn(*lead, NT)}
    if kind in ("dense", "lowrank"):
        rules = randn(*lead, NT, S, S)
        if forbid > 0:
            mask = torch.rand(rules.shape, generator=g, dtype=torch.float64) < forbid
            for A, x, y in protected_rules(NT):
                mask[..., A, x, y] = False
            rules = rules.masked_fill(mask, NEG_INF)
        args["rules"] = rules
    if kind == "lowrank":
        args["head"] = feature(*lead, NT, rank)
        args["children"] = feature(*lead, NT, NT, rank)
    if kind == "rankspace":
        args["U"] = feature(*lead, NT, rank)
        args["V"] = feature(*lead, S, rank)
        args["W"] = feature(*lead, S, rank)
    args["terms"] = randn(B, T, PT)
    return TreeSpec(kind, args, _lengths_tensor(lengths, B, T))


def random_pcfg(B: int, NT: int, PT: int, V: int, generator=None, shared_grammar: bool = False):
    """(dense TreeSpec without terms, emission (B x) PT x V): a normalized PCFG (log-softmax root,
    rules over (b, c) for each A, and emission over the vocabulary)."""
    g = generator
    S = NT + PT
    lead = () if shared_grammar else (B,)
    root = torch.randn(*lead, NT, generator=g, dtype=torch.float64).log_softmax(-1)
    rules = torch.randn(*lead, NT, S * S, generator=g, dtype=torch.float64).log_softmax(-1)
    emission = torch.randn(*lead, PT, V, generator=g, dtype=torch.float64).log_softmax(-1)
    spec = TreeSpec("dense", {"root": root, "rules": rules.reshape(*lead, NT, S, S)})
    return spec, emission
