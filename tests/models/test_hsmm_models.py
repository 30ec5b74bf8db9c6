"""GaussianHSMM semantics on tiny sizes: log p(x) against brute-force enumeration of every segmentation
(scored term by term from the model's own distributions with torch.distributions.Normal), normalization
by numerical integration, backends that parameterize the same distribution agree, decoding, the input
projection and its checkpoint, and clear errors."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
import torch
from torch.distributions import Normal

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "semimarkov"))
import sm_bruteforce as bf  # noqa: E402

from zoo.models import GaussianHSMM  # noqa: E402
from zoo.models.emissions import MEDIAN_SAMPLES, median_frame  # noqa: E402
from zoo.models.projection import standardize_each  # noqa: E402

BACKENDS = {
    "exact": {"backend": "exact"},
    "exact-no-self": {"backend": "exact", "self_transitions": False},
    "low-rank": {"backend": "low-rank", "rank": 2},
    "low-rank-no-self": {"backend": "low-rank", "rank": 2, "self_transitions": False},
    "rank-space": {"backend": "rank-space", "rank": 2},
    "randomized": {"backend": "randomized", "k1": 2, "k2": 1},
}
SMALL = {"embedding_dim": 6, "hidden_dim": 6}


def model(num_states=3, feature_dim=2, max_duration=3, seed=0, **kwargs) -> GaussianHSMM:
    torch.manual_seed(seed)
    return GaussianHSMM(num_states, feature_dim, max_duration, **SMALL, **kwargs).double().eval()


def ragged_batch(B=3, T=5, F=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, 2, 4][:B])
    features = torch.randn(B, T, F, generator=g, dtype=torch.float64)
    features = torch.where(torch.arange(T).view(1, T, 1) < lengths.view(B, 1, 1), features, 0.0)
    return {"features": features, "lengths": lengths}


def frame_log_probs(p: dict, x: torch.Tensor) -> torch.Tensor:
    """log N(x_t; mu_c, diag var_c): L x C, from the model's moments."""
    return Normal(p["mean"], p["variance"].sqrt()).log_prob(x.unsqueeze(1)).sum(-1)


def brute_force_log_likelihood(m: GaussianHSMM, x: torch.Tensor) -> float:
    """log p(x) of one sequence x (L x F): the sum over every segmentation into durations 1..D and
    every state labelling (rank-space: every state sequence z_0..z_m, ranks summed per segment)."""
    with torch.no_grad():
        p = m.distributions()
    L, D = len(x), m.max_duration
    emit = frame_log_probs(p, x)  # L x C
    total = 0.0
    for durations in bf.compositions(L, D):
        starts = [sum(durations[:k]) for k in range(len(durations))]
        seg = [
            (p["duration"][:, d - 1].log() + emit[s : s + d].sum(0)).exp() for s, d in zip(starts, durations)
        ]  # per segment: C weights p(d | c) prod_t N(x_t | c)
        if m.backend == "rank-space":  # start^T prod_k (U diag(w_k) V^T) 1
            vector = p["start"]
            for w in seg:
                vector = ((vector @ p["U"]) * w) @ p["V"].T
            total += float(vector.sum())
            continue
        N = m.num_states
        for labels in itertools.product(range(N), repeat=len(durations)):
            weight = float(p["start"][labels[0]])
            for k, z in enumerate(labels):
                weight *= float(seg[k][z])
                if k:
                    weight *= float(p["transition"][labels[k - 1], z])
            total += weight
    return math.log(total)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_log_likelihood_matches_brute_force_enumeration(name):
    m = model(**BACKENDS[name])
    batch = ragged_batch()
    log_p = m.log_likelihood(batch)
    assert log_p.shape == (3,)
    for b, L in enumerate(batch["lengths"].tolist()):
        expected = brute_force_log_likelihood(m, batch["features"][b, :L])
        assert float(log_p[b].detach()) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("duration", ["poisson", "negative-binomial"])
@pytest.mark.parametrize("name", ["exact", "low-rank", "rank-space", "randomized"])
def test_parametric_durations_match_brute_force_enumeration(name, duration):
    m = model(max_duration=4, duration=duration, **BACKENDS[name])
    assert m.duration_head.out_features == {"poisson": 1, "negative-binomial": 2}[duration]
    batch = ragged_batch()
    log_p = m.log_likelihood(batch)
    for b, L in enumerate(batch["lengths"].tolist()):
        expected = brute_force_log_likelihood(m, batch["features"][b, :L])
        assert float(log_p[b].detach()) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    m.train().log_likelihood(batch).sum().backward()  # eval mode scores without a graph
    assert m.duration_head.weight.grad.abs().sum() > 0


