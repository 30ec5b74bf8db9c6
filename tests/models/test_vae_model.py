"""The structured VAE against brute force on tiny sizes: the decoder's joint normalizes, q's entropy and
log-probabilities match enumeration, the importance-sampled likelihood is consistent, gradients reach the
GPT-2 encoder through the relaxed samples, randomized q agrees with exact, bad input is a clear error."""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch

from zoo.inference import DenseChain, LinearChain
from zoo.models import StructuredVAE
from zoo.models.vae import importance_sampled_log_likelihood
from zoo.models.vae.decoder import nucleus

V, N = 5, 3
BACKENDS = {"exact": {}, "randomized": {"k1": 1, "k2": 1}, "low-rank": {"rank": 2}}


def tiny(backend="exact", num_states=N, **kw) -> StructuredVAE:
    torch.manual_seed(0)
    args = dict(
        num_states=num_states, backend=backend, vocab_size=V, encoder_layers=1, encoder_dim=32,
        encoder_heads=2, max_positions=16, state_dim=8, decoder_dim=8, decoder_hidden=8, dropout=0.0,
        eval_samples=20,
    )  # fmt: skip
    args.update(BACKENDS[backend] if backend in BACKENDS and num_states == N else {})
    args.update(kw)
    return StructuredVAE(**args).double()


def batch(seed=0, lengths=(3, 1, 2)):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    tokens = torch.randint(V, (len(lengths), int(lengths.max())), generator=g)
    return {"tokens": tokens, "lengths": lengths}


def all_sequences(length, size):
    return torch.tensor(list(itertools.product(range(size), repeat=length)))


def with_shortlist(model: StructuredVAE, shortlist: int | None) -> StructuredVAE:
    """``model`` itself (shortlist None), or the same tiny VAE with a fitted 2-word shortlist: ids 1 and
    <|endoftext|> (V - 1) listed, 0, 2 and 3 pooled."""
    if shortlist is None:
        return model
    torch.manual_seed(0)
    model = StructuredVAE(**{**model.config, "decoder_vocab": shortlist}).double().train(model.training)
    assert model.decoder.fit_shortlist(torch.tensor([0, 5, 1, 1, 0])).tolist() == [1, V - 1]
    return model


@pytest.mark.parametrize("shortlist", [None, 2])
def test_decoder_joint_normalizes_over_states_and_words(shortlist):
    """p(z, y) sums to one over every state and word sequence; with a shortlist the pooled ids share
    their class's mass, so the distribution is still one over all V ids."""
    decoder = with_shortlist(tiny(), shortlist).decoder
    T = 2
    z, y = all_sequences(T, N), all_sequences(T, V)
    zz, yy = z.repeat_interleave(len(y), 0), y.repeat(len(z), 1)
    log_p = decoder.log_joint(yy, torch.full((len(zz),), T), zz)
    assert torch.logsumexp(log_p, 0).item() == pytest.approx(0.0, abs=1e-10)


@pytest.mark.parametrize("shortlist", [None, 2])
def test_decoder_joint_ignores_any_padding(shortlist):
    """Token and state ids past each length are ignored, whatever they hold: ids beyond the vocabulary
    and the state count, and -1, score as zeros do (they raised an IndexError)."""
    decoder = with_shortlist(tiny(), shortlist).decoder.eval()
    b = batch()
    z = torch.randint(N, b["tokens"].shape, generator=torch.Generator().manual_seed(1))
    past = torch.arange(b["tokens"].shape[1]) >= b["lengths"].unsqueeze(-1)
    clean = decoder.log_joint(b["tokens"].masked_fill(past, 0), b["lengths"], z.masked_fill(past, 0))
    for pad_token, pad_state in [(V + 7, N + 3), (-1, -1), (10**9, 10**9)]:
        padded = decoder.log_joint(b["tokens"].masked_fill(past, pad_token), b["lengths"],
                                   z.masked_fill(past, pad_state))  # fmt: skip
        torch.testing.assert_close(padded, clean, rtol=0, atol=0)


