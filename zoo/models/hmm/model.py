"""Neural HMMs with the inference backend as a constructor argument.

Two observation types share one base class:

* ``CategoricalHMM(vocab_size, num_states, ...)``: words in 0..V-1 (language modelling), batch key
  ``tokens`` (B x T long);
* ``BernoulliHMM(num_states, num_keys=88, ...)``: factored Bernoulli emissions over piano keys
  (polyphonic music), batch key ``frames`` (B x T x K float 0/1).

Parameterization per backend (D embedding size, N states, R rank; every distribution is a softmax
of dot products of embeddings passed through residual MLPs h, Yang et al. 2022 App. B):

* ``exact``: the softmax HMM. p(z_1) = softmax_z(e_z . h_s(q)); p(z_t = j | z_{t-1} = i) =
  softmax_j(h_T(e_i) . f_j); p(x | z) from h_E(e_z). Inference: the exact forward on a DenseChain.
* ``low-rank``: the LHMM (Chiu et al. 2021, Eq. 5): p(j | i) proportional to phi(h_T(e_i)) . phi(f_j)
  with phi(x) = exp(W x), W R x D (orthogonal random features at init, trained); start and emissions
  as ``exact``. Inference: LowRankChain, O(T N R); N x N is never built.
* ``rank-space``: the CPD of the merged transition-emission factor (Yang et al. 2022, Sec. 4.3 and
  App. B): p(z_t, x_t | z_{t-1}) = sum_r U[z_{t-1}, r] V[z_t, r] W[x_t, r] with
  U = softmax_r(e_z . g_r) (p(r | z_{t-1})), V = softmax_z(f_z . g_r) (p(z_t | r)), and the emission
  W[x, r] = p(x | r) carried by the rank components (from h_E(g_r)); the first state comes through
  the same factor from a start distribution over a virtual z_0. Inference: RankSpaceChain, the DP
  runs over rank nodes, O(N R^2 + T R^2); N x N is never built.
* ``randomized``: the softmax HMM of ``exact``, trained with the randomized forward (Fu et al.
  2022, Alg. 1) keeping K1 top + K2 sampled states per position under the local+global proposal
  (Eq. 34). In eval mode the exact forward runs whenever N <= ``exact_max_states``; otherwise the
  randomized estimate (log of an unbiased estimate of p(x)) is returned, see ``evaluation_is_exact``.

Regularization (training mode only; eval mode always uses the full model):

* ``dropout``: inside the residual MLPs (and on the rank embeddings g_r, Yang et al. 2022 App. D).
* ``state_dropout`` p (Chiu & Rush 2020; Chiu et al. 2021): per training batch, a uniformly random
  subset of round((1 - p) N) states (at least 1, shared by the whole batch) is kept and the others
  are removed: the start, transition (and rank-space V) distributions are renormalized over the
  kept states, i.e. the batch is scored by the sub-HMM on the kept states. This equals setting the
  dropped states' start and transition logits to -inf, and is cheaper.
* ``feature_dropout`` p (low-rank and rank-space only): the same on the R features / rank
  components: a random subset of round((1 - p) R) of them is kept per batch and the transition rows
  (low-rank) or p(r | z) (rank-space) are renormalized over it.

Initialization (``initialization``):

* ``"embeddings"`` (the default): the state and rank tables Xavier-normal, the word / key tables
  N(0, 1/D), every linear layer PyTorch's default (Kaiming-uniform).
* ``"app-d"``: Yang et al. 2022, App. D, as their released configuration sets it (Xavier-normal,
  the embeddings excepted): every weight matrix of the MLPs and the rank table Xavier-normal, the
  state and word / key embeddings standard normal; the low-rank feature map keeps its orthogonal
  random features. On this parameterization (softmaxes of dot products of embeddings) it starts
  saturated and trains far worse than the default (docs/results.md, "HMM regularizers"): an
  ablation, not a recommendation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.inference import Backend, LinearChain
from zoo.inference.rdp import PROPOSALS
from zoo.models.arguments import (
    RANK_BACKENDS,
    check_int,
    check_probability,
    check_randomized,
    check_rank,
)
from zoo.models.base import ZooModel, decoding, renamed, scoring
from zoo.models.emissions import BernoulliEmission, CategoricalEmission
from zoo.models.evaluation import RandomizedEvaluation
from zoo.models.inputs import batch_inputs, binary_frames, token_ids
from zoo.models.layers import ResidualMLP, embedding_table
from zoo.models.transitions import TRANSITION_HEADS, TRANSITION_LEGACY_KEYS

INITIALIZATIONS = ("embeddings", "app-d")


def _kept_count(total: int, p: float) -> int:
    """How many of ``total`` states / features survive a drop probability p (at least 1)."""
    return max(1, round(total * (1.0 - p)))


class HMM(RandomizedEvaluation, ZooModel):
    """Base class of the neural HMMs; use ``CategoricalHMM`` or ``BernoulliHMM``.

    Subclasses set ``observation_key`` (the batch key of the observations), build
    ``self.emission`` (a module mapping C x D component vectors and the observations to
    log-probabilities B x T x C) and define ``checked(observations, lengths)``: the observations
    checked within each length, padding replaced, and the lengths (``zoo.models.inputs``).

    Cost model: time ~ B T N^2 (exact), B T N R (low-rank), B T R^2 (rank-space), B T (K1 + K2) N
    (randomized), memory ~ B T N plus the N x V emission table: linear in the length, no evaluation
    length limit (``eval_memory``: four to six float32 copies of both).
    """

    exact_evaluation = ("num_states", "exact_max_states")
    legacy_keys = TRANSITION_LEGACY_KEYS

    def eval_memory(self, batch_size: int, length: int) -> int:
        """Four float32 copies of the B x T x N scores and of the N x V emission table, six for the
        Bernoulli emissions (two more products over the keys); docs/training-api.md has the measured
        peaks beside it."""
        words = self.config.get("vocab_size")
        copies, observations = (4, words) if words else (6, self.config["num_keys"])
        return 4 * copies * self.num_states * (batch_size * length + observations)

    observation_key: str = ""

    def __init__(
        self,
        num_states: int,
        backend: str,
        rank: int | None,
        embedding_dim: int,
        hidden_dim: int,
        num_blocks: int,
        dropout: float,
        state_dropout: float,
        feature_dropout: float,
        k1: int | None,
        k2: int | None,
        proposal: str,
        exact_max_states: int,
        initialization: str,
    ):
        super().__init__()
        check_int("num_states", num_states)
        if initialization not in INITIALIZATIONS:
            raise ValueError(f"initialization must be one of {INITIALIZATIONS}, got {initialization!r}")
        self.initialization = initialization
        parsed = Backend.parse(backend)
        for name, value in (("embedding_dim", embedding_dim), ("hidden_dim", hidden_dim)):
            check_int(name, value)
        check_int("num_blocks", num_blocks, low=0)
        for name, value in (
            ("dropout", dropout),
            ("state_dropout", state_dropout),
            ("feature_dropout", feature_dropout),
        ):
            check_probability(name, value)
        check_int("exact_max_states", exact_max_states)
        check_rank(
            parsed,
            rank,
            "the number of features / CPD rank",
            size_name="num_states",
            size=num_states,
            slower="LHMM is slower than the softmax HMM",
        )
        if feature_dropout > 0 and parsed not in RANK_BACKENDS:
            raise ValueError(
                "feature_dropout drops low-rank features / rank components: it needs backend "
                f"'low-rank' or 'rank-space', got {parsed.value!r}"
            )
        check_randomized(
            parsed,
            k1,
            k2,
            proposal,
            proposals=PROPOSALS,
            size_name="num_states",
            limit=_kept_count(num_states, state_dropout),
            limit_reason=f"the states left after state_dropout={state_dropout} of num_states={num_states}",
            unit="per position",
            example="k1 = k2 = num_states // 10",
        )

        self.num_states = num_states
        self.backend = parsed.value
        self.rank = rank
        self.state_dropout = state_dropout
        self.feature_dropout = feature_dropout
        self.k1, self.k2, self.proposal = k1, k2, proposal
        self.exact_max_states = exact_max_states

        D = embedding_dim

        def mlp() -> ResidualMLP:
            return ResidualMLP(D, hidden_dim, num_blocks, dropout)

        self.state_emb = embedding_table(num_states, D)  # e_z: the previous state's role (and the start)
        self.next_state_emb = embedding_table(num_states, D)  # f_z: the next state's role
        self.start_query = nn.Parameter(torch.randn(D) / D**0.5)  # q
        self.start_mlp = mlp()  # h_s
        self.emit_mlp = mlp()  # h_E: component (state or rank) -> emission hidden
        # the backend's transition: softmax, low-rank features or rank-space CPD (zoo.models.transitions)
        self.transition = TRANSITION_HEADS[parsed](D, mlp, rank, dropout, self_transitions=True)

    def _initialize(self) -> None:
        """Apply ``initialization`` (module docstring); subclasses call it once their emission exists."""
        if self.initialization != "app-d":
            return
        for name, parameter in self.named_parameters():
            if parameter.dim() < 2 or name.startswith("transition.feature_map."):
                continue
            if name in ("state_emb", "next_state_emb") or name.startswith("emission."):
                nn.init.normal_(parameter)
            else:
                nn.init.xavier_normal_(parameter)

    # --- subclasses ------------------------------------------------------------------------
    def _emission_log_probs(self, hidden: Tensor, observations: Tensor) -> Tensor:
        """log p(observation at b, t | component c): B x T x C. hidden: C x D."""
        return self.emission(hidden, observations)

    # --- parameters -------------------------------------------------------------------------
    def _subsets(self) -> tuple[Tensor | None, Tensor | None]:
        """The kept state and feature indices of this batch (None: all), drawn in training mode."""
        states = features = None
        if self.training and self.state_dropout > 0:
            n = _kept_count(self.num_states, self.state_dropout)
            states = torch.randperm(self.num_states, device=self.state_emb.device)[:n].sort().values
        if self.training and self.feature_dropout > 0:
            n = _kept_count(self.rank, self.feature_dropout)
            features = torch.randperm(self.rank, device=self.state_emb.device)[:n].sort().values
        return states, features

    def _start_log_probs(self, prev: Tensor) -> Tensor:
        """log p(z_1) (rank-space: log s(z_0)): N. prev: N x D state embeddings e_z."""
        return torch.log_softmax(prev @ self.start_mlp(self.start_query), -1)

    def distributions(self) -> dict[str, Tensor]:
        """The model's normalized distributions over all states (no state / feature dropout).

        Returns for ``exact``, ``low-rank`` and ``randomized``: ``start`` N (p(z_1)),
        ``transition`` N x N (p(z_t = j | z_{t-1} = i); materialized, also for low-rank),
        ``emission`` N x V (log p(w | z)) or N x K (p(x_k = 1 | z)). For ``rank-space``: ``start``
        N (s(z_0)), ``U`` N x R, ``V`` N x R, ``emission`` R x V or R x K (the same, per rank).
        For inspection and tests; call it in eval mode (the MLPs' dropout is active in training).
        """
        prev, nxt = self.state_emb, self.next_state_emb
        components = self.transition.components(prev)
        return {
            "start": self._start_log_probs(prev).exp(),
            **self.transition.distributions(prev, nxt),
            "emission": self.emission.table(self.emit_mlp(components)),
        }

    # --- inference --------------------------------------------------------------------------
    def _observations(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The batch's checked observations (padding replaced) and lengths (``zoo.models.inputs``)."""
        return self.checked(*batch_inputs(self, batch, self.observation_key))

    chain = renamed("chain", "posterior")

    def posterior(self, batch: dict, generator: torch.Generator | None = None) -> LinearChain:
        """The posterior over state sequences p(z | x) of this batch as a ``LinearChain``.

        In training mode with state dropout its states are the kept subset. For ``rank-space`` the
        chain is a RankSpaceChain (log Z over rank nodes; state operations use its state view).
        ``generator`` seeds the randomized backend's index draws.
        """
        observations, lengths = self._observations(batch)
        states, features = self._subsets()
        prev, nxt = self.state_emb, self.next_state_emb
        if states is not None:
            prev, nxt = prev[states], nxt[states]
        start = self._start_log_probs(prev)
        components = self.transition.components(prev, features)  # states, or rank components
        unary = self._emission_log_probs(self.emit_mlp(components), observations)  # B x T x C
        factors = self.transition.chain(unary, start, prev, nxt, components, features)
        return LinearChain(factors, lengths, *self.engine_backend(generator))

    @decoding
    def decode(self, batch: dict) -> Tensor:
        """The most probable state sequence of each sequence (Viterbi, exact for every backend) under the
        whole model (in eval mode, whatever the module's mode): B x T long, -1 past each length."""
        return self.posterior(batch).argmax

    @scoring
    def log_likelihood(self, batch: dict, generator: torch.Generator | None = None) -> Tensor:
        """log p(x) per sequence: (B,). Differentiable in training mode; in eval mode only with
        ``requires_grad=True`` or a batch tensor that requires grad (else it runs under no_grad:
        ``zoo.models.base.scoring``). For ``randomized`` in training (or in eval when not
        ``evaluation_is_exact()``), the log of the unbiased RDP estimate of p(x)."""
        return self.posterior(batch, generator).log_partition

    def forward(self, batch: dict) -> Tensor:
        """Same as ``log_likelihood``: (B,)."""
        return self.log_likelihood(batch)

    @decoding
    def sample(
        self, n: int = 1, max_length: int = 64, generator: torch.Generator | None = None
    ) -> dict[str, Tensor]:
        """``n`` sequences drawn from the model (ancestral sampling, in eval mode), as a batch that
        ``log_likelihood`` scores: ``{observation_key: n x T (x K), "lengths": (n,)}`` and the latent
        ``"states"`` n x T (-1 past each length; 0 past it in the observations). A CategoricalHMM with a
        vocabulary (``vocab``, as ``from_pretrained`` attaches) ends each sequence at its first
        ``<eos>`` (counted in the length); otherwise, and for frames, every sequence has ``max_length``
        positions. No N x N table is formed for low-rank and rank-space (``two_stage``)."""
        check_int("n", n)
        check_int("max_length", max_length)
        prev, by_rank = self.state_emb, self.transition.emits_by_rank
        first, second = self.transition.two_stage(prev, self.next_state_emb)
        table = self.emission.table(self.emit_mlp(self.transition.components(prev))).float()  # C x ...

        def draw(probabilities: Tensor) -> Tensor:  # one index per row: n x M -> (n,)
            return torch.multinomial(probabilities.float(), 1, generator=generator).squeeze(-1)

        z = draw(self._start_log_probs(prev).exp().expand(n, -1))  # z_1, or rank-space's virtual z_0
        end = self._end_id()
        lengths = torch.full((n,), max_length, device=z.device)
        states, observations = [], []
        for t in range(max_length):
            component = z
            if t > 0 or by_rank:  # through the CPD (rank-space) even the first state
                component = draw(first[z])
                z = component if second is None else draw(second[component])
            running = lengths == max_length
            states.append(torch.where(running, z, -1))
            drawn = self._draw_observations(table[component if by_rank else z], generator)
            observations.append(drawn * running.view(n, *[1] * (drawn.dim() - 1)))  # 0 past each length
            if end is not None:
                lengths = torch.where(running & (drawn == end), t + 1, lengths)
                if not bool((lengths == max_length).any()):
                    break
        drawn = {self.observation_key: torch.stack(observations, 1), "lengths": lengths}
        return {**drawn, "states": torch.stack(states, 1)}

    def _draw_observations(self, table: Tensor, generator: torch.Generator | None) -> Tensor:
        """One observation per row of the emitting components' ``table`` rows (``emission.table``)."""
        raise NotImplementedError

    def _end_id(self) -> int | None:
        """The observation that ends a sampled sequence (None: none does)."""
        return None

    def extra_repr(self) -> str:
        extra = f", rank={self.rank}" if self.rank is not None else ""
        if self.k1 is not None:  # randomized
            extra += f", k1={self.k1}, k2={self.k2}, proposal={self.proposal!r}"
        return f"num_states={self.num_states}, backend={self.backend!r}{extra}"


class CategoricalHMM(HMM):
    """A neural HMM over words (language modelling): batch key ``tokens`` B x T long in 0..V-1.

    Args:
        vocab_size: V (including <eos> and <unk>).
        num_states: N.
        backend: "exact", "low-rank", "rank-space" or "randomized" (see the module docstring).
        rank: R, the number of LHMM features (low-rank, at most N) or the CPD rank (rank-space);
            required by those two backends, rejected by the others.
        embedding_dim: D, the size of every embedding (states, words, ranks, features' input).
        hidden_dim: inner width of the residual blocks.
        num_blocks: residual blocks per MLP (2 in the papers).
        dropout: dropout inside the MLPs (and on the rank embeddings).
        state_dropout: probability of dropping each state in a training batch (see module docstring).
        feature_dropout: the same for low-rank features / rank components (those backends only).
        k1, k2: randomized only (required there): states kept exactly (top-K1 of the proposal) and
            sampled (K2) per position; k1 + k2 <= the states left after state dropout.
        proposal: randomized only: "local+global" (Fu et al. 2022, Eq. 34), "local", "global",
            "uniform".
        exact_max_states: randomized only: in eval mode the exact forward runs when
            num_states <= this bound, else the randomized estimate.
        initialization: "embeddings" or "app-d" (Yang et al. 2022, App. D; module docstring).
    """

    card_task_type = "text-generation"

    observation_key = "tokens"

    def __init__(
        self,
        vocab_size: int,
        num_states: int,
        backend: str = "exact",
        rank: int | None = None,
        embedding_dim: int = 256,
        hidden_dim: int = 256,
        num_blocks: int = 2,
        dropout: float = 0.1,
        state_dropout: float = 0.0,
        feature_dropout: float = 0.0,
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local+global",
        exact_max_states: int = 8192,
        initialization: str = "embeddings",
    ):
        check_int("vocab_size", vocab_size)
        super().__init__(
            num_states, backend, rank, embedding_dim, hidden_dim, num_blocks, dropout,
            state_dropout, feature_dropout, k1, k2, proposal, exact_max_states, initialization,
        )  # fmt: skip
        self.vocab_size = vocab_size
        self.emission = CategoricalEmission(vocab_size, embedding_dim)
        self._initialize()

    def checked(self, observations: Tensor, lengths) -> tuple[Tensor, Tensor]:
        """Word ids in 0..V-1 within each length (``zoo.models.inputs.token_ids``)."""
        return token_ids(observations, lengths, self.vocab_size)

    def _draw_observations(self, table, generator):
        """Word ids (n,) from rows of log p(w | component): n x V."""
        return torch.multinomial(table.exp(), 1, generator=generator).squeeze(-1)

    def _end_id(self):
        return None if self.vocab is None else self.vocab.eos_id


class BernoulliHMM(HMM):
    """A neural HMM over binary frames (polyphonic music): batch key ``frames`` B x T x K (0/1),
    factored Bernoulli emissions over K keys (Chiu et al. 2021). Arguments as ``CategoricalHMM``,
    with ``num_keys`` (K, default 88) in place of ``vocab_size``; for rank-space the rank components
    carry the Bernoulli emissions."""

    observation_key = "frames"

    def __init__(
        self,
        num_states: int,
        num_keys: int = 88,
        backend: str = "exact",
        rank: int | None = None,
        embedding_dim: int = 256,
        hidden_dim: int = 256,
        num_blocks: int = 2,
        dropout: float = 0.1,
        state_dropout: float = 0.0,
        feature_dropout: float = 0.0,
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local+global",
        exact_max_states: int = 8192,
        initialization: str = "embeddings",
    ):
        check_int("num_keys", num_keys)
        super().__init__(
            num_states, backend, rank, embedding_dim, hidden_dim, num_blocks, dropout,
            state_dropout, feature_dropout, k1, k2, proposal, exact_max_states, initialization,
        )  # fmt: skip
        self.num_keys = num_keys
        self.emission = BernoulliEmission(num_keys, embedding_dim)
        self._initialize()

    def checked(self, observations: Tensor, lengths) -> tuple[Tensor, Tensor]:
        """Frames of 0 / 1 within each length (``zoo.models.inputs.binary_frames``)."""
        return binary_frames(observations, lengths, self.num_keys)

    def _draw_observations(self, table, generator):
        """Frames n x K of 0 / 1 from rows of p(x_k = 1 | component): n x K."""
        return torch.bernoulli(table, generator=generator)