def test_parametric_durations_are_truncated_poisson_and_negative_binomial():
    """Row c: the pmf of d - 1 under Poisson(exp(a_c)) / NB(softplus(a_c) + 1e-3, sigmoid(b_c)) on
    0..D-1, renormalized."""
    from torch.distributions import NegativeBinomial, Poisson

    from zoo.models.durations import duration_log_probs, duration_outputs

    D, outputs = 6, torch.tensor([[0.3, -1.0], [2.0, 0.5], [-3.0, 2.0]], dtype=torch.float64)
    k = torch.arange(D, dtype=torch.float64)
    for kind, dist in (
        ("poisson", Poisson(outputs[:, :1].exp())),
        ("negative-binomial", NegativeBinomial(torch.nn.functional.softplus(outputs[:, :1]) + 1e-3,
                                               logits=outputs[:, 1:])),
    ):  # fmt: skip
        expected = dist.log_prob(k).log_softmax(-1)
        got = duration_log_probs(kind, outputs[:, : duration_outputs(kind, D)], D)
        torch.testing.assert_close(got, expected)
    assert duration_outputs("categorical", D) == D
    kinds = r"\['categorical', 'negative-binomial', 'poisson'\]"
    with pytest.raises(ValueError, match=r"duration must be one of " + kinds):
        GaussianHSMM(3, 2, 4, duration="gamma")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_density_integrates_to_one_when_every_segment_has_one_frame(name):
    """With D = 1 every segmentation is the frame-by-frame one, so p(x_1, x_2) is a density: its
    integral over a grid (F = 1, trapezoid rule) is 1."""
    m = model(feature_dim=1, max_duration=1, **BACKENDS[name])
    with torch.no_grad():
        m.emission.scale.bias.fill_(-0.5)  # variances about 0.47: the mass lies well inside the grid
    grid = torch.linspace(-12.0, 12.0, 481, dtype=torch.float64)
    x1, x2 = torch.meshgrid(grid, grid, indexing="ij")
    features = torch.stack([x1.flatten(), x2.flatten()], -1).unsqueeze(-1)  # G^2 x 2 x 1
    with torch.no_grad():
        density = m.log_likelihood({"features": features, "lengths": torch.full((len(features),), 2)}).exp()
    integral = torch.trapezoid(torch.trapezoid(density.view(len(grid), len(grid)), grid), grid)
    assert float(integral) == pytest.approx(1.0, abs=1e-6)


def test_one_frame_segments_make_hmmlearns_gaussian_hmm():
    """With D = 1 (self-transitions allowed) the model is a diagonal Gaussian HMM: its log-likelihood and
    its Viterbi states are hmmlearn's ``GaussianHMM`` with the same start, transition, means and
    variances, on a ragged batch."""
    hmm = pytest.importorskip("hmmlearn.hmm")
    m = model(num_states=4, feature_dim=3, max_duration=1)
    with torch.no_grad():
        p = m.distributions()
    reference = hmm.GaussianHMM(4, covariance_type="diag")
    reference.startprob_, reference.transmat_ = p["start"].numpy(), p["transition"].numpy()
    reference.means_, reference.covars_ = p["mean"].numpy(), p["variance"].numpy()
    batch = ragged_batch(T=40, F=3)
    batch["lengths"] = torch.tensor([40, 1, 23])
    log_likelihood = m.log_likelihood(batch)
    _, frames = m.segment(batch)
    for b, L in enumerate(batch["lengths"].tolist()):
        x = batch["features"][b, :L].numpy()
        assert float(log_likelihood[b]) == pytest.approx(reference.score(x), rel=1e-10)
        assert frames[b, :L].tolist() == reference.decode(x)[1].tolist()