def test_relaxed_one_hot_scores_as_the_hard_states():
    decoder = tiny().decoder
    b = batch()
    z = torch.randint(N, b["tokens"].shape, generator=torch.Generator().manual_seed(1))
    one_hot = torch.nn.functional.one_hot(z, N).double()
    torch.testing.assert_close(decoder.log_joint(b["tokens"], b["lengths"], one_hot),
                               decoder.log_joint(b["tokens"], b["lengths"], z))  # fmt: skip


@pytest.mark.parametrize("backend", ["exact", "low-rank"])
def test_q_entropy_and_log_prob_match_enumeration(backend):
    model, b = tiny(backend), batch()
    q = model.posterior(b, exact=True)
    for i, length in enumerate(b["lengths"].tolist()):
        z = all_sequences(length, N)
        padded = torch.cat([z, z.new_zeros(len(z), b["tokens"].shape[1] - length)], 1)
        states = padded.unsqueeze(1).expand(len(z), len(b["lengths"]), -1)
        log_q = q.log_prob(states)[:, i]
        assert torch.logsumexp(log_q, 0).item() == pytest.approx(0.0, abs=1e-9)
        entropy = -(log_q.exp() * log_q).sum()
        assert q.entropy[i].item() == pytest.approx(entropy.item(), rel=1e-8)


def brute_force_log_likelihood(model, b):
    """log p(y) = logsumexp over every state sequence of the decoder's joint: (B,)."""
    out = []
    for i, length in enumerate(b["lengths"].tolist()):
        z = all_sequences(length, N)
        tokens = b["tokens"][i, :length].expand(len(z), -1)
        out.append(torch.logsumexp(model.decoder.log_joint(tokens, torch.full((len(z),), length), z), 0))
    return torch.stack(out)


def test_importance_sampling_equals_log_p_when_q_is_the_posterior():
    """A joint whose posterior is a chain: with q that chain every weight is p(y): the estimate is exact."""
    g = torch.Generator().manual_seed(0)
    chain = DenseChain(torch.randn(2, 4, N, generator=g, dtype=torch.float64),
                       torch.randn(N, N, generator=g, dtype=torch.float64))  # fmt: skip
    q = LinearChain(chain, torch.tensor([4, 2]))
    log_p_y = torch.tensor([-3.0, -1.5], dtype=torch.float64)  # log p(y) of the two sequences

    def log_joint(states):  # p(z, y) = p(y) q(z | y)
        return q.log_prob(states) + log_p_y

    for seed in range(3):
        estimate = importance_sampled_log_likelihood(q, log_joint, 7, torch.Generator().manual_seed(seed))
        torch.testing.assert_close(estimate, log_p_y)


@pytest.mark.parametrize("backend", ["exact", "low-rank"])
def test_importance_sampled_likelihood_is_unbiased_in_probability(backend):
    """E[exp(estimate)] = p(y): the mean over draws within 4 standard errors; tight with many samples."""
    model, b = tiny(backend, eval_samples=4).eval(), batch()
    with torch.no_grad():
        exact = brute_force_log_likelihood(model, b)
        ratios = torch.stack([
            (model.log_likelihood(b, torch.Generator().manual_seed(s)) - exact).exp() for s in range(300)
        ])  # fmt: skip
        mean, sem = ratios.mean(0), ratios.std(0) / math.sqrt(len(ratios))
        assert ((mean - 1).abs() < 4 * sem + 1e-9).all(), (mean, sem)
        model.eval_samples = 3000  # the ratio's spread shrinks as 1 / sqrt(samples): 5 of its std here
        ratio = (model.log_likelihood(b, torch.Generator().manual_seed(0)) - exact).exp()
        spread = ratios.std(0) * math.sqrt(4 / model.eval_samples)
        assert ((ratio - 1).abs() < 5 * spread + 1e-9).all(), (ratio, spread)


@pytest.mark.parametrize("backend", ["exact", "randomized", "low-rank"])
def test_elbo_gradients_reach_the_encoder_through_the_relaxed_sample(backend):
    model, b = tiny(backend), batch()
    parts = model.elbo(b, torch.Generator().manual_seed(0))
    torch.testing.assert_close(parts["elbo"], parts["reconstruction"] + parts["entropy"])
    parts["reconstruction"].sum().backward()  # the sample term alone: Eq. 33
    encoder_grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert encoder_grads and sum(g.abs().sum() for g in encoder_grads) > 0
    assert model.inference.states.grad.abs().sum() > 0
    assert all(torch.isfinite(g).all() for g in encoder_grads)


