"""zoo.models HMM family: exact log-likelihoods against brute-force enumeration, normalization,
state / feature dropout, gradients, no N x N for the low-rank and rank-space backends."""

from __future__ import annotations

import inspect
import itertools
import math
import re

import pytest
import torch
from op_outputs import OutputSizes

from zoo.inference import LowRankChain, RankSpaceChain
from zoo.models import BernoulliHMM, CategoricalHMM

N, V, K, R = 3, 4, 3, 2
BACKENDS = {
    "exact": {},
    "low-rank": {"rank": R},
    "rank-space": {"rank": R},
    "randomized": {"k1": 2, "k2": 1},
}
SMALL = {"embedding_dim": 8, "hidden_dim": 8}


def make(kind: str, backend: str, num_states: int = N, dropout: float = 0.0, **extra):
    torch.manual_seed(0)
    kw = {**SMALL, **BACKENDS[backend], "dropout": dropout, **extra}
    if kind == "categorical":
        model = CategoricalHMM(V, num_states, backend=backend, **kw)
    else:
        model = BernoulliHMM(num_states, num_keys=K, backend=backend, **kw)
    return model.double()


def random_batch(kind: str, lengths: list[int], seed: int = 1, num_keys: int = K) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    lengths_t = torch.tensor(lengths)
    live = torch.arange(T) < lengths_t[:, None]
    if kind == "categorical":
        tokens = torch.randint(V, (B, T), generator=g) * live
        return {"tokens": tokens, "lengths": lengths_t}
    frames = (torch.rand(B, T, num_keys, generator=g) < 0.4).double() * live[..., None]
    return {"frames": frames, "lengths": lengths_t}


def all_sequences(kind: str, length: int, num_keys: int = K) -> dict:
    """Every observation sequence of one length as a batch."""
    if kind == "categorical":
        tokens = torch.tensor(list(itertools.product(range(V), repeat=length)))
        return {"tokens": tokens, "lengths": torch.full((len(tokens),), length)}
    frames = torch.tensor(list(itertools.product((0.0, 1.0), repeat=num_keys)), dtype=torch.float64)
    seqs = torch.stack([torch.stack(s) for s in itertools.product(frames, repeat=length)])
    return {"frames": seqs, "lengths": torch.full((len(seqs),), length)}


# --- the independent enumerator -----------------------------------------------------------------
def emission_logp(kind: str, table: torch.Tensor, obs) -> torch.Tensor:
    """log p(obs | component) for every component, from the model's normalized table."""
    if kind == "categorical":
        return table[:, int(obs)]
    p = table
    x = obs.to(p.dtype)
    return (x * p.log() + (1 - x) * (1 - p).log()).sum(-1)


def brute_log_likelihood(kind: str, dist: dict, obs: list) -> float:
    """log p(x) = log sum over every state sequence of the joint p(x, z), term by term."""
    L = len(obs)
    e = [emission_logp(kind, dist["emission"], o) for o in obs]
    total = 0.0
    if "transition" in dist:  # softmax / low-rank HMM over z_1..z_L
        start, trans = dist["start"], dist["transition"]
        for z in itertools.product(range(len(start)), repeat=L):
            logp = math.log(start[z[0]]) + e[0][z[0]]
            for t in range(1, L):
                logp += math.log(trans[z[t - 1], z[t]]) + e[t][z[t]]
            total += math.exp(logp)
        return math.log(total)
    # rank-space: p(z_t, x_t | z_{t-1}) = sum_r U[z_{t-1}, r] V[z_t, r] W[x_t, r], z_0 ~ start
    start, U, Vm = dist["start"], dist["U"], dist["V"]
    merged = [torch.einsum("ir,jr,r->ij", U, Vm, et.exp()) for et in e]  # N x N per position
    for z in itertools.product(range(len(start)), repeat=L + 1):
        p = float(start[z[0]])
        for t in range(L):
            p *= float(merged[t][z[t], z[t + 1]])
        total += p
    return math.log(total)


def brute_batch(kind: str, dist: dict, batch: dict) -> torch.Tensor:
    key = "tokens" if kind == "categorical" else "frames"
    out = []
    for obs, length in zip(batch[key], batch["lengths"].tolist()):
        out.append(brute_log_likelihood(kind, dist, list(obs[:length])))
    return torch.tensor(out, dtype=torch.float64)


