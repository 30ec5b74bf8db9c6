"""``GaussianHSMM``: a neural hidden semi-Markov model over continuous frames (video, audio, sensor features),
with the inference backend as a constructor argument.

Generative story (Chiu et al. 2021, Sec. 3 and their CrossTask experiments): a first state z_1, then,
segment after segment, a duration d_k in 1..D given the state, d_k frames drawn independently from the
state's diagonal Gaussian, and the next state given the current one. The last segment ends exactly at
the sequence's last frame, so ``log_likelihood`` is log p(x_1..x_L, a segment ends at L), the quantity
the HSMM papers report (NLL per video). Batches: ``{"features": B x T x F float, "lengths": B}``
(docs/training-api.md).

Parameterization (E embedding size, N states, R rank; every distribution is a softmax of dot products of
embeddings passed through residual MLPs h, as the neural HMMs of ``zoo.models.hmm.model``):

* ``exact``: p(z_1) = softmax_z(e_z . h_s(q)); p(z_k = j | z_{k-1} = i) = softmax_j(h_T(e_i) . f_j),
  over j != i when ``self_transitions=False`` (the classical explicit-duration HSMM); p(d | z) =
  softmax_d(w_d . h_D(e_z) + b_d) over 1..D (or a truncated Poisson / negative binomial whose one or
  two parameters come from h_D(e_z): ``duration``); p(x | z) = N(mu_z, diag s_z) from h_E(e_z). Inference: the
  exact semi-Markov forward, O(T (D N + N^2)).
* ``low-rank``: the LHSMM (Chiu et al. 2021, Eq. 6): p(j | i) proportional to phi(h_T(e_i)) . phi(f_j),
  phi(x) = exp(W x) (W R x E, orthogonal random features at init, trained); the rest as ``exact``.
  Inference: O(T (D N + N R)); N x N is never built.
* ``rank-space``: the CPD of the merged transition-duration-emission factor (docs/semimarkov-rank-space.md):
  p(z_k = j, d, x_seg | z_{k-1} = i) = sum_r U[i, r] V[j, r] p_r(d) prod_t N(x_t; mu_r, diag s_r), with
  U = softmax_r(e_i . g_r), V = softmax_j(f_j . g_r) and the duration and Gaussian carried by the R rank
  components g_r; z_0 ~ softmax_z(e_z . h_s(q)) summed out. Inference over rank nodes,
  O(N R^2 + T (D R + R^2)). Self-transitions are always allowed (the DP needs them).
* ``randomized``: the model of ``exact`` trained with the randomized semi-Markov forward (Fu et al. 2022)
  keeping K1 top + K2 sampled states at each segment boundary; in eval mode the exact forward runs
  whenever N <= ``exact_max_states`` (see ``evaluation_is_exact``).

Segmentation (``segment``): the semi-Markov Viterbi over states (``exact``, ``low-rank`` and ``randomized``;
the latter two on the materialized N x N transition), labelled by state; for ``rank-space`` the
max-product DP over rank nodes with the states summed out (``SemiMarkovChain.rank_argmax``), labelled by
the rank component that emits the segment. ``num_labels`` is N or R accordingly.

Raw features can be mapped to the model's F dimensions by a fitted linear ``input_projection`` (PCA or
standardization, ``input_dim`` = the raw size), optionally after standardizing each sequence by its own
statistics (``standardize_sequences``), that is part of the model: a trained model scores new raw
sequences as its training data were scored.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.inference import Backend, SemiMarkovChain
from zoo.inference.checks import all_finite
from zoo.inference.numerics import NEG
from zoo.inference.rdp import PROPOSALS
from zoo.inference.semimarkov import to_frame_states
from zoo.models.arguments import check_int, check_positive, check_probability, check_randomized, check_rank
from zoo.models.base import ZooModel, decoding, renamed, scoring
from zoo.models.durations import duration_log_probs, duration_outputs
from zoo.models.emissions import GaussianEmission
from zoo.models.evaluation import RandomizedEvaluation
from zoo.models.inputs import batch_inputs, checked_lengths
from zoo.models.layers import ResidualMLP, embedding_table
from zoo.models.projection import InputProjection
from zoo.models.transitions import TRANSITION_HEADS, TRANSITION_LEGACY_KEYS


def check_frames_scored(unary: Tensor, features: Tensor) -> None:
    """A ValueError where a frame's Gaussian log-density is below the engine's -inf stand-in
    (``zoo.inference.numerics.NEG``, -1e30), -inf or NaN under every state (B x T x C ``unary``, from
    B x T x F ``features`` as the Gaussians see them): the engine would report that no segmentation
    covers the sequence, where its features are too large (|x| from about 1e15)."""
    if bool((unary.amax(-1) > NEG / 2).all()):  # the common case, in one reduction (13x faster at N = 64)
        return
    lost = ~(unary > NEG / 2).any(-1)  # B x T (NaN too)
    if bool(lost.any()):
        b = int(lost.any(-1).nonzero()[0])
        size = features[b].abs().amax(-1)  # T (0 past the length)
        t = int(size.argmax())
        raise ValueError(
            f"sequence {b} has frames with a Gaussian log-density below {NEG / 2:.0e} (impossible, to the "
            f"inference engine) or not finite under every state: its features (as the Gaussians see them) "
            f"reach |x| = {size[t].item():.3g} at frame {t}, too far from every state's mean; standardize "
            "the features (an input projection, standardize_sequences=True) or remove such frames"
        )


class GaussianHSMM(RandomizedEvaluation, ZooModel):
    """A neural HSMM with diagonal Gaussian emissions (module docstring).

    Cost model: time ~ B T D N^2 (exact; low-rank B T D N R, rank-space B T D R^2), memory ~ B T D N
    (float64 duration windows): linear in the length T, no evaluation length limit (``eval_memory``).

    Args:
        num_states: N.
        feature_dim: F, the size of the frames the Gaussians model (after ``input_projection``).
        max_duration: D, the longest segment in frames (durations 1..D).
        backend: "exact", "low-rank", "rank-space" or "randomized".
        rank: R: LHSMM features (low-rank, at most N) or the CPD rank (rank-space); required by those
            two backends, rejected by the others.
        embedding_dim: E, the size of every embedding (states, ranks, the feature map's input).
        hidden_dim: inner width of the residual blocks.
        num_blocks: residual blocks per MLP.
        dropout: dropout inside the MLPs (and on the rank embeddings).
        self_transitions: whether a segment may be followed by one with the same state (False: the
            classical explicit-duration HSMM; not available for rank-space).
        k1, k2: randomized only (required there): states kept exactly and sampled per boundary.
        proposal: randomized only: "local+global", "local", "global" or "uniform".
        exact_max_states: randomized only: in eval mode the exact forward runs when N <= this bound.
        input_dim: the raw feature size when the model owns a fitted projection to F dimensions
            (``input_projection``); None: batches already hold F-dimensional features.
        min_variance: floor of every Gaussian variance.
        standardize_sequences: standardize each sequence by its own mean and standard deviation before
            the input projection (``InputProjection(per_sequence=True)``; needs ``input_dim``): removes a
            recording's offsets and scale (a subject's, a sensor's), so that states model what
            recordings share.
        duration: p(d | component): "categorical" (D free logits), "poisson" or "negative-binomial"
            (one or two numbers a component, truncated to 1..D; ``zoo.models.durations``).
    """

    exact_evaluation = ("num_states", "exact_max_states")
    legacy_keys = TRANSITION_LEGACY_KEYS
    weights_read_with = ("standardize_sequences",)
    full_precision_keys = ("input_projection.mean", "input_projection.matrix")

    def eval_memory(self, batch_size: int, length: int) -> int:
        """Three float64 copies of the B x T x D x N duration windows and three float32 copies of the raw
        frames; docs/training-api.md has the measured peaks beside it."""
        frames = self.config["input_dim"] or self.feature_dim
        return 12 * batch_size * length * (2 * self.max_duration * self.num_states + frames)

    observation_key = "features"

    def __init__(
        self,
        num_states: int,
        feature_dim: int,
        max_duration: int,
        backend: str = "exact",
        rank: int | None = None,
        embedding_dim: int = 64,
        hidden_dim: int = 64,
        num_blocks: int = 2,
        dropout: float = 0.0,
        self_transitions: bool = True,
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local+global",
        exact_max_states: int = 4096,
        input_dim: int | None = None,
        min_variance: float = 1e-3,
        standardize_sequences: bool = False,
        duration: str = "categorical",
    ):
        super().__init__()
        for name, value in (
            ("num_states", num_states),
            ("feature_dim", feature_dim),
            ("max_duration", max_duration),
            ("embedding_dim", embedding_dim),
            ("hidden_dim", hidden_dim),
            ("exact_max_states", exact_max_states),
        ):
            check_int(name, value)
        check_int("num_blocks", num_blocks, low=0)
        check_probability("dropout", dropout)
        check_positive("min_variance", min_variance)
        if not isinstance(self_transitions, bool):
            raise TypeError(f"self_transitions must be a bool, got {self_transitions!r}")
        parsed = Backend.parse(backend)
        check_rank(
            parsed,
            rank,
            "LHSMM features / CPD rank",
            size_name="num_states",
            size=num_states,
            slower="LHSMM is slower than the softmax HSMM",
        )
        if parsed is Backend.RANK_SPACE and not self_transitions:
            raise ValueError(
                "backend='rank-space' always allows self-transitions (forbidding them would tie two rank "
                "nodes through a state node: docs/semimarkov-rank-space.md, Sec. 6); use "
                "self_transitions=True or backend 'exact' / 'low-rank' / 'randomized'"
            )
        if not self_transitions and num_states < 2:
            raise ValueError(
                "self_transitions=False needs num_states >= 2 (a segment must go somewhere else)"
            )
        check_randomized(
            parsed,
            k1,
            k2,
            proposal,
            proposals=PROPOSALS,
            size_name="num_states",
            limit=num_states,
            unit="per segment boundary",
            example="k1 = k2 = num_states // 10",
        )
        if not isinstance(standardize_sequences, bool):
            raise TypeError(f"standardize_sequences must be a bool, got {standardize_sequences!r}")
        if standardize_sequences and input_dim is None:
            raise ValueError(
                "standardize_sequences=True needs input_dim (the raw feature size): the standardized "
                "sequences go through the model's fitted input projection"
            )
        if input_dim is not None:
            check_int("input_dim", input_dim)
            if feature_dim > input_dim:
                raise ValueError(
                    f"feature_dim ({feature_dim}) must be at most input_dim ({input_dim}): the input "
                    "projection is a PCA or a standardization of the raw features"
                )

        self.num_states, self.feature_dim, self.max_duration = num_states, feature_dim, max_duration
        self.backend = parsed.value
        self.rank = rank
        self.self_transitions = self_transitions
        self.k1, self.k2, self.proposal = k1, k2, proposal
        self.exact_max_states = exact_max_states
        self.input_dim = input_dim
        self.input_projection = (
            InputProjection(input_dim, feature_dim, standardize_sequences) if input_dim is not None else None
        )

        E = embedding_dim

        def mlp() -> ResidualMLP:
            return ResidualMLP(E, hidden_dim, num_blocks, dropout)

        self.state_emb = embedding_table(num_states, E)  # e_z: the previous state's role (and the start)
        self.next_state_emb = embedding_table(num_states, E)  # f_z: the next state's role
        self.start_query = nn.Parameter(torch.randn(E) / E**0.5)  # q
        self.start_mlp = mlp()  # h_s
        self.emit_mlp = mlp()  # h_E: component (state or rank) -> Gaussian
        self.duration_mlp = mlp()  # h_D: component -> duration logits
        self.duration = duration
        self.duration_head = nn.Linear(E, duration_outputs(duration, max_duration))
        self.emission = GaussianEmission(feature_dim, E, min_variance)
        # the backend's transition: softmax, low-rank features or rank-space CPD (zoo.models.transitions)
        self.transition = TRANSITION_HEADS[parsed](E, mlp, rank, dropout, self_transitions)

    # --- parameters -------------------------------------------------------------------------
    @property
    def num_labels(self) -> int:
        """How many labels ``segment`` uses: N, or R for rank-space (rank components)."""
        return self.rank if self.transition.emits_by_rank else self.num_states

    def _start_log_probs(self) -> Tensor:
        """log p(z_1) (rank-space: log p(z_0)): N."""
        return torch.log_softmax(self.state_emb @ self.start_mlp(self.start_query), -1)

    def _duration_log_probs(self, components: Tensor) -> Tensor:
        """log p(d | component) for d = 1..D: C x D."""
        outputs = self.duration_head(self.duration_mlp(components))
        return duration_log_probs(self.duration, outputs, self.max_duration)

    def distributions(self) -> dict[str, Tensor]:
        """The model's normalized distributions, for inspection and tests (call it in eval mode).

        ``start`` N (p(z_1); rank-space: p(z_0)), ``duration`` C x D (p(d | c), column d-1), ``mean`` and
        ``variance`` C x F (the Gaussians), with C = N states, or R rank components for rank-space; and
        ``transition`` N x N (p(z_k = j | z_{k-1} = i), materialized for low-rank), or ``U``, ``V``
        (N x R) for rank-space.
        """
        components = self.transition.components(self.state_emb)
        mean, variance = self.emission.moments(self.emit_mlp(components))
        return {
            "start": self._start_log_probs().exp(),
            "duration": self._duration_log_probs(components).exp(),
            "mean": mean,
            "variance": variance,
            **self.transition.distributions(self.state_emb, self.next_state_emb),
        }

    # --- inference --------------------------------------------------------------------------
    def features(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The batch's frames as the Gaussians see them (B x T x F, projected when the model has an
        input projection; 0 past each length, whatever the padding held) and its lengths (B,)."""
        features, lengths = batch_inputs(self, batch, self.observation_key)
        if not torch.is_tensor(features) or not features.is_floating_point() or features.dim() != 3:
            raise ValueError(
                "batch['features'] must be a float tensor B x T x F, got "
                f"{type(features).__name__} {getattr(features, 'dtype', '')} "
                f"{tuple(getattr(features, 'shape', ()))}"
            )
        expected = self.input_dim if self.input_projection is not None else self.feature_dim
        if features.shape[-1] != expected:
            where = "input_dim" if self.input_projection is not None else "feature_dim"
            raise ValueError(
                f"batch['features'] must have {expected} dimensions per frame (the model's {where}), "
                f"got shape {tuple(features.shape)}"
            )
        lengths, inside = checked_lengths(features, lengths)
        features = torch.where(inside.unsqueeze(-1), features, 0.0)  # padding may hold anything (NaN too)
        if not all_finite(features):
            bad = (~torch.isfinite(features)).flatten(1).any(-1).nonzero().flatten().tolist()
            raise ValueError(
                f"batch['features'] must be finite within each length, got NaN or inf in sequences {bad}"
            )
        if self.input_projection is not None:
            features = self.input_projection(features, lengths)
        return features, lengths

    hsmm = renamed("hsmm", "posterior")

    def posterior(self, batch: dict, generator: torch.Generator | None = None) -> SemiMarkovChain:
        """The posterior over segmentations p(segmentation, states | x) of this batch as a
        ``SemiMarkovChain`` (rank-space: over rank nodes for log Z). ``generator`` seeds the
        randomized backend's draws."""
        features, lengths = self.features(batch)
        prev, nxt = self.state_emb, self.next_state_emb
        components = self.transition.components(prev)  # states, or rank components
        unary = self.emission(self.emit_mlp(components), features, lengths)  # B x T x C
        check_frames_scored(unary, features)
        duration = self._duration_log_probs(components)  # C x D
        start = self._start_log_probs()
        factors = self.transition.semimarkov(unary, start, prev, nxt, components, duration)
        return SemiMarkovChain(factors, lengths, *self.engine_backend(generator))

    @scoring
    def log_likelihood(self, batch: dict, generator: torch.Generator | None = None) -> Tensor:
        """log p(x) per sequence: (B,). Differentiable in training mode; in eval mode only with
        ``requires_grad=True`` or a batch tensor that requires grad (else it runs under no_grad:
        ``zoo.models.base.scoring``). Randomized in training: the log of the unbiased estimate."""
        return self.posterior(batch, generator).log_partition

    def forward(self, batch: dict) -> Tensor:
        """Same as ``log_likelihood``: (B,)."""
        return self.log_likelihood(batch)

    @decoding
    def segment(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The best segmentation of each sequence (module docstring; run in eval mode).

        Returns the segmentation B x T (the label of each segment at its first frame, -1 elsewhere and
        past each length; labels in 0..num_labels-1) and the per-frame labels B x T (-1 past each length).
        """
        dist = self.posterior(batch)
        if self.transition.emits_by_rank:  # labelled by the rank component that emits each segment
            segmentation = dist.rank_argmax
        else:
            if dist.backend is Backend.RANDOMIZED:  # training, or N > exact_max_states: decode exactly
                dist = SemiMarkovChain(dist.factors, dist.lengths, "exact")
            segmentation = dist.argmax
        return segmentation, to_frame_states(segmentation, dist.lengths)

    def extra_repr(self) -> str:
        extra = f", rank={self.rank}" if self.rank is not None else ""
        if self.k1 is not None:  # randomized
            extra += f", k1={self.k1}, k2={self.k2}, proposal={self.proposal!r}"
        return (
            f"num_states={self.num_states}, feature_dim={self.feature_dim}, "
            f"max_duration={self.max_duration}, backend={self.backend!r}{extra}"
        )