def test_elbo_is_below_log_likelihood_for_a_hard_sample_limit():
    """At a low temperature the relaxed sample is (nearly) one-hot: E_q[ELBO] <= log p(y) (Jensen)."""
    model, b = tiny("exact", temperature=0.01), batch()
    with torch.no_grad():
        exact = brute_force_log_likelihood(model, b)
        elbo = torch.stack(
            [model.elbo(b, torch.Generator().manual_seed(s))["elbo"] for s in range(200)]
        ).mean(0)
    assert (elbo <= exact + 1e-6).all()


def brute_force_elbo(model, b):
    """E_q[log p(z, y) - log q(z | y)] over every state sequence, q computed exactly: (B,)."""
    q = model.posterior(b, exact=True)
    out = []
    for i, length in enumerate(b["lengths"].tolist()):
        z = all_sequences(length, N)
        padded = torch.cat([z, z.new_zeros(len(z), b["tokens"].shape[1] - length)], 1)
        log_q = q.log_prob(padded.unsqueeze(1).expand(len(z), len(b["lengths"]), -1))[:, i]
        tokens = b["tokens"][i, :length].expand(len(z), -1)
        log_joint = model.decoder.log_joint(tokens, torch.full((len(z),), length), z)
        out.append((log_q.exp() * (log_joint - log_q)).sum())
    return torch.stack(out)


@pytest.mark.parametrize("backend", ["exact", "randomized"])
def test_importance_elbo_is_unbiased_and_never_above_the_likelihood_estimate(backend):
    """The evaluation's ELBO (hard samples of the exact q) averages to the enumerated ELBO, and for every
    draw it is at most the importance-sampled log p(y) of the same samples (Jensen)."""
    model, b = tiny(backend, eval_samples=5).eval(), batch()
    with torch.no_grad():
        exact = brute_force_elbo(model, b)
        draws = [model.importance_estimates(b, torch.Generator().manual_seed(s)) for s in range(300)]
    for estimate in draws:
        assert (estimate.elbo <= estimate.log_likelihood + 1e-12).all()
    elbos = torch.stack([d.elbo for d in draws])
    mean, sem = elbos.mean(0), elbos.std(0) / math.sqrt(len(elbos))
    assert ((mean - exact).abs() < 4 * sem + 1e-9).all(), (mean, exact, sem)
    assert (exact <= brute_force_log_likelihood(model, b) + 1e-9).all()


@pytest.mark.parametrize("backend", ["exact", "randomized", "low-rank"])
def test_straight_through_reconstructs_the_hard_sample_and_trains_the_encoder(backend):
    """With straight_through the reconstruction is log p(z, y) of the sample's hard states (the argmax
    of the relaxed rows, an exact sample of q for exact and low-rank), and gradients still reach q."""
    model, b = tiny(backend, straight_through=True), batch()
    parts = model.elbo(b, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)  # the same draws as elbo's: kept states, then the sample
    relaxed = model.posterior(b, generator=g).rsample(model.temperature, g)
    valid = torch.arange(b["tokens"].shape[1]) < b["lengths"].unsqueeze(-1)
    hard = torch.where(valid, relaxed.argmax(-1), -1)
    with torch.no_grad():
        torch.testing.assert_close(
            parts["reconstruction"], model.decoder.log_joint(b["tokens"], b["lengths"], hard)
        )
    parts["reconstruction"].sum().backward()
    assert model.inference.states.grad.abs().sum() > 0
    assert sum(p.grad.abs().sum() for p in model.encoder.parameters() if p.grad is not None) > 0


def test_randomized_with_every_state_kept_is_exact():
    exact, full = tiny("exact", num_states=4), tiny("randomized", num_states=4, k1=4, k2=0)
    b = batch()
    torch.testing.assert_close(full.posterior(b).entropy, exact.posterior(b).entropy)
    torch.testing.assert_close(full.posterior(b).log_partition, exact.posterior(b).log_partition)