def restrict(dist: dict, states: torch.Tensor | None) -> dict:
    """The distributions of the sub-HMM on ``states`` (what state dropout trains)."""
    if states is None:
        return dist
    start = dist["start"][states] / dist["start"][states].sum()
    if "transition" in dist:
        trans = dist["transition"][states][:, states]
        return {
            "start": start,
            "transition": trans / trans.sum(-1, keepdim=True),
            "emission": dist["emission"][states],
        }
    Vm = dist["V"][states]
    return {"start": start, "U": dist["U"][states], "V": Vm / Vm.sum(0), "emission": dist["emission"]}


KINDS = ("categorical", "bernoulli")


# --- exactness ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("kind", KINDS)
def test_log_likelihood_matches_enumeration(kind, backend):
    model = make(kind, backend).eval()
    batch = random_batch(kind, [4, 2, 1, 3])
    with torch.no_grad():
        got = model.log_likelihood(batch)
        want = brute_batch(kind, model.distributions(), batch)
    assert got.shape == (4,)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_randomized_with_all_states_kept_is_exact_in_training(kind):
    model = make(kind, "randomized", k1=N, k2=0).train()
    batch = random_batch(kind, [3, 1, 2])
    got = model.log_likelihood(batch)
    with torch.no_grad():
        want = brute_batch(kind, model.distributions(), batch)
    torch.testing.assert_close(got.detach(), want, rtol=1e-9, atol=1e-9)


def test_randomized_eval_rule():
    batch = random_batch("categorical", [3, 2])
    exact_eval = make("categorical", "randomized").eval()
    assert exact_eval.evaluation_is_exact()
    assert exact_eval.posterior(batch).backend.value == "exact"
    assert exact_eval.train().posterior(batch).backend.value == "randomized"
    estimated = make("categorical", "randomized", exact_max_states=2).eval()
    assert not estimated.evaluation_is_exact()
    assert estimated.posterior(batch).backend.value == "randomized"
    # the estimate is random: the log of an unbiased estimate, reproducible with a generator
    draws = [estimated.log_likelihood(batch, generator=torch.Generator().manual_seed(s)) for s in (0, 0, 1)]
    torch.testing.assert_close(draws[0], draws[1])
    assert all(torch.isfinite(d).all() for d in draws)


# --- normalization ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("kind", KINDS)
def test_sum_over_all_sequences_is_one(kind, backend):
    """sum_x p(x) = 1 over every sequence of a fixed length: transitions and emissions normalized."""
    model = make(kind, backend).eval()
    batch = all_sequences(kind, 2)
    with torch.no_grad():
        total = model.log_likelihood(batch).logsumexp(0)
    assert abs(total.item()) < 1e-10


@pytest.mark.parametrize("backend", ["exact", "low-rank", "rank-space"])
def test_normalized_with_state_and_feature_dropout(backend):
    """In training mode one batch is scored by one sub-model: still a distribution over x."""
    extra = {"state_dropout": 0.5, "dropout": 0.3}
    if backend != "exact":
        extra["feature_dropout"] = 0.5
    model = make("categorical", backend, num_states=4, **extra).train()
    batch = all_sequences("categorical", 2)
    total = model.log_likelihood(batch).logsumexp(0)
    assert abs(total.item()) < 1e-10


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_distributions_are_normalized(backend):
    model = make("bernoulli", backend).eval()
    cat = make("categorical", backend).eval()
    with torch.no_grad():
        d, dc = model.distributions(), cat.distributions()
    one = torch.tensor(1.0, dtype=torch.float64)
    torch.testing.assert_close(d["start"].sum(), one)
    if "transition" in d:
        torch.testing.assert_close(d["transition"].sum(-1), torch.ones(N, dtype=torch.float64))
        assert d["transition"].shape == (N, N)
    else:
        torch.testing.assert_close(d["U"].sum(-1), torch.ones(N, dtype=torch.float64))
        torch.testing.assert_close(d["V"].sum(0), torch.ones(R, dtype=torch.float64))
    assert ((d["emission"] > 0) & (d["emission"] < 1)).all()  # Bernoulli probabilities per key
    rows = N if "transition" in dc else R
    torch.testing.assert_close(dc["emission"].exp().sum(-1), torch.ones(rows, dtype=torch.float64))