def test_one_frame_mass_is_the_probability_that_the_first_segment_has_one_frame():
    m = model(feature_dim=1, max_duration=3)
    grid = torch.linspace(-15.0, 15.0, 3001, dtype=torch.float64)
    with torch.no_grad():
        density = m.log_likelihood(
            {"features": grid.view(-1, 1, 1), "lengths": torch.ones(len(grid), dtype=torch.long)}
        ).exp()
        p = m.distributions()
    expected = float((p["start"] * p["duration"][:, 0]).sum())
    assert float(torch.trapezoid(density, grid)) == pytest.approx(expected, abs=1e-6)
    assert 0 < expected < 1


def test_randomized_keeping_every_state_is_exact_and_eval_is_exact_up_to_its_bound():
    batch = ragged_batch()
    exact = model(backend="exact")
    randomized = model(backend="randomized", k1=3, k2=0)
    randomized.load_state_dict(exact.state_dict())
    randomized.train()
    torch.testing.assert_close(randomized.log_likelihood(batch), exact.log_likelihood(batch))
    estimated = model(backend="randomized", k1=1, k2=1, exact_max_states=2)
    estimated.load_state_dict(exact.state_dict())
    assert not estimated.evaluation_is_exact() and model(**BACKENDS["randomized"]).evaluation_is_exact()
    g = torch.Generator().manual_seed(0)
    assert estimated.posterior(batch, g).backend.value == "randomized"


def test_low_rank_transition_rows_are_distributions_without_self_transitions():
    p = model(backend="low-rank", rank=2, self_transitions=False).distributions()
    torch.testing.assert_close(p["transition"].sum(-1), torch.ones(3, dtype=torch.float64))
    assert (p["transition"].diagonal() == 0).all()
    torch.testing.assert_close(p["duration"].sum(-1), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("name", ["exact", "exact-no-self", "low-rank", "randomized"])
def test_segment_is_the_best_state_segmentation(name):
    m = model(**BACKENDS[name])
    batch = ragged_batch()
    segmentation, frames = m.segment(batch)
    with torch.no_grad():
        p = m.distributions()
    for b, L in enumerate(batch["lengths"].tolist()):
        emit = frame_log_probs(p, batch["features"][b, :L])
        best, best_segs = -math.inf, None
        for durations in bf.compositions(L, m.max_duration):
            starts = [sum(durations[:k]) for k in range(len(durations))]
            for labels in itertools.product(range(3), repeat=len(durations)):
                score = math.log(p["start"][labels[0]])
                for k, (s, d, z) in enumerate(zip(starts, durations, labels)):
                    score += math.log(p["duration"][z, d - 1]) + float(emit[s : s + d, z].sum())
                    if k:
                        score += math.log(max(float(p["transition"][labels[k - 1], z]), 1e-300))
                if score > best:
                    best, best_segs = score, tuple(zip(starts, durations, labels))
        assert bf.from_tensor_format(segmentation[b].tolist(), L) == best_segs
        expected_frames = [z for _, d, z in best_segs for _ in range(d)] + [-1] * (5 - L)
        assert frames[b].tolist() == expected_frames


def test_rank_space_segments_are_labelled_by_rank_component():
    m = model(num_states=4, backend="rank-space", rank=2)
    assert m.num_labels == 2 and model().num_labels == 3
    segmentation, frames = m.segment(ragged_batch())
    lengths = [5, 2, 4]
    for b, L in enumerate(lengths):
        assert set(frames[b, :L].tolist()) <= {0, 1} and (frames[b, L:] == -1).all()
        assert segmentation[b, 0] >= 0


@pytest.mark.parametrize("name", list(BACKENDS))
def test_segment_uses_the_whole_model_in_training_mode_too(name):
    """segment in training mode gives the eval-mode segmentation (no dropout in the MLPs, the exact
    decoder for the randomized backend) and leaves the model in training mode."""
    m = model(num_states=4, max_duration=4, dropout=0.5, **BACKENDS[name]).train()
    batch = ragged_batch(T=5, F=2, seed=3)
    with torch.no_grad():  # peaked moments, so that dropout would move the best segmentation
        for p in m.parameters():
            p.mul_(5)
    got = m.segment(batch)
    assert m.training
    want = m.eval().segment(batch)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("name", list(BACKENDS))
def test_gradients_are_finite_for_every_backend(name):
    m = model(**BACKENDS[name]).train()
    m.log_likelihood(ragged_batch()).sum().backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert m.emission.mean.weight.grad.abs().sum() > 0 and m.duration_head.weight.grad.abs().sum() > 0


def test_input_projection_is_applied_and_survives_the_state_dict():
    raw = ragged_batch(F=4)
    m = model(input_dim=4)
    with pytest.raises(RuntimeError, match="input projection .* has not been fitted"):
        m.log_likelihood(raw)
    mean = torch.tensor([0.1, -0.2, 0.3, 0.0], dtype=torch.float64)
    matrix = torch.randn(4, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    m.input_projection.set(mean, matrix)
    plain = model()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("input_projection")})
    projected = {"features": (raw["features"] - mean) @ matrix, "lengths": raw["lengths"]}
    torch.testing.assert_close(m.log_likelihood(raw), plain.log_likelihood(projected))
    again = GaussianHSMM(**m.config).double().eval()
    again.load_state_dict(m.state_dict())
    assert again.input_projection.fitted
    torch.testing.assert_close(again.log_likelihood(raw), m.log_likelihood(raw))
    with pytest.raises(ValueError, match=r"needs mean \(4,\) and matrix \(4, 2\)"):
        m.input_projection.set(mean, matrix.T)


