"""``StructuredVAE``: a GPT-2 encoder, a CRF inference network over N latent states and an LSTM
decoder, trained by the ELBO with relaxed samples (Fu et al. 2022, Sec. 4 and 5.2).

* encoder: ``transformers.GPT2Model``: the pretrained ``pretrained_encoder`` (e.g. "gpt2", GPT-2
  base as in the paper; needs the Hugging Face Hub or its local cache) or, with ``None``, a randomly
  initialised ``GPT2Config`` of ``encoder_layers`` x ``encoder_dim`` (``encoder_heads`` heads); its
  last hidden states are projected to r_t (B x T x D);
* q(z | y): ``CRFInferenceNetwork`` (backends exact, randomized, low-rank; see there);
* p(z, y): ``LSTMDecoder``;
* training objective (Eq. 32-33): ELBO = log p(x~, y) + H(q), x~ a relaxed sample of q (Gumbel-FFBS
  for exact / low-rank, randomized Gumbel backward sampling, Alg. 4, for randomized), H(q) exact or
  by the randomized entropy DP (Alg. 3); gradients reach the encoder through x~ and H;
* evaluation: log p(y) by importance sampling with q (computed exactly) as the proposal,
  ``eval_samples`` samples (100 by default, as Gumbel-CRF and RDP report).

Batches: ``{"tokens": B x T long (ids in 0..vocab_size-1), "lengths": B}`` (``zoo.data.CaptionsDataModule``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.extras import imported
from zoo.inference import LinearChain
from zoo.models.arguments import check_int, check_positive, check_probability
from zoo.models.base import ZooModel, decoding, gradients_in_evaluation, scoring, weights_will_follow
from zoo.models.inputs import batch_inputs, token_ids
from zoo.models.vae.decoder import LSTMDecoder
from zoo.models.vae.importance import ImportanceEstimates, importance_sampled_estimates
from zoo.models.vae.inference_network import CRFInferenceNetwork

GPT2_VOCAB_SIZE = 50257
# GPT2Config fields that change the encoder's computation (dropout aside): a pretrained encoder must have
# the values the arguments give, so that a saved model rebuilds it from its arguments alone.
ARCHITECTURE_FIELDS = (
    "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
    "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
)  # fmt: skip


def build_gpt2_encoder(
    pretrained: str | None,
    vocab_size: int,
    layers: int,
    dim: int,
    heads: int,
    max_positions: int,
    dropout: float,
) -> nn.Module:
    """A ``transformers.GPT2Model`` of ``layers`` x ``dim`` (``heads`` heads, ``max_positions``):
    ``from_pretrained(pretrained)``, whose configuration must be that one, or random from a ``GPT2Config``
    (also for a pretrained encoder whose weights follow from a zoo checkpoint: no Hub needed)."""
    transformers = imported("transformers", "vae", "the structured VAE's GPT-2 encoder")
    GPT2Config, GPT2Model = transformers.GPT2Config, transformers.GPT2Model

    if pretrained is not None and vocab_size != GPT2_VOCAB_SIZE:
        raise ValueError(
            f"a pretrained GPT-2 encoder reads GPT-2 ids: vocab_size must be 50257, got {vocab_size}"
        )
    if dim % heads:
        raise ValueError(f"encoder_dim must be a multiple of encoder_heads, got {dim} and {heads}")
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=max_positions, n_embd=dim, n_layer=layers, n_head=heads,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
        bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1,  # GPT-2's <|endoftext|> at 50257
    )  # fmt: skip
    if pretrained is None or weights_will_follow():
        return GPT2Model(config)
    try:
        encoder = GPT2Model.from_pretrained(
            pretrained, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout
        )
    except (OSError, ValueError) as error:  # not on the Hub / in the cache; not a valid repo id
        raise OSError(
            f"could not load the pretrained encoder {pretrained!r} (no Hugging Face Hub access and not "
            "in the local cache?); use pretrained_encoder=None for a randomly initialised GPT2Config "
            f"encoder of encoder_layers x encoder_dim: {error}"
        ) from None
    differ = {k: (getattr(encoder.config, k), getattr(config, k)) for k in ARCHITECTURE_FIELDS}
    differ = {k: v for k, v in differ.items() if v[0] != v[1]}
    if differ:
        loaded = encoder.config
        raise ValueError(
            f"the pretrained encoder {pretrained!r} is not the GPT-2 the arguments describe ((its value, "
            f"the arguments') of {differ}): set encoder_layers={loaded.n_layer}, "
            f"encoder_dim={loaded.n_embd}, encoder_heads={loaded.n_head}, max_positions={loaded.n_positions} "
            "(the arguments rebuild the encoder of a saved model without the Hub; other GPT-2 settings must "
            "be the defaults)"
        )
    return encoder


class StructuredVAE(ZooModel):
    """The GPT-2-encoded structured VAE (see the module docstring).

    Cost model: the encoder's attention ~ B T^2 a layer, q's chain B T N^2 (exact), the importance-
    sampled evaluation ``eval_samples`` x B T N; sequences are limited by ``max_positions``
    (``eval_memory``).

    Args:
        num_states: N, the latent states of the CRF (100 and 2000 in the paper).
        backend: "exact", "randomized" or "low-rank" of q ("rank-space" raises an error saying why not).
        k1, k2: randomized only: top-K1 + K2 sampled states per position (paper: 10% N each; k2 = 0 is top-K).
        proposal: randomized only: "local+global" (Eq. 34), "local", "global", "uniform".
        rank: low-rank only: R features.
        vocab_size: V, the word ids (GPT-2's 50257; smaller only with a random encoder, for tests).
        pretrained_encoder: a GPT-2 name or path for ``GPT2Model.from_pretrained``, or None (random).
        encoder_layers, encoder_dim, encoder_heads, max_positions: the random encoder's ``GPT2Config``.
        state_dim: D, the CRF state embeddings (and r_t).
        decoder_dim, decoder_hidden, decoder_layers: the LSTM decoder (embeddings, hidden size, layers).
        decoder_vocab: K < V: the decoder scores the K most frequent training ids one by one and pools
            the rest in one class spread uniformly over them (``LSTMDecoder``'s shortlist, fitted by
            ``zoo fit`` from the training split and saved with the weights); None: all V ids.
        dropout: encoder and decoder dropout (training mode only).
        word_dropout: decoder word dropout (``LSTMDecoder``; training mode only): a guard against
            posterior collapse.
        temperature: of the relaxed samples.
        straight_through: train on hard samples: the decoder reads the exact sample's one-hot rows
            (the argmax of the relaxed ones) and the gradients flow through the relaxed rows (the
            straight-through Gumbel-CRF, Fu et al. 2020). The training ELBO is then the one evaluation
            measures; with relaxed rows (False) the decoder learns to use mixtures of states that no
            sample of q gives, and its relaxed ELBO overstates the true one.
        eval_samples: importance samples of ``log_likelihood``.
        eval_chunk_tokens: tokens the decoder scores at once while importance sampling (memory bound).
    """

    card_task_type = "text-generation"
    # the low-rank head took the feature map over in checkpoint format 3
    legacy_keys = {"inference.feature_map": "inference.transition.feature_map"}

    def eval_memory(self, batch_size: int, length: int) -> int:
        """Four float32 copies of the importance samples' B x T x N scores (``eval_samples`` of them)
        and of N x N, of the decoder's ``eval_chunk_tokens`` x V logits (V: the shortlist, if any) and
        of the encoder's attention, B x heads x T x T a layer; docs/training-api.md has the measured
        peaks beside it."""
        c = self.config
        vocab = c.get("decoder_vocab") or self.vocab_size
        attention = c["encoder_layers"] * c["encoder_heads"] * length * length
        samples = self.eval_samples * length * self.num_states
        return 16 * (batch_size * (samples + attention) + self.num_states**2 + self.eval_chunk_tokens * vocab)

    def __init__(
        self,
        num_states: int = 100,
        backend: str = "exact",
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local+global",
        rank: int | None = None,
        vocab_size: int = GPT2_VOCAB_SIZE,
        pretrained_encoder: str | None = None,
        encoder_layers: int = 2,
        encoder_dim: int = 128,
        encoder_heads: int = 2,
        max_positions: int = 1024,
        state_dim: int = 128,
        decoder_dim: int = 128,
        decoder_hidden: int = 256,
        decoder_layers: int = 1,
        decoder_vocab: int | None = None,
        dropout: float = 0.1,
        word_dropout: float = 0.0,
        temperature: float = 1.0,
        straight_through: bool = False,
        eval_samples: int = 100,
        eval_chunk_tokens: int = 1024,
    ):
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size), ("encoder_layers", encoder_layers),
            ("encoder_dim", encoder_dim), ("encoder_heads", encoder_heads),
            ("max_positions", max_positions), ("state_dim", state_dim), ("decoder_dim", decoder_dim),
            ("decoder_hidden", decoder_hidden), ("decoder_layers", decoder_layers),
            ("eval_samples", eval_samples), ("eval_chunk_tokens", eval_chunk_tokens),
        ):  # fmt: skip
            check_int(name, value)
        check_probability("dropout", dropout)
        check_probability("word_dropout", word_dropout)
        check_positive("temperature", temperature)
        if not isinstance(straight_through, bool):
            raise ValueError(f"straight_through must be True or False, got {straight_through!r}")
        self.inference = CRFInferenceNetwork(num_states, state_dim, backend, k1, k2, proposal, rank)
        self.encoder = build_gpt2_encoder(
            pretrained_encoder, vocab_size, encoder_layers, encoder_dim, encoder_heads, max_positions, dropout
        )
        self.project = nn.Linear(self.encoder.config.n_embd, state_dim)
        if decoder_vocab is not None:
            check_int("decoder_vocab", decoder_vocab)
        self.decoder = LSTMDecoder(
            vocab_size, num_states, decoder_dim, decoder_hidden, decoder_layers, dropout, decoder_vocab,
            word_dropout,
        )
        self.num_states, self.backend, self.vocab_size = num_states, self.inference.backend, vocab_size
        self.temperature, self.straight_through = float(temperature), straight_through
        self.eval_samples, self.eval_chunk_tokens = eval_samples, eval_chunk_tokens

    # --- inputs -----------------------------------------------------------------------------
    def _inputs(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The batch's token ids (0 past each length) and lengths, checked (``zoo.models.inputs``)."""
        tokens, lengths = token_ids(*batch_inputs(self, batch, "tokens"), self.vocab_size)
        limit = self.encoder.config.n_positions
        T = tokens.shape[1]
        if T > limit:
            raise ValueError(
                f"sequences of {T} tokens exceed the encoder's {limit} positions (max_positions)"
            )
        return tokens, lengths

    def encode(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """r_t: B x T x D, the projected GPT-2 states."""
        mask = (torch.arange(tokens.shape[1], device=tokens.device) < lengths.unsqueeze(-1)).long()
        hidden = self.encoder(input_ids=tokens, attention_mask=mask).last_hidden_state
        return self.project(hidden)

    def posterior(
        self, batch: dict, generator: torch.Generator | None = None, exact: bool = False
    ) -> LinearChain:
        """q(z | y) of the batch (``exact=True``: computed exactly whatever the backend)."""
        tokens, lengths = self._inputs(batch)
        return self.inference.posterior(self.encode(tokens, lengths), lengths, exact, generator)

    @decoding
    def decode(self, batch: dict) -> Tensor:
        """The most probable state sequence under q(z | y), computed exactly, in eval mode (no dropout in
        the encoder, whatever the module's mode): B x T long, -1 past each length."""
        return self.posterior(batch, exact=True).argmax

    def posterior_summary(self, batch: dict) -> tuple[Tensor, Tensor]:
        """q(z | y)'s marginals (B x T x N, zero past each length) and MAP state sequences (B x T, -1
        past each length), q computed exactly; detached (``gradients_in_evaluation``)."""
        with gradients_in_evaluation(batch) as batch:
            q = self.posterior(batch, exact=True)
            return q.marginals.detach(), q.argmax.detach()

    # --- objectives -------------------------------------------------------------------------
    def elbo(self, batch: dict, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """The ELBO (Eq. 32) per sequence and its parts, each (B,): ``elbo`` = ``reconstruction``
        (log p(x~, y) of one relaxed sample x~ of q) + ``entropy`` (H(q)), and ``reconstruction`` =
        ``states`` (log p(x~)) + ``words`` (log p(y | x~)); all differentiable."""
        tokens, lengths = self._inputs(batch)
        q = self.inference.posterior(self.encode(tokens, lengths), lengths, generator=generator)
        relaxed = q.rsample(self.temperature, generator)  # B x T x N
        if self.straight_through:  # the sample's one-hot rows forward, the relaxed rows' gradients back
            hard = torch.nn.functional.one_hot(relaxed.argmax(-1), self.num_states).to(relaxed.dtype)
            hard = hard * (relaxed.sum(-1, keepdim=True) > 0)  # rows past each length stay zero
            relaxed = hard + relaxed - relaxed.detach()
        states, words = self.decoder.log_joint_parts(tokens, lengths, relaxed)
        reconstruction, entropy = states + words, q.entropy
        return {
            "elbo": reconstruction + entropy,
            "reconstruction": reconstruction,
            "entropy": entropy,
            "states": states,
            "words": words,
        }

    def log_likelihood(
        self, batch: dict, generator: torch.Generator | None = None, *, requires_grad: bool = False
    ) -> Tensor:
        """log p(y) per sequence by importance sampling with q as the proposal: (B,); ``eval_samples``
        samples of q computed exactly (``generator`` seeds them); for eval mode, where it builds no
        autograd graph unless called with ``requires_grad=True`` (``importance_estimates``)."""
        return self.importance_estimates(batch, generator, requires_grad=requires_grad).log_likelihood

    @scoring
    def importance_estimates(
        self, batch: dict, generator: torch.Generator | None = None
    ) -> ImportanceEstimates:
        """log p(y) and the ELBO per sequence from the same ``eval_samples`` exact samples of q (the
        ELBO of hard samples: the bound ``log_likelihood`` tightens, never above it); (B,) each."""
        tokens, lengths = self._inputs(batch)
        q = self.inference.posterior(self.encode(tokens, lengths), lengths, exact=True)

        def log_joint(states: Tensor) -> Tensor:  # S x B x T -> S x B, in chunks of rows
            S, B, T = states.shape
            rows = max(1, self.eval_chunk_tokens // T)
            flat_states = states.reshape(S * B, T)
            flat_tokens, flat_lengths = tokens.repeat(S, 1), lengths.repeat(S)
            parts = [
                self.decoder.log_joint(
                    flat_tokens[i : i + rows], flat_lengths[i : i + rows], flat_states[i : i + rows]
                )
                for i in range(0, S * B, rows)
            ]
            return torch.cat(parts).view(S, B)

        return importance_sampled_estimates(q, log_joint, self.eval_samples, generator)

    def forward(self, batch: dict) -> Tensor:
        """Same as ``log_likelihood``: (B,)."""
        return self.log_likelihood(batch)

    def evaluation_is_exact(self) -> bool:
        """False: ``log_likelihood`` is an importance-sampled estimate."""
        return False

    @decoding
    def sample(
        self,
        n: int = 1,
        max_length: int | None = None,
        generator: torch.Generator | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> dict[str, Tensor]:
        """``n`` sentences from the generative model p(z, y) (ancestral sampling, no dropout), each
        ending with ``<|endoftext|>`` (id vocab_size - 1) or cut at ``max_length`` tokens (None: 64, or
        the encoder's ``max_positions`` if fewer; at most ``max_positions``, which the model can score):
        ``{"tokens": n x T, "lengths": (n,)}`` (a batch: ``log_likelihood`` scores it) and its latent
        ``"states"`` (n x T, -1 past each length). ``temperature`` (> 0) and ``top_p`` (in (0, 1]) shape
        each word's distribution as a language model's generation does (nucleus sampling, Holtzman et
        al. 2020): samples of a small model read as text, but below 1 they are not samples of p(y).
        With a shortlist (``decoder_vocab``), the ids outside it are one class of the decoder's output
        and are shaped as one word: the class is tempered and ranked as a whole, then one of its ids
        drawn uniformly (tempering each of them instead would give the class (V - K)^(1 - 1 /
        temperature) times this weight)."""
        check_int("n", n)
        limit = self.encoder.config.n_positions
        max_length = min(64, limit) if max_length is None else max_length
        check_int("max_length", max_length)
        if max_length > limit:  # such a sample could not be scored (log_likelihood, decode)
            raise ValueError(
                f"max_length must be at most the encoder's {limit} positions (max_positions), "
                f"got {max_length}"
            )
        check_positive("temperature", temperature)
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        eos = self.vocab_size - 1
        tokens, states, lengths = self.decoder.sample(n, max_length, eos, generator, temperature, top_p)
        return {"tokens": tokens, "lengths": lengths, "states": states}

    @decoding
    def sample_states(self, batch: dict, generator: torch.Generator | None = None) -> Tensor:
        """One exact sample of q(z | y) per sequence: B x T long, -1 past each length (for the
        aggregated posterior's state usage)."""
        return self.posterior(batch, exact=True).sample(1, generator)[0]
