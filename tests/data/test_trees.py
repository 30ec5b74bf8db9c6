"""Bracketed-tree reader, PTB preprocessing for unsupervised parsing, span tensors."""

import pytest
import torch

from zoo.data import (
    REMOVED_TAGS,
    Tree,
    base_label,
    collapse_unary,
    normalize_word,
    parse_bracketed,
    preprocess,
    preprocess_trees,
    read_bracketed,
    read_mrg,
    spans_to_tensor,
)
from zoo.metrics import CorpusF1, SentenceF1

# Two WSJ-style trees over several lines: outer unlabelled bracket, -NONE- elements, punctuation,
# currency, numbers, function tags and co-indices.
MRG = """\
( (S
    (NP-SBJ-1 (DT The) (NNS stocks) )
    (VP (VBD rose)
      (NP-EXT (CD 3.5) (NN %) )
      (PP-TMP (IN in)
        (NP (CD 1989) )))
    (, ,)
    (S-ADV
      (NP-SBJ (-NONE- *-1) )
      (VP (VBG closing)
        (ADVP (RBR higher) )))
    (. .) ))
( (S (`` ``)
    (NP-SBJ (PRP It) )
    (VP (VBZ costs)
      (NP ($ $) (CD 1,000) (-NONE- *U*) ))
    ('' '') (. .) ))
"""

# Tree 1 once -NONE-, ",", "." are removed and NP-SBJ (now empty) is pruned:
#   (S (NP the stocks) (VP rose (NP N %) (PP in (NP N))) (S (VP closing (ADVP higher))))
#   words 0 the 1 stocks 2 rose 3 N 4 % 5 in 6 N 7 closing 8 higher
WORDS_1 = ["the", "stocks", "rose", "N", "%", "in", "N", "closing", "higher"]
SPANS_1 = [(0, 9), (0, 2), (2, 7), (3, 5), (5, 7), (6, 7), (7, 9), (7, 9), (8, 9)]
LABELS_1 = ["S", "NP", "VP", "NP", "PP", "NP", "S", "VP", "ADVP"]
# Tree 2 once ``, $, -NONE-, '', . are removed: (S (NP it) (VP costs (NP N)))
WORDS_2 = ["it", "costs", "N"]
SPANS_2 = [(0, 3), (0, 1), (1, 3), (2, 3)]
LABELS_2 = ["S", "NP", "VP", "NP"]