@pytest.mark.parametrize("offset", [1000.0, -1e4])
def test_float32_log_densities_of_features_far_from_zero(offset):
    """Features and means far from 0 (unstandardized sensor readings): float32 log p(x) is within a
    plain float32 log-density's error of float64's; expanding the square at 0 lost nats to cancellation
    (4 per frame at an offset of 1000, 20 dimensions)."""
    m = model(num_states=4, feature_dim=20, max_duration=4)
    with torch.no_grad():
        m.emission.mean.bias.fill_(offset)
    g = torch.Generator().manual_seed(0)
    batch = {"features": offset + torch.randn(3, 40, 20, generator=g, dtype=torch.float64),
             "lengths": torch.tensor([40, 13, 27])}  # fmt: skip
    frames = m.emission(m.emit_mlp(m.state_emb), batch["features"], batch["lengths"])
    low = model(num_states=4, feature_dim=20, max_duration=4).float()
    low.load_state_dict(m.state_dict())
    features32 = batch["features"].float()
    got = low.emission(low.emit_mlp(low.state_emb), features32, batch["lengths"])
    # the float32 features themselves are off by |x| * 2^-24: what any float32 computation starts from
    plain = m.emission(m.emit_mlp(m.state_emb), features32.double(), batch["lengths"])
    inherent = (plain - frames).abs().max()
    assert (got.double() - frames).abs().max() <= 2 * inherent + 1e-4
    torch.testing.assert_close(low.log_likelihood(batch).double(), m.log_likelihood(batch), rtol=0, atol=0.05)


def test_log_densities_under_bfloat16_autocast_are_float32_products_of_the_moments():
    """Under bf16-mixed the moments' layers run in bfloat16, the expanded square does not: the log
    densities equal the float32 computation from the moments autocast made. (The bundled smartwatch
    HSMM on 50 standardized frames: 0.01-0.5 nats from float32, the moments' and the other networks'
    bfloat16; 0.4-2.2 with the products in bfloat16 too.)"""
    m = model(num_states=8, feature_dim=12, max_duration=4).float()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in m.emission.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=g))
    batch = {"features": 3 * torch.randn(2, 50, 12, generator=g), "lengths": torch.tensor([50, 31])}
    hidden = m.emit_mlp(m.state_emb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = m.emission(hidden, batch["features"], batch["lengths"])
        mean, var = m.emission.moments(hidden)
    assert mean.dtype == torch.bfloat16 and got.dtype == torch.float32
    expected = m.emission._log_density(mean.float(), var.float(), batch["features"], batch["lengths"])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-4)