# --- state dropout ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["exact", "low-rank", "rank-space", "randomized"])
@pytest.mark.parametrize("kind", KINDS)
def test_state_dropout_scores_the_sub_hmm_on_the_kept_states(kind, backend):
    extra = {"k1": 2, "k2": 0} if backend == "randomized" else {}
    model = make(kind, backend, num_states=4, state_dropout=0.5, **extra).train()
    batch = random_batch(kind, [3, 1, 2])
    torch.manual_seed(5)
    states, features = model._subsets()
    assert states.tolist() == sorted(states.tolist()) and len(states) == 2 and features is None
    torch.manual_seed(5)
    got = model.log_likelihood(batch)
    with torch.no_grad():
        want = brute_batch(kind, restrict(model.distributions(), states), batch)
    torch.testing.assert_close(got.detach(), want, rtol=1e-9, atol=1e-9)
    # eval mode uses every state
    assert model.eval().posterior(batch).factors.num_states == 4


# --- gradients ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_reach_every_parameter(kind, backend):
    model = make(kind, backend, dropout=0.1).train()
    batch = random_batch(kind, [4, 2, 3])
    loss = -model.log_likelihood(batch).sum() / model.num_events(batch).sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


# --- no N x N for low-rank / rank-space -------------------------------------------------------------
@pytest.mark.parametrize("backend", ["low-rank", "rank-space"])
@pytest.mark.parametrize("kind", KINDS)
def test_no_state_by_state_tensor(kind, backend):
    states = 512
    model = make(kind, backend, num_states=states, rank=8).float().train()
    batch = random_batch(kind, [6, 3])
    batch = {k: (v.float() if v.is_floating_point() else v) for k, v in batch.items()}
    chain = model.posterior(batch)
    assert isinstance(chain.factors, LowRankChain if backend == "low-rank" else RankSpaceChain)
    with OutputSizes() as probe:
        model.log_likelihood(batch).sum().backward()
    assert probe.largest < states * states // 16, probe.largest
    with OutputSizes() as probe:  # sampling draws through the features / ranks (two_stage)
        model.sample(4, 5, torch.Generator().manual_seed(0))
    assert probe.largest < states * states // 16, probe.largest


# --- sampling -----------------------------------------------------------------------------------
def brute_joint(kind: str, dist: dict, z: tuple, obs: list) -> float:
    """p(z_1..z_L, x_1..x_L), term by term (rank-space: summed over the virtual z_0 and the ranks)."""
    if kind == "categorical":
        e = [dist["emission"][:, int(o)].exp() for o in obs]
    else:  # p^x (1 - p)^(1 - x), exact where a saturated p is 0 or 1
        e = [torch.where(o.bool(), dist["emission"], 1 - dist["emission"]).prod(-1) for o in obs]
    if "transition" in dist:
        p = float(dist["start"][z[0]] * e[0][z[0]])
        for t in range(1, len(z)):
            p *= float(dist["transition"][z[t - 1], z[t]] * e[t][z[t]])
        return p
    merged = [torch.einsum("ir,jr,r->ij", dist["U"], dist["V"], et) for et in e]
    total = 0.0
    for z0 in range(len(dist["start"])):
        p, previous = float(dist["start"][z0]), z0
        for t, zt in enumerate(z):
            p *= float(merged[t][previous, zt])
            previous = zt
        total += p
    return total