def test_randomized_q_is_consistent_with_exact():
    """Over draws of kept states: mean Z_hat = Z (unbiased, 4 standard errors), and the randomized
    entropy's mean is close to the exact one (it is biased only through a log, Alg. 3)."""
    model, b = tiny("randomized", num_states=6, k1=2, k2=2), batch(lengths=(4, 3))
    with torch.no_grad():
        r = model.encode(b["tokens"], b["lengths"])
        exact = model.inference.posterior(r, b["lengths"], exact=True)
        draws = [model.inference.posterior(r, b["lengths"], generator=torch.Generator().manual_seed(s))
                 for s in range(400)]  # fmt: skip
        ratio = torch.stack([(d.log_partition - exact.log_partition).exp() for d in draws])
        entropy = torch.stack([d.entropy for d in draws])
    mean, sem = ratio.mean(0), ratio.std(0) / math.sqrt(len(draws))
    assert ((mean - 1).abs() < 4 * sem).all(), (mean, sem)
    torch.testing.assert_close(entropy.mean(0), exact.entropy, rtol=0.15, atol=0)


def test_aggregated_state_usage_counts_every_token():
    from zoo.models.vae import aggregated_state_usage

    model, b = tiny(), batch()
    counts = aggregated_state_usage(model, [b, b], seed=0)
    assert counts.shape == (N,) and counts.sum() == 2 * b["lengths"].sum()


def test_posterior_collapse_diagnostics_by_hand():
    from zoo.models.vae import posterior_collapse

    model, b = tiny(), batch()
    out = posterior_collapse(model, [b])
    q = model.eval().posterior(b, exact=True)
    within = torch.arange(3) < b["lengths"].unsqueeze(-1)
    tokens = q.marginals[within].double()
    mean = tokens.mean(0)
    expected = (tokens * (tokens / mean).log()).sum(-1).mean()
    assert out["token_state_information"] == pytest.approx(float(expected), rel=1e-9)
    runs = [len(set(row[:n].tolist())) for row, n in zip(q.argmax, b["lengths"].tolist())]
    assert out["distinct_map_states"] == pytest.approx(sum(runs) / len(runs))
    assert out["states_used"] == int((mean >= 0.1 / N).sum())
    with torch.no_grad():  # potentials e_i . r_t and e_i . e_j all zero: q is uniform whatever y is
        model.inference.states.zero_()
    collapsed = posterior_collapse(model, [b])
    assert collapsed["token_state_information"] == pytest.approx(0.0, abs=1e-12)
    assert collapsed["states_used"] == N
    with pytest.raises(ValueError, match="at least one batch"):
        posterior_collapse(model, [])


def test_log_joint_parts_and_word_dropout():
    model, b = tiny(word_dropout=0.5), batch()
    decoder = model.decoder
    z = torch.randint(N, b["tokens"].shape, generator=torch.Generator().manual_seed(1))
    decoder.eval()
    states, words = decoder.log_joint_parts(b["tokens"], b["lengths"], z)
    torch.testing.assert_close(states + words, decoder.log_joint(b["tokens"], b["lengths"], z))
    plain = tiny()
    plain.decoder.load_state_dict({k: v for k, v in decoder.state_dict().items() if k != "blank"})
    torch.testing.assert_close(plain.decoder.eval().log_joint(b["tokens"], b["lengths"], z),
                               decoder.log_joint(b["tokens"], b["lengths"], z))  # fmt: skip
    decoder.train()
    torch.manual_seed(0)
    dropped = torch.stack([decoder.log_joint(b["tokens"], b["lengths"], z) for _ in range(20)])
    assert not torch.allclose(dropped, dropped[0].expand_as(dropped))  # blanks drawn per call
    parts = model.train().elbo(b, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(parts["reconstruction"], parts["states"] + parts["words"])
    torch.testing.assert_close(parts["elbo"], parts["reconstruction"] + parts["entropy"])


def test_rank_space_explains_and_points_to_low_rank():
    with pytest.raises(ValueError, match="contextual.*backend='low-rank'"):
        tiny("rank-space")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"backend": "sparse"}, "unknown backend 'sparse'"),
        ({"backend": "randomized", "k1": 3, "k2": 2}, r"k1 \+ k2 must be in 1..num_states = 1..3"),
        ({"backend": "randomized"}, "needs k1"),
        ({"backend": "exact", "k1": 1, "k2": 1}, "only by backend='randomized'"),
        ({"backend": "low-rank"}, "needs rank"),
        ({"backend": "low-rank", "rank": N + 1}, f"rank must be at most num_states={N}"),
        ({"backend": "exact", "rank": 2}, "rank is used only by backend='low-rank'"),
        ({"backend": "randomized", "k1": 1, "k2": 1, "proposal": "oracle"}, "unknown proposal"),
        ({"temperature": 0.0}, "temperature must be a positive"),
        ({"encoder_dim": 30, "encoder_heads": 4}, "multiple of encoder_heads"),
        ({"pretrained_encoder": "gpt2"}, "vocab_size must be 50257"),
    ],
)
def test_bad_arguments_are_clear_errors(kw, message):
    backend = kw.pop("backend", "exact")
    with pytest.raises(ValueError, match=message):
        sizes = {"encoder_dim": kw.pop("encoder_dim", 32), "encoder_heads": kw.pop("encoder_heads", 2)}
        StructuredVAE(num_states=N, backend=backend, vocab_size=V, encoder_layers=1, **sizes, **kw)