def test_median_frame_is_the_median_of_evenly_spaced_frames_inside_each_length():
    """Every frame of a sequence shorter than the sample, 31 evenly spaced ones of a longer one; padding
    never counts."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([1, 7, 31, 32, 200])
    x = torch.randn(5, 200, 3, generator=g)
    x[torch.arange(200) >= lengths.view(5, 1)] = 1e9  # padding
    got = median_frame(x, lengths)
    for b, L in enumerate(lengths.tolist()):
        frames = [int((k + 0.5) * L / MEDIAN_SAMPLES) for k in range(MEDIAN_SAMPLES)]
        assert set(frames) == set(range(L)) if L <= MEDIAN_SAMPLES else len(set(frames)) == MEDIAN_SAMPLES
        torch.testing.assert_close(got[b], x[b, frames].median(0).values, rtol=0, atol=0)


def test_float32_log_densities_next_to_an_outlier_frame():
    """A recording at an offset of 1000 with a few glitched frames at 1e6: the other frames keep float32
    accuracy (a shift by the mean frame, 1e4 away from them, lost up to 3,100 nats a frame)."""
    m = model(num_states=4, feature_dim=20, max_duration=4)
    with torch.no_grad():
        m.emission.mean.bias.fill_(1000.0)
    g = torch.Generator().manual_seed(0)
    features = 1000.0 + torch.randn(2, 300, 20, generator=g, dtype=torch.float64)
    features[:, ::100] = 1e6
    lengths = torch.tensor([300, 211])
    hidden = m.emit_mlp(m.state_emb)
    frames = m.emission(hidden, features, lengths)
    low = model(num_states=4, feature_dim=20, max_duration=4).float()
    low.load_state_dict(m.state_dict())
    got = low.emission(low.emit_mlp(low.state_emb), features.float(), lengths)
    plain = m.emission(hidden, features.float().double(), lengths)
    normal = features[..., 0] < 1e5  # B x T
    inherent = (plain - frames).abs()[normal].max()
    assert (got.double() - frames).abs()[normal].max() <= 2 * inherent + 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [-1e16, 1e20, 1e30])
def test_features_beyond_the_engines_range_are_named(dtype, value):
    """Features so large that every state's log-density falls below the engine's -inf stand-in (-1e30)
    or overflows: an error names the sequence, the frame and the remedy, not the engine's 'no
    segmentation covers ...'; features up to 1e15 are scored."""
    m = model(feature_dim=2).to(dtype)
    batch = ragged_batch(F=2)
    batch["features"] = batch["features"].to(dtype)
    batch["features"][1, 1, 0] = 1e15
    assert torch.isfinite(m.log_likelihood(batch)).all()
    batch["features"][1, 1, 0] = value
    with pytest.raises(ValueError, match=r"sequence 1 has frames .* \|x\| = .* at frame 1.*standardize"):
        m.log_likelihood(batch)


def test_standardize_each_uses_each_sequences_own_frames():
    raw = ragged_batch(F=3)
    raw["features"][:, :, 2] = 4.0  # constant within every sequence: scale 1, centred to 0
    out = standardize_each(raw["features"], raw["lengths"])
    for b, L in enumerate(raw["lengths"].tolist()):
        x = raw["features"][b, :L]
        expected = (x - x.mean(0)) / torch.where(x.std(0, unbiased=False) > 0, x.std(0, unbiased=False), 1.0)
        torch.testing.assert_close(out[b, :L], expected)
        assert bool((out[b, L:] == 0).all())  # padding
    torch.testing.assert_close(standardize_each(raw["features"][0]), out[0])  # T x F: every frame counts


@pytest.mark.parametrize("constant", [0.1, 0.3, 1000.0, -7.7])
def test_standardize_each_maps_a_float32_constant_to_zero(constant):
    """A dimension constant within a sequence at a value float32 cannot hold exactly (0.1) is 0, as an
    exact one is: its float32 mean's rounding error is not scaled up to +-1 by a std near 1e-8. A
    dimension that varies is standardized to float32 accuracy, with statistics as in float64."""
    raw = ragged_batch(F=3, T=300)
    raw["lengths"] = torch.tensor([300, 123, 7])
    raw["features"][:, :, 1] = constant
    x = raw["features"].float()
    out = standardize_each(x, raw["lengths"])
    assert out.dtype == torch.float32
    assert bool((out[:, :, 1] == 0).all())
    reference = standardize_each(raw["features"], raw["lengths"]).float()
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-6)
    m = model(input_dim=3, standardize_sequences=True).float()
    m.input_projection.set(torch.zeros(3), torch.randn(3, 2))
    zero = {"features": x.clone(), "lengths": raw["lengths"]}
    zero["features"][:, :, 1] = 0.0
    given = {"features": x, "lengths": raw["lengths"]}
    torch.testing.assert_close(m.log_likelihood(given), m.log_likelihood(zero))