def within_sampling_error(counts: dict, probabilities: dict, draws: int) -> None:
    """Every outcome's frequency within 5 binomial standard deviations (plus 1e-3) of its probability,
    and no outcome drawn that has probability 0."""
    assert set(counts) <= set(probabilities)
    for outcome, p in probabilities.items():
        sd = math.sqrt(p * (1 - p) / draws)
        assert abs(counts.get(outcome, 0) / draws - p) <= 5 * sd + 1e-3, (outcome, counts.get(outcome), p)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_two_stage_transition_is_the_transition(backend):
    """Sampling's two draws (r from i, then j from r) compose to the model's p(j | i): the normalized
    transition, or for rank-space sum_r U[i, r] V[j, r]."""
    model = make("categorical", backend, num_states=5).eval()
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(3)
        first, second = model.transition.two_stage(model.state_emb, model.next_state_emb)
        dist = model.distributions()
        want = dist["transition"] if "transition" in dist else dist["U"] @ dist["V"].T
    torch.testing.assert_close(first.sum(-1), torch.ones(5, dtype=torch.float64))
    got = first if second is None else first @ second
    if second is not None:
        torch.testing.assert_close(second.sum(-1), torch.ones(len(second), dtype=torch.float64))
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("kind", KINDS)
def test_samples_follow_the_joint_distribution(kind, backend):
    """Fixed-length samples (no vocabulary, or frames): each (states, observations) pair of length 2 is
    drawn with its enumerated probability p(z, x), in a fixed-seed draw; in training mode with dropout
    too (sampling uses the whole model), leaving the mode as it was."""
    model = make(kind, backend, dropout=0.3)
    with torch.no_grad():
        for weight in model.parameters():  # peaked, distinct distributions
            weight.mul_(3)
    draws = 20000
    drawn = model.train().sample(draws, 2, torch.Generator().manual_seed(0))
    assert model.training
    key = "tokens" if kind == "categorical" else "frames"
    assert drawn["lengths"].tolist() == [2] * draws and drawn["states"].shape == (draws, 2)
    observations = [tuple(x.flatten().tolist()) for x in drawn[key]]
    counts: dict = {}
    for z, x in zip(map(tuple, drawn["states"].tolist()), observations):
        counts[z, x] = counts.get((z, x), 0) + 1
    model.eval()
    with torch.no_grad():
        dist = model.distributions()
        every = all_sequences(kind, 2)[key]
        probabilities = {
            (z, tuple(x.flatten().tolist())): brute_joint(kind, dist, z, list(x))
            for z in itertools.product(range(N), repeat=2)
            for x in every
        }
    assert math.isclose(sum(probabilities.values()), 1.0, rel_tol=1e-9)
    within_sampling_error(counts, probabilities, draws)
    paths = list(itertools.product(range(N), repeat=2))
    marginal = [sum(probabilities[z, x] for z in paths) for x in observations[:3]]
    scored = model.log_likelihood({key: drawn[key][:3], "lengths": drawn["lengths"][:3]})  # a batch as drawn
    torch.testing.assert_close(scored, torch.tensor(marginal, dtype=torch.float64).log())


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_text_samples_end_at_eos(backend):
    """With a vocabulary, a sample ends at its first <eos> (id 0): every sentence of 1 to 3 tokens that
    ends there is drawn with probability p(x) = exp(log_likelihood); the rest are cut at max_length;
    0 and -1 fill the tokens and states past each length."""
    from zoo.data.vocab import Vocabulary

    model = make("categorical", backend).eval()
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(2)
    model.vocab = Vocabulary(["<eos>", "a", "b", "c"], unk=None)
    draws = 20000
    drawn = model.sample(draws, 3, torch.Generator().manual_seed(1))
    tokens, states, lengths = drawn["tokens"], drawn["states"], drawn["lengths"]
    past = torch.arange(tokens.shape[1]) >= lengths.unsqueeze(-1)
    assert (tokens[past] == 0).all() and (states[past] == -1).all() and (states[~past] >= 0).all()
    ends = tokens.gather(1, (lengths - 1).unsqueeze(-1)).squeeze(-1) == 0
    before = (tokens == 0) & (torch.arange(tokens.shape[1]) < (lengths - 1).unsqueeze(-1))
    assert not before.any() and (ends | (lengths == 3)).all()
    counts: dict = {}
    for row, length, ended in zip(tokens.tolist(), lengths.tolist(), ends.tolist()):
        if ended:
            counts[tuple(row[:length])] = counts.get(tuple(row[:length]), 0) + 1
    sentences = [s + (0,) for n in range(3) for s in itertools.product((1, 2, 3), repeat=n)]
    batch = {"tokens": torch.tensor([list(s) + [0] * (3 - len(s)) for s in sentences]),
             "lengths": torch.tensor([len(s) for s in sentences])}  # fmt: skip
    probabilities = dict(zip(sentences, model.log_likelihood(batch).exp().tolist()))
    within_sampling_error(counts, probabilities, draws)


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be"),
    ({"max_length": 0}, "max_length must be"),
    ({"n": 2.5}, "n must be"),
])  # fmt: skip
def test_sample_arguments_are_checked(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make("categorical", "exact").sample(**kwargs)


# --- contract and errors ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [CategoricalHMM, BernoulliHMM])
def test_contract(cls):
    for p in inspect.signature(cls).parameters.values():
        assert p.default is inspect.Parameter.empty or isinstance(p.default, (int, float, str, type(None)))
    kind = "categorical" if cls is CategoricalHMM else "bernoulli"
    size = {"vocab_size": V} if cls is CategoricalHMM else {"num_keys": K}
    model = cls(num_states=N, backend="Low_Rank", rank=R, **size)  # stored as the plain value
    assert type(model.backend) is str and model.backend == "low-rank"
    batch = random_batch(kind, [2, 1])
    assert model.num_events(batch).tolist() == [2, 1]
    assert "rank=2" in repr(model)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"backend": "viterbi"}, "unknown backend"),
        ({"backend": "low-rank"}, "needs rank"),
        ({"backend": "rank-space"}, "needs rank"),
        ({"backend": "low-rank", "rank": 5}, "at most num_states"),
        ({"backend": "low-rank", "rank": 0}, "rank must be an int >= 1"),
        ({"backend": "exact", "rank": 2}, "rank is used only"),
        ({"backend": "randomized"}, "needs k1"),
        ({"backend": "randomized", "k1": 3, "k2": 2}, "k1 + k2 must be in 1..4"),
        ({"backend": "randomized", "k1": 2, "k2": 1, "state_dropout": 0.5}, "k1 + k2 must be in 1..2"),
        ({"backend": "randomized", "k1": 0, "k2": 0}, "k1 + k2 must be in"),
        ({"backend": "randomized", "k1": 1, "k2": 1, "proposal": "best"}, "unknown proposal"),
        ({"backend": "exact", "k1": 1}, "k1 and k2 are used only"),
        ({"backend": "exact", "feature_dropout": 0.1}, "feature_dropout"),
        ({"state_dropout": 1.0}, "state_dropout must be a float in [0, 1)"),
        ({"num_states": 0}, "num_states must be an int"),
        ({"vocab_size": 2.5}, "vocab_size must be an int"),
        ({"initialization": "xavier"}, "initialization must be one of ('embeddings', 'app-d')"),
    ],
)
def test_constructor_errors(kwargs, message):
    args = {"vocab_size": 5, "num_states": 4, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        CategoricalHMM(**args)


def test_batch_errors():
    model = make("categorical", "exact")
    with pytest.raises(KeyError, match="needs batch\\['tokens'\\]"):
        model.log_likelihood({"frames": torch.zeros(1, 2, K), "lengths": torch.tensor([2])})
    with pytest.raises(ValueError, match=r"token ids must lie in 0..3 \(0..vocab_size-1\) within"):
        model.log_likelihood({"tokens": torch.tensor([[1, 4]]), "lengths": torch.tensor([2])})
    music = make("bernoulli", "exact")
    with pytest.raises(ValueError, match="frames must have shape B x T x 3"):
        music.log_likelihood({"frames": torch.zeros(1, 2, 88), "lengths": torch.tensor([2])})
    with pytest.raises(ValueError, match="num_keys must be an int"):
        BernoulliHMM(4, num_keys=0)


@pytest.mark.parametrize("kind", ["categorical", "bernoulli"])
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_app_d_initialization(kind, backend):
    """Yang et al. 2022, App. D: weight matrices Xavier-normal, the state and observation embeddings
    standard normal, the low-rank feature map's random features kept; the default is unchanged."""
    D, n = 64, 256
    kw = {"embedding_dim": D, "hidden_dim": D}
    model = make(kind, backend, num_states=n, initialization="app-d", **kw)
    default = make(kind, backend, num_states=n, **kw)
    table = model.emission.word if kind == "categorical" else model.emission.key
    for embedding in (model.state_emb, model.next_state_emb, table):
        assert abs(std(embedding) - 1.0) < 0.15
    xavier = model.start_mlp.project.weight
    assert abs(std(xavier) - (2 / (2 * D)) ** 0.5) < 0.02
    assert std(default.start_mlp.project.weight) < 0.8 * std(xavier)  # Kaiming-uniform
    if backend == "rank-space":
        assert abs(std(model.transition.rank_emb) - (2 / (R + D)) ** 0.5) < 0.1
    if backend == "low-rank":
        torch.testing.assert_close(model.transition.feature_map.weight, default.transition.feature_map.weight)
    assert std(default.state_emb) < 0.2


def std(parameter: torch.Tensor) -> float:
    return float(parameter.detach().std())