def test_bad_batches_are_clear_errors():
    model = tiny()
    b = batch()
    with pytest.raises(ValueError, match=r"token ids must lie in 0..4"):
        model.elbo({**b, "tokens": b["tokens"] + V})
    with pytest.raises(ValueError, match=re.escape("lengths must lie in 1..T = 1..3, got [3, 0, 2]")):
        model.log_likelihood({**b, "lengths": torch.tensor([3, 0, 2])})
    with pytest.raises(KeyError, match="needs batch\\['tokens'\\]"):
        model.elbo({"lengths": b["lengths"]})
    long = {"tokens": torch.zeros(1, 17, dtype=torch.long), "lengths": torch.tensor([17])}
    with pytest.raises(ValueError, match="exceed the encoder's 16 positions"):
        model.elbo(long)
    # values past a length are padding, never checked
    padded = {**b, "tokens": torch.where(torch.arange(3) < b["lengths"].unsqueeze(-1), b["tokens"], 10**6)}
    assert torch.isfinite(model.elbo(padded)["elbo"]).all()


def test_pretrained_encoder_from_a_local_folder(tmp_path):
    """``pretrained_encoder`` goes through ``GPT2Model.from_pretrained`` (here a folder: no Hub needed)."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    saved = GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=32))
    saved.save_pretrained(tmp_path)
    sizes = dict(encoder_layers=1, encoder_dim=16, encoder_heads=2, max_positions=32)
    model = StructuredVAE(num_states=N, pretrained_encoder=str(tmp_path), state_dim=8, decoder_dim=8,
                          decoder_hidden=8, **sizes)  # fmt: skip
    torch.testing.assert_close(model.encoder.wte.weight, saved.wte.weight)
    assert model.project.in_features == 16 and model.encoder.config.n_positions == 32
    # the arguments must describe the pretrained encoder (a saved model is rebuilt from them)
    with pytest.raises(
        ValueError, match=r"set encoder_layers=1, encoder_dim=16, encoder_heads=2, max_positions=32"
    ):
        StructuredVAE(num_states=N, pretrained_encoder=str(tmp_path), **{**sizes, "encoder_dim": 32})
    with pytest.raises(OSError, match="use pretrained_encoder=None"):
        StructuredVAE(num_states=N, pretrained_encoder=str(tmp_path / "missing"))


def test_config_rebuilds_the_model():
    model = tiny("randomized")
    again = StructuredVAE.from_config(model.spec()).double()
    again.load_state_dict(model.state_dict())
    b = batch()
    model.eval(), again.eval()
    with torch.no_grad():
        g = [torch.Generator().manual_seed(0) for _ in range(2)]
        torch.testing.assert_close(model.log_likelihood(b, g[0]), again.log_likelihood(b, g[1]))


def test_posterior_samples_use_the_whole_model_in_training_mode_too():
    """sample_states in training mode draws from the eval-mode q(z | y) (no dropout in the encoder) and
    leaves the model in training mode."""
    model = tiny(dropout=0.5).train()
    b = batch(lengths=(6, 3, 5))
    got = model.sample_states(b, torch.Generator().manual_seed(0))
    assert model.training
    assert torch.equal(got, model.eval().sample_states(b, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("shortlist", [None, 2])
def test_samples_follow_the_generative_model(shortlist):
    """Ancestral samples of p(z, y): the frequency of every complete (ending with <|endoftext|>,
    id V - 1) sentence of 1 or 2 tokens with its states is exp(log_joint), in a fixed-seed draw (with
    a shortlist: pooled ids drawn uniformly within their class)."""
    model = with_shortlist(tiny(dropout=0.3).train(), shortlist)  # sampling switches dropout off, and
    assert model.training  # restores the mode
    with torch.no_grad():
        for weight in model.decoder.parameters():  # peaked, state-dependent distributions
            weight.mul_(4)
    drawn = model.sample(20000, max_length=2, generator=torch.Generator().manual_seed(0))
    assert model.training
    tokens, states, lengths = drawn["tokens"], drawn["states"], drawn["lengths"]
    assert tokens.shape == states.shape == (20000, 2) and set(lengths.tolist()) == {1, 2}
    past = torch.arange(2) >= lengths.unsqueeze(-1)
    assert (states[past] == -1).all() and (tokens[past] == 0).all() and (states[~past] >= 0).all()
    ended = tokens.gather(1, (lengths - 1).unsqueeze(-1)).squeeze(-1) == V - 1
    assert (ended | (lengths == 2)).all() and not (tokens[:, 0][lengths == 2] == V - 1).any()
    counts: dict[tuple, int] = {}
    for row in zip(tokens[ended].tolist(), states[ended].tolist(), lengths[ended].tolist()):
        key = (tuple(row[0][: row[2]]), tuple(row[1][: row[2]]))
        counts[key] = counts.get(key, 0) + 1
    model.eval()
    keys = [((V - 1,), (z,)) for z in range(N)]
    keys += [((y, V - 1), (z1, z2)) for y in range(V - 1) for z1 in range(N) for z2 in range(N)]
    for words, zs in keys:
        T = len(words)
        with torch.no_grad():
            log_p = model.decoder.log_joint(torch.tensor([words]), torch.tensor([T]), torch.tensor([zs]))
        p = math.exp(float(log_p))
        assert counts.get((words, zs), 0) / 20000 == pytest.approx(p, abs=4 * math.sqrt(p / 20000) + 1e-3)
    with pytest.raises(ValueError, match="max_length must be an int >= 1, got 0"):
        model.sample(2, max_length=0)
    with pytest.raises(ValueError, match="max_length must be at most the encoder's 16 positions"):
        model.sample(2, max_length=17)  # a sample log_likelihood could not score (audit)


def test_nucleus_keeps_the_top_mass_and_tempers():
    logits = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.97, 0.01, 0.01, 0.01]]))
    torch.testing.assert_close(nucleus(logits), torch.softmax(logits, -1))
    kept = nucleus(logits, top_p=0.7)  # 0.5 + 0.25 reach 0.7; the top class alone does in row 2
    torch.testing.assert_close(kept, torch.tensor([[0.0, 0.5, 0.0, 0.25], [0.97, 0.0, 0.0, 0.0]]))
    greedy = torch.tensor([[0.0, 0.5, 0.0, 0.0], [0.97, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(nucleus(logits, top_p=1e-9), greedy)
    cold = nucleus(logits, temperature=0.5)  # p^2, renormalized
    torch.testing.assert_close(cold, torch.softmax(2 * logits, -1))
    frozen = nucleus(logits, temperature=1e-40)  # the argmax (logits / 1e-40 overflowed to NaN)
    torch.testing.assert_close(frozen, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def test_tempered_nucleus_samples_follow_their_distribution():
    """With temperature and top_p, the frequency of every complete sentence of 1 or 2 tokens with its
    states is prod_t p(z_t | ...) nucleus(log p(y_t | ...), temperature, top_p)[y_t], in a fixed-seed draw."""
    model = tiny().eval()
    with torch.no_grad():
        for weight in model.decoder.parameters():
            weight.mul_(4)
    temperature, top_p, draws = 0.7, 0.6, 20000
    drawn = model.sample(draws, max_length=2, generator=torch.Generator().manual_seed(0),
                         temperature=temperature, top_p=top_p)  # fmt: skip
    tokens, states, lengths = drawn["tokens"], drawn["states"], drawn["lengths"]
    counts: dict[tuple, int] = {}
    for row in zip(tokens.tolist(), states.tolist(), lengths.tolist()):
        if row[0][row[2] - 1] == V - 1:
            key = (tuple(row[0][: row[2]]), tuple(row[1][: row[2]]))
            counts[key] = counts.get(key, 0) + 1

    def parts(words, zs):  # log p(z_<=T | ...) and log p(y_<=T | ...) of a prefix
        if not words:
            return 0.0, 0.0
        with torch.no_grad():
            z, y = model.decoder.log_joint_parts(
                torch.tensor([words]), torch.tensor([len(words)]), torch.tensor([zs])
            )
        return float(z), float(y)

    def probability(words, zs):
        p = 1.0
        for t in range(len(words)):
            (z0, y0), (z1, _) = parts(words[:t], zs[:t]), parts(words[: t + 1], zs[: t + 1])
            step = torch.tensor([parts(words[:t] + (v,), zs[: t + 1])[1] - y0 for v in range(V)])
            kept = nucleus(step, temperature, top_p)
            p *= math.exp(z1 - z0) * float(kept[words[t]] / kept.sum())
        return p

    keys = [((V - 1,), (z,)) for z in range(N)]
    keys += [((y, V - 1), (z1, z2)) for y in range(V - 1) for z1 in range(N) for z2 in range(N)]
    cut = 0
    for words, zs in keys:
        p = probability(words, zs)
        cut += p == 0
        assert counts.get((words, zs), 0) / draws == pytest.approx(p, abs=4 * math.sqrt(p / draws) + 1e-3)
    assert cut > 0  # the nucleus did drop words
    for bad in (0.0, 1.5, True, float("nan")):
        with pytest.raises(ValueError, match=r"top_p must be a float in \(0, 1\]"):
            model.sample(2, top_p=bad)
    with pytest.raises(ValueError, match="temperature must be a positive float, got 0"):
        model.sample(2, temperature=0)


def test_shortlist_is_fitted_from_counts_and_required():
    model = tiny(decoder_vocab=3)
    b = batch()
    with pytest.raises(RuntimeError, match="shortlist of 3 words has not been fitted"):
        model.decoder.log_joint(b["tokens"], b["lengths"], torch.zeros_like(b["tokens"]))
    with pytest.raises(RuntimeError, match="has not been fitted"):
        model.sample(2)
    ids = model.decoder.fit_shortlist(torch.tensor([7, 2, 2, 1, 0]))  # eos (4) always; a tie: the smaller id
    assert ids.tolist() == [0, 1, V - 1] and model.decoder.word_index.tolist() == [0, 1, 3, 3, 2]
    again = StructuredVAE.from_config(model.spec()).double()
    again.load_state_dict(model.state_dict())  # the fitted list is part of the weights
    assert torch.equal(again.decoder.word_index, model.decoder.word_index)
    assert tuple(model.decoder.word_emb.weight.shape) == (4, 8)  # K + 1 classes, not V words
    with pytest.raises(ValueError, match="counts must be 5 non-negative numbers"):
        model.decoder.fit_shortlist(torch.ones(4))
    with pytest.raises(ValueError, match="there is no shortlist to fit"):
        tiny().decoder.fit_shortlist(torch.ones(V))
    with pytest.raises(ValueError, match=r"shortlist must be in 1..4"):
        tiny(decoder_vocab=V)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_bfloat16_model_trains(backend):
    """A model loaded or cast to bfloat16 (``from_pretrained(dtype=...)``): its ELBO ran the engine's
    float32 relaxed rows into the bfloat16 state embeddings, "expected m1 and m2 to have the same dtype"
    (audit). The ELBO is now the float32 model's to bfloat16's accuracy, with finite gradients."""
    model = tiny(backend).float().train()
    half = tiny(backend).to(torch.bfloat16).train()
    torch.manual_seed(1)
    want = model.elbo(batch())["elbo"]
    torch.manual_seed(1)
    got = half.elbo(batch())["elbo"]
    got.sum().backward()
    torch.testing.assert_close(got.float(), want.detach(), rtol=0.02, atol=0.05)
    assert all(torch.isfinite(p.grad).all() for p in half.parameters() if p.grad is not None)