def test_standardize_sequences_removes_each_recordings_offset_and_scale():
    """With standardize_sequences the model scores a recording and the same recording shifted and
    scaled per dimension (another subject, another sensor gain) alike; padding does not enter the
    statistics, so a sequence scores the same alone and in a ragged batch."""
    raw = ragged_batch(F=4)
    m = model(input_dim=4, standardize_sequences=True)
    m.input_projection.set(torch.zeros(4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64))
    moved = {"features": raw["features"] * torch.tensor([3.0, 0.5, 2.0, 7.0], dtype=torch.float64) + 11.0,
             "lengths": raw["lengths"]}  # fmt: skip
    torch.testing.assert_close(m.log_likelihood(moved), m.log_likelihood(raw))
    alone = {"features": raw["features"][1:2, :2], "lengths": raw["lengths"][1:2]}
    torch.testing.assert_close(m.log_likelihood(alone), m.log_likelihood(raw)[1:2])
    again = GaussianHSMM(**m.config).double().eval()
    again.load_state_dict(m.state_dict())
    torch.testing.assert_close(again.log_likelihood(moved), m.log_likelihood(raw))
    plain = model(input_dim=4)
    plain.load_state_dict(m.state_dict())
    assert not torch.allclose(plain.log_likelihood(moved), m.log_likelihood(moved))


def test_config_holds_plain_values_and_rebuilds_the_model():
    m = model(**BACKENDS["rank-space"], input_dim=5)
    assert m.config["backend"] == "rank-space" and m.config["input_dim"] == 5
    rebuilt = GaussianHSMM.from_config(m.spec())
    assert rebuilt.config == m.config


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backend": "low-rank"}, ValueError, "needs rank=R"),
        ({"backend": "exact", "rank": 2}, ValueError, "rank is used only by"),
        ({"backend": "low-rank", "rank": 9}, ValueError, "rank must be at most num_states=3"),
        ({"backend": "rank-space", "rank": 2, "self_transitions": False}, ValueError, "always allows self"),
        ({"backend": "randomized"}, ValueError, "needs k1"),
        (
            {"backend": "randomized", "k1": 3, "k2": 1},
            ValueError,
            r"k1 \+ k2 must be in 1..num_states = 1..3",
        ),
        ({"backend": "randomized", "k1": 1, "k2": 1, "proposal": "best"}, ValueError, "unknown proposal"),
        ({"k1": 1, "k2": 1}, ValueError, "used only by backend='randomized'"),
        ({"backend": "semi"}, ValueError, "unknown backend"),
        ({"input_dim": 1}, ValueError, r"feature_dim \(2\) must be at most input_dim \(1\)"),
        ({"min_variance": 0.0}, ValueError, "min_variance must be a positive float"),
        ({"dropout": 1.0}, ValueError, "dropout must be a float in"),
        ({"self_transitions": "no"}, TypeError, "self_transitions must be a bool"),
        ({"standardize_sequences": True}, ValueError, "standardize_sequences=True needs input_dim"),
        ({"standardize_sequences": 1, "input_dim": 2}, TypeError, "standardize_sequences must be a bool"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        GaussianHSMM(3, 2, 3, **kwargs)


def test_bad_batches_are_named():
    m = model()
    with pytest.raises(KeyError, match="needs batch\\['features'\\]"):
        m.log_likelihood({"frames": torch.zeros(1, 2, 2), "lengths": torch.tensor([2])})
    with pytest.raises(ValueError, match="must have 2 dimensions per frame .* feature_dim"):
        m.log_likelihood({"features": torch.zeros(1, 2, 3), "lengths": torch.tensor([2])})
    with pytest.raises(ValueError, match="must be a float tensor B x T x F"):
        m.log_likelihood({"features": torch.zeros(1, 2, 2, dtype=torch.long), "lengths": torch.tensor([2])})
    with pytest.raises(ValueError, match="lengths must lie in 1..T"):
        m.log_likelihood(
            {"features": torch.zeros(1, 2, 2, dtype=torch.float64), "lengths": torch.tensor([3])}
        )
    with pytest.raises(ValueError, match=r"finite within each length, got NaN or inf in sequences \[0\]"):
        m.log_likelihood({"features": torch.full((1, 2, 2), float("nan")), "lengths": torch.tensor([2])})
