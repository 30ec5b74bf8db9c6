"""zoo.models.PCFG: every backend against brute-force enumeration on tiny sizes, normalization,
the <eos> / perplexity convention, sampling, MBR parsing and constructor errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import tree_bruteforce as bf

from zoo.models import PCFG

BACKENDS = {
    "exact": {},
    "low-rank": {"rank": 3},
    "rank-space": {"rank": 3},
    "randomized": {"k1": 1, "k2": 1},
}


def tiny(backend: str, V: int = 4, NT: int = 2, PT: int = 3, **kw) -> PCFG:
    torch.manual_seed(0)
    model = PCFG(V, NT, PT, backend, embedding_dim=8, hidden_dim=8, **BACKENDS[backend], **kw).double()
    return model.eval()


def batch_of(sentences: list[list[int]], eos: int = 0) -> dict:
    T = max(len(s) for s in sentences) + 1
    tokens = torch.zeros(len(sentences), T, dtype=torch.long)
    for b, s in enumerate(sentences):
        tokens[b, : len(s) + 1] = torch.tensor(s + [eos])
    return {"tokens": tokens, "lengths": torch.tensor([len(s) + 1 for s in sentences])}


def dense_spec(model: PCFG, terms: torch.Tensor, lengths: torch.Tensor) -> bf.TreeSpec:
    g = model.grammar().dense()
    return bf.TreeSpec("dense", {"root": g.root[0], "rules": g.rules[0], "terms": terms}, lengths)


@pytest.mark.parametrize("backend", BACKENDS)
def test_normalized_grammar(backend):
    model = tiny(backend)
    g = model.grammar().dense()
    torch.testing.assert_close(g.root.exp().sum(-1), torch.ones(1, dtype=torch.float64))
    torch.testing.assert_close(g.rules.exp().sum((-1, -2)), torch.ones(1, 2, dtype=torch.float64))
    torch.testing.assert_close(model.emission().exp().sum(-1), torch.ones(3, dtype=torch.float64))


def test_the_emission_covers_eos_as_docs_pcfg_says():
    """The emission is a softmax over every id, <eos> (id 0) included, so a sentence with <eos> among its
    words has a finite score (docs/pcfg.md)."""
    model = tiny("exact")
    assert bool((model.emission().exp()[:, 0] > 0).all())
    assert torch.isfinite(model.log_likelihood(batch_of([[1, 0, 2]]))).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_likelihood_matches_brute_force(backend):
    """log p(words) of a ragged batch (eos dropped) = log sum over all trees, by enumeration."""
    model = tiny(backend)
    batch = batch_of([[1, 2, 3, 1], [3, 3], [2, 1, 1]])
    log_p = model.log_likelihood(batch)
    words = batch["tokens"][:, :4]
    terms = model.emission().detach().t()[words]  # B x T x PT
    spec = dense_spec(model, terms, batch["lengths"] - 1)
    expected = torch.tensor([bf.log_partition(spec, b) for b in range(3)], dtype=torch.float64)
    torch.testing.assert_close(log_p.detach(), expected, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(model.num_events(batch), torch.tensor([5, 3, 4]))


@pytest.mark.parametrize("backend", ["exact", "low-rank", "rank-space"])
def test_probabilities_of_all_sentences_sum_to_length_probability(backend):
    """sum over all V^n sentences of p(words) = p(length n) (the inside with every word summed out)."""
    model, V, n = tiny(backend, V=3), 3, 3
    sentences = [list(s) for s in itertools.product(range(V), repeat=n)]
    total = model.log_likelihood(batch_of(sentences)).detach().exp().sum()
    spec = dense_spec(model, torch.zeros(1, n, 3, dtype=torch.float64), torch.tensor([n]))
    assert math.isclose(float(total), math.exp(bf.log_partition(spec, 0)), rel_tol=1e-8)


@pytest.mark.parametrize("backend", ["exact", "randomized"])
def test_n_pcfg_starts_xavier_uniform(backend):
    """Kim et al. 2019: every weight matrix and embedding of the N-PCFG starts Xavier-uniform."""
    torch.manual_seed(0)
    model = PCFG(50, 4, 6, backend, embedding_dim=32, hidden_dim=16, **BACKENDS[backend])
    for name, p in model.named_parameters():
        p = p.detach().view(1, -1) if name == "root_emb" else p.detach()
        if p.dim() == 2:
            bound = math.sqrt(6 / sum(p.shape))
            assert 0.8 * bound < float(p.abs().max()) <= bound, name


def test_randomized_keeps_everything_when_k_is_nt():
    """k1 = NT: the randomized inside in training mode is the exact one."""
    model = tiny("randomized")
    model.k1, model.k2 = 2, 0
    batch = batch_of([[1, 2, 3], [2, 2]])
    exact = model.log_likelihood(batch)
    model.train()
    torch.testing.assert_close(model.log_likelihood(batch), exact)
    assert model.evaluation_is_exact()


def test_rank_space_factors_start_away_from_uniform():
    """The rank-space symbol and rank embeddings start N(0, 1) (the authors' code), so
    U, V and W start well away from uniform: with Xavier-normal tables (std ~0.1) they started within
    1% of the uniform entropy and NT 30 / PT 60, rank 32 stalled near unigram perplexity on PTB."""
    torch.manual_seed(0)
    model = PCFG(100, 30, 60, "rank-space", rank=32, embedding_dim=64, hidden_dim=64)
    assert 0.8 < float(model.rules.symbol_emb.std()) < 1.2 and 0.8 < float(model.rules.rank_emb.std()) < 1.2
    g = model.grammar()
    entropy = float(-(g.U * g.U.log()).sum(-1).mean())
    assert entropy < 0.9 * math.log(32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_emission_init_scale_spreads_the_first_emissions(backend):
    """emission_init_scale multiplies the word output layer's initial weights (after Kim et al.'s
    initialization where it applies), and nothing else: the preterminals start further from uniform."""

    def build(scale: float) -> PCFG:
        torch.manual_seed(0)
        kw = BACKENDS[backend]
        return PCFG(200, 4, 6, backend, embedding_dim=32, hidden_dim=16, emission_init_scale=scale, **kw)

    plain, spread = build(1.0), build(10.0)
    for (name, p), (_, q) in zip(plain.named_parameters(), spread.named_parameters()):
        torch.testing.assert_close(q, 10 * p if name == "term_out.weight" else p, msg=name)

    def entropy(model: PCFG) -> float:
        log_p = model.emission().detach()
        return float(-(log_p.exp() * log_p).sum(-1).mean())

    assert entropy(plain) > 0.98 * math.log(200)  # nearly uniform
    assert entropy(spread) < 0.9 * math.log(200)
    assert spread.config["emission_init_scale"] == 10.0


def test_rank_space_grammar_is_built_from_its_log_factors():
    """U, V and W come from their log-softmaxes through RankSpaceGrammar.from_logs, so that the float32
    guard's float64 pass exponentiates them in float64 (tests/numerics/test_regressions.py: a factor
    below float32's range keeps its value, and its gradient stays finite)."""
    torch.manual_seed(0)
    model = PCFG(20, 3, 4, "rank-space", rank=5, embedding_dim=8, hidden_dim=8)
    g = model.grammar()
    assert g.logs is not None
    for factor, log_factor in zip((g.U, g.V, g.W), g.logs):
        torch.testing.assert_close(factor, log_factor.exp())
    torch.testing.assert_close(g.U.sum(-1), torch.ones_like(g.U[..., 0]))
    torch.testing.assert_close(g.V.sum(-2), torch.ones_like(g.V[..., 0, :]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_reach_every_parameter(backend):
    model = tiny(backend).train()
    model.log_likelihood(batch_of([[1, 2, 3], [2, 2]])).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


@pytest.mark.parametrize("backend", BACKENDS)
def test_parse_and_sample(backend):
    model = tiny(backend)
    trees, n = model.parse(batch_of([[1, 2, 3, 1], [3, 3]]))
    assert trees.shape == (2, 7, 2) and n.tolist() == [4, 2]
    assert trees[1, :3].tolist() == [[0, 2], [0, 1], [1, 2]] and (trees[1, 3:] == -1).all()
    assert (trees[0] >= 0).all() and trees[0, 0].tolist() == [0, 4]
    words, sampled = model.sample([2, 4], n=3, generator=torch.Generator().manual_seed(0))
    assert words.shape == (3, 2, 4) and sampled.shape == (3, 2, 7, 3)
    assert (words[:, 0, 2:] == -1).all() and (words[:, 1] >= 0).all() and (words < 4).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_parse_and_sample_use_the_whole_model_in_training_mode_too(backend):
    """parse and sample in training mode give what they give in eval mode (no dropout in the grammar's
    MLPs) and leave the model in training mode."""
    model = tiny(backend, dropout=0.5).train()
    batch = batch_of([[1, 2, 3, 1], [3, 3]])
    trees = model.parse(batch, torch.Generator().manual_seed(0))[0]
    words, sampled = model.sample([2, 4], n=50, generator=torch.Generator().manual_seed(0))
    assert model.training
    model.eval()
    assert torch.equal(trees, model.parse(batch, torch.Generator().manual_seed(0))[0])
    again = model.sample([2, 4], n=50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(words, again[0]) and torch.equal(sampled, again[1])


def test_config_round_trip():
    model = tiny("low-rank")
    rebuilt = PCFG.from_config(model.spec())
    assert rebuilt.config == model.config and rebuilt.backend == "low-rank"
    rebuilt.load_state_dict(model.float().state_dict())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"backend": "low-rank"}, "needs rank"),
        ({"backend": "rank-space", "rank": 0}, "rank must be an int >= 1"),
        ({"backend": "exact", "rank": 4}, "rank is used only"),
        ({"backend": "randomized"}, "needs k1"),
        ({"backend": "randomized", "k1": 2, "k2": 2}, "k1 \\+ k2 must be in 1..num_nonterminals"),
        ({"backend": "randomized", "k1": 1, "k2": 1, "proposal": "global"}, "unknown proposal"),
        ({"backend": "randomized", "k1": 2, "k2": 0}, "the 'local' proposal ranks none above another"),
        ({"backend": "exact", "k1": 1, "k2": 1}, "k1 and k2 are used only"),
        ({"backend": "cubic"}, "unknown backend"),
        ({"num_nonterminals": 0}, "num_nonterminals must be an int >= 1"),
        ({"dropout": 1.0}, "dropout must be a float"),
        ({"emission_init_scale": 0.0}, "emission_init_scale must be a positive float"),
        ({"emission_init_scale": math.inf}, "emission_init_scale must be a positive float"),
    ],
)
def test_constructor_errors(kwargs, message):
    args = {"vocab_size": 5, "num_nonterminals": 3, "num_preterminals": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        PCFG(**args)


def test_batch_errors():
    model = tiny("exact")
    with pytest.raises(ValueError, match="at least 2 words before <eos>"):
        model.log_likelihood(batch_of([[1, 2], [3]]))
    with pytest.raises(ValueError, match=r"token ids must lie in 0..3 \(0..vocab_size-1\) within"):
        model.log_likelihood(batch_of([[1, 9]]))
    with pytest.raises(KeyError, match="needs batch\\['tokens'\\]"):
        model.log_likelihood({"lengths": torch.tensor([3])})


def test_a_sentence_without_its_eos_is_an_error_when_the_vocabulary_says_which():
    """With a vocabulary the model knows its <eos>: a sentence encoded without it lost its last word
    unseen (the grammar generates the words before the last token)."""
    from zoo.data import Vocabulary

    model = tiny("exact")
    model.vocab = Vocabulary(["<eos>", "<unk>", "a", "b"])
    sentences = [model.vocab.encode("a b", add_eos=True), model.vocab.encode("a b a")]
    as_given = {"tokens": torch.tensor(sentences), "lengths": torch.tensor([3, 3])}
    with pytest.raises(ValueError, match=r"sentences \[1\] end with ids \[2\].*add_eos=True"):
        model.log_likelihood(as_given)
    assert torch.isfinite(model.log_likelihood(batch_of([[2, 3], [2, 3, 2]]))).all()
    model.vocab = None  # without one, the convention is the caller's
    assert torch.isfinite(model.log_likelihood(as_given)).all()


def test_bundled_grammars_emit_almost_no_eos():
    """The emission spans every id, ``<eos>`` (id 0) included, which no training sentence holds as a word:
    every bundled PCFG puts less than 1e-4 of a preterminal's mass on it (docs/pcfg.md)."""
    import zoo

    names = zoo.list_models("pcfg_*", pretrained=True)
    assert len(names) >= 5
    for name in names:
        model = zoo.from_pretrained(name)
        assert model.vocab.encode("the", add_eos=True)[-1] == 0
        with torch.no_grad():
            assert float(model.emission().exp()[:, 0].max()) < 1e-4, name