@pytest.fixture
def mrg_file(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(MRG)
    return path


def test_reader_on_mrg_file(mrg_file):
    trees = read_mrg(mrg_file)
    assert len(trees) == 2
    assert [t.label for t in trees] == ["S", "S"]  # the outer unlabelled bracket is gone
    assert trees[0].words()[:3] == ["The", "stocks", "rose"]
    assert trees[1].tags() == ["``", "PRP", "VBZ", "$", "CD", "-NONE-", "''", "."]
    assert trees[0].children[0] == Tree("NP-SBJ-1", (Tree("DT", word="The"), Tree("NNS", word="stocks")))
    assert read_bracketed(mrg_file) == trees
    assert read_bracketed(str(mrg_file)) == trees
    assert read_bracketed(MRG) == trees
    assert parse_bracketed(str(trees[0])) == [trees[0]]  # str() writes it back in bracketed form


def test_preprocess_hand_checked(mrg_file):
    first, second = (preprocess(t) for t in read_mrg(mrg_file))
    assert first.words == WORDS_1
    assert first.tags == ["DT", "NNS", "VBD", "CD", "NN", "IN", "CD", "VBG", "RBR"]
    assert first.spans == SPANS_1  # (7, 9) twice: S-ADV over VP, not de-duplicated
    assert first.labels == LABELS_1
    assert (second.words, second.spans, second.labels) == (WORDS_2, SPANS_2, LABELS_2)
    assert len(first) == 9


def test_preprocess_options(mrg_file):
    first = read_mrg(mrg_file)[0]
    collapsed = preprocess(first, collapse_unary_chains=True)
    assert collapsed.spans == [s for j, s in enumerate(SPANS_1) if j != 7]
    assert collapsed.labels[6] == "S+VP"
    raw = preprocess(first, lowercase=False, replace_numbers=False, removed_tags={"-NONE-"})
    assert raw.words == ["The", "stocks", "rose", "3.5", "%", "in", "1989", ",", "closing", "higher", "."]
    assert raw.spans[0] == (0, 11)


def test_removed_tags_and_number_rule():
    assert REMOVED_TAGS == {"-NONE-", "''", "``", ",", ".", ":", "-LRB-", "-RRB-", "-LCB-", "-RCB-", "#", "$"}
    cases = {"3.5": "N", "1,000": "N", "12-year-old": "N-year-old", "1990s": "Ns", "a1b22": "aNbN",
             "1.": "N", "Dow": "dow", "%": "%"}
    for word, expected in cases.items():
        assert normalize_word(word) == expected
    assert normalize_word("3.5", replace_numbers=False) == "3.5"
    assert [base_label(x) for x in ["NP-SBJ-1", "PP-LOC=2", "S", "-NONE-", "PRP$"]] == [
        "NP", "PP", "S", "-NONE-", "PRP$"
    ]


def test_pruning_and_filtering():
    only_punct = parse_bracketed("(S (. .) (NP (-NONE- *)))")[0]
    assert preprocess(only_punct) is None
    one_word = parse_bracketed("(S (NP (PRP Yes)) (. .))")[0]
    assert preprocess(one_word).spans == [(0, 1), (0, 1)]
    trees = parse_bracketed("(S (NP (PRP Yes)) (. .)) " + MRG)
    assert [len(s) for s in preprocess_trees(trees)] == [9, 3]  # the length-1 sentence is dropped
    assert [len(s) for s in preprocess_trees(trees, min_length=1, max_length=3)] == [1, 3]


def test_collapse_unary_keeps_preterminals():
    tree = parse_bracketed("(S (VP (VP (VB go))) (NP (NN home)))")[0]
    assert str(collapse_unary(tree)) == "(S (VP+VP (VB go)) (NP (NN home)))"


def test_gold_spans_feed_the_metrics(mrg_file):
    sents = preprocess_trees(read_mrg(mrg_file))
    golds = [s.spans for s in sents]
    for cls in (SentenceF1, CorpusF1):
        metric = cls()
        metric.update(golds, golds)
        assert metric.compute().item() == 1.0


def test_directory_reads_mrg_files_in_sorted_order(tmp_path):
    (tmp_path / "22").mkdir()
    (tmp_path / "21").mkdir()
    (tmp_path / "22" / "wsj_2200.mrg").write_text("( (S (NN c) (NN c)) )")
    (tmp_path / "21" / "wsj_2101.mrg").write_text("( (S (NN b) (NN b)) )")
    (tmp_path / "21" / "wsj_2100.mrg").write_text("( (S (NN a) (NN a)) )\n( (S (NN a2) (NN a2)) )")
    (tmp_path / "21" / "README").write_text("not a tree")
    trees = read_mrg(tmp_path)
    assert [t.words()[0] for t in trees] == ["a", "a2", "b", "c"]
    assert read_bracketed(str(tmp_path)) == trees
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .mrg files under"):
        read_mrg(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        read_bracketed(str(tmp_path / "missing.mrg"))


@pytest.mark.parametrize(
    "text, match",
    [
        ("", r"empty input: no bracketed tree in <string>"),
        ("  \n ", r"empty input"),
        ("(S (NP (DT the) (NN cat))\n  (VP (VBD sat))", r"'\(' never closed, opened at .* line 1, column 1"),
        ("(S (NN a)))", r"unbalanced brackets: '\)' without '\(' at <string>, line 1, column 11"),
        ("(S (NN a))\nfoo", r"text outside brackets: 'foo' at <string>, line 2, column 1"),
        ("(S\n  (NP (DT the) (NN)))", r"a leaf without a word: \(NN\) at <string>, line 2, column 16"),
        ("(S (NN a b))", r"a leaf with more than one word \('a', 'b'\) at <string>, line 1, column 10"),
        ("(S (NN a) b)", r"a word 'b' beside subtrees at <string>, line 1, column 11"),
        ("(S (NN a (DT b)))", r"a subtree after the word 'a' of a leaf at <string>, line 1, column 10"),
        ("(S ( (NN a)))", r"a node without a label at <string>, line 1, column 4"),
        ("( (S (NN a)) (S (NN b)) )", r"a node without a label at <string>, line 1, column 1"),
        ("(S ())", r"an empty bracket '\(\)' at <string>, line 1, column 4"),
    ],
)
def test_malformed_input_names_the_position(text, match):
    with pytest.raises(ValueError, match=match):
        parse_bracketed(text)


def test_malformed_file_names_the_file(tmp_path):
    path = tmp_path / "bad.mrg"
    path.write_text("( (S (NN a)) )\n( (S (NN b) )\n")
    with pytest.raises(ValueError, match=rf"never closed, opened at {path}, line 2, column 1"):
        read_mrg(path)


def test_tree_needs_a_word_or_children():
    with pytest.raises(ValueError, match="either a word"):
        Tree("NP")
    with pytest.raises(ValueError, match="either a word"):
        Tree("NN", (Tree("X", word="x"),), word="y")


def test_spans_to_tensor():
    out = spans_to_tensor([[(1, 3), (0, 3), (1, 2), (0, 1), (2, 3)], [(0, 2), (0, 1), (1, 2)]], T=3)
    assert out.dtype == torch.long and out.shape == (2, 5, 2)
    # Rows come out in pre-order (start ascending, end descending), -1 padding after.
    assert out.tolist() == [
        [[0, 3], [0, 1], [1, 3], [1, 2], [2, 3]],
        [[0, 2], [0, 1], [1, 2], [-1, -1], [-1, -1]],
    ]
    labelled = spans_to_tensor([[(0, 2, 4), (0, 1, 7), (1, 2, 8)]], T=2, width=3)
    assert labelled.tolist() == [[[0, 2, 4], [0, 1, 7], [1, 2, 8]]]
    assert spans_to_tensor([[(0, 2, "NP")]], T=2).tolist() == [[[0, 2], [-1, -1], [-1, -1]]]
    with pytest.raises(ValueError, match=r"4 spans, more than 2T - 1 = 3"):
        spans_to_tensor([[(0, 2)] * 4], T=2)
    with pytest.raises(ValueError, match=r"is \(0, 3\), outside 0 <= start < end <= T = 2"):
        spans_to_tensor([[(0, 3)]], T=2)
    with pytest.raises(ValueError, match=r"must hold 3 integers"):
        spans_to_tensor([[(0, 2)]], T=2, width=3)
    with pytest.raises(ValueError, match="width must be 2"):
        spans_to_tensor([[(0, 2)]], T=2, width=4)


def test_a_tree_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_bytes(b"(S (NP (DT the)) (VP (VBD ran)))\n(S (NP (NNP Jos\xe9)) (VP (VBD left)))\n")
    with pytest.raises(ValueError, match=r"wsj_0001.mrg is not UTF-8 text: line 2 \(byte 48, b'\\xe9'\)"):
        read_mrg(path)
