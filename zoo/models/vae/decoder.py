"""The structured VAE's generative model p(z, y): an autoregressive LSTM over states and words
(Fu et al. 2022, Sec. 4):

    p(z, y) = prod_t p(z_t | z_<t, y_<t) p(y_t | z_<=t, y_<t)
    p(z_t | z_<t, y_<t)    = softmax(MLP_z(h_t))
    p(y_t | z_<=t, y_<t)   = softmax(MLP_y([h_t; s_{z_t}]) . w_y + b)   (tied to the word embeddings)
    h_t = LSTM([w_{y_{t-1}}; s_{z_{t-1}}]) with learned start vectors for y_0 and z_0,

s_i the decoder's own state embeddings (N x d), w_v its word embeddings (V x d). States may be hard
(B x T long) or relaxed one-hot rows (B x T x N float, Gumbel-softmax samples): a relaxed row enters
as sum_i x_t(i) s_i and scores sum_i x_t(i) log p(z_t = i | ...) (Eq. 33's log p(x~(theta), y)).

Shortlist (``shortlist=K``): the words are scored over K + 1 classes, the K ids of a fitted shortlist
(the training corpus's most frequent ids, ``<|endoftext|>`` among them) and one class for all the
V - K others, spread uniformly over them: p(y) = p(class of y) / (V - K) for an id off the list. The
distribution stays one over all V ids (any text can be scored), the output layer and the embeddings
are (K + 1) x d instead of V x d: on a CPU the V-way softmax is most of the decoder's cost. The list is
a buffer of the model (``word_index``: each id's class), fitted once from the training data's token
counts (``fit_shortlist``) and saved with the weights.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class LSTMDecoder(nn.Module):
    """p(z, y) of one sequence at a time, batched: see the module docstring.

    Args:
        vocab_size: V.
        num_states: N.
        dim: d, the size of the word and state embeddings.
        hidden_dim: the LSTM's hidden size (256 in the paper).
        num_layers: LSTM layers.
        dropout: on the embeddings and the LSTM outputs (training mode only).
        shortlist: K < V, the words scored one by one (module docstring); None: all V.
        word_dropout: in training, each previous word the LSTM reads is replaced by a learned blank
            vector with this probability (Bowman et al. 2016): the decoder must take the context from
            the states, which keeps q(z | y) from collapsing onto one state.
    """

    def __init__(
        self,
        vocab_size: int,
        num_states: int,
        dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        shortlist: int | None = None,
        word_dropout: float = 0.0,
    ):
        super().__init__()
        self.word_dropout = word_dropout
        if shortlist is not None and not 1 <= shortlist < vocab_size:
            raise ValueError(f"shortlist must be in 1..{vocab_size - 1} (below vocab_size), got {shortlist}")
        self.vocab_size, self.num_states, self.shortlist = vocab_size, num_states, shortlist
        classes = vocab_size if shortlist is None else shortlist + 1
        if shortlist is not None:  # -1: not fitted yet
            self.register_buffer("word_index", torch.full((vocab_size,), -1, dtype=torch.long))
        self.word_emb = nn.Embedding(classes, dim)
        nn.init.normal_(self.word_emb.weight, std=dim**-0.5)
        self.state_emb = nn.Parameter(torch.randn(num_states, dim) / dim**0.5)
        self.start = nn.Parameter(torch.zeros(2, dim))  # y_0 and z_0
        if word_dropout > 0:
            self.blank = nn.Parameter(torch.zeros(dim))  # a dropped previous word
        self.lstm = nn.LSTM(
            2 * dim, hidden_dim, num_layers, batch_first=True, dropout=dropout if num_layers > 1 else 0
        )
        self.dropout = nn.Dropout(dropout)
        self.state_head = nn.Sequential(nn.Linear(hidden_dim, dim), nn.Tanh(), nn.Linear(dim, num_states))
        self.word_head = nn.Sequential(nn.Linear(hidden_dim + dim, dim), nn.Tanh())
        self.word_bias = nn.Parameter(torch.zeros(classes))

    @torch.no_grad()
    def fit_shortlist(self, counts: Tensor) -> Tensor:
        """Fit the shortlist from the training data's token counts (V): the K most frequent ids, ties
        to the smaller id, ``<|endoftext|>`` (id V - 1) always among them; returns them (K, sorted)."""
        if self.shortlist is None:
            raise ValueError("this decoder scores every word (shortlist=None): there is no shortlist to fit")
        counts = torch.as_tensor(counts).to(torch.float64).cpu()
        if counts.shape != (self.vocab_size,) or bool((counts < 0).any()):
            raise ValueError(
                f"counts must be {self.vocab_size} non-negative numbers (one per id), got shape "
                f"{tuple(counts.shape)}"
            )
        counts = counts.clone()
        counts[-1] = math.inf  # <|endoftext|> ends every sentence
        ids = torch.argsort(-counts, stable=True)[: self.shortlist].sort().values  # ties: the smaller id
        index = torch.full((self.vocab_size,), self.shortlist, dtype=torch.long)
        index[ids] = torch.arange(self.shortlist)
        self.word_index.copy_(index.to(self.word_index.device))
        return ids

    @property
    def fitted(self) -> bool:
        """Whether the words can be scored: always without a shortlist, after ``fit_shortlist`` with one."""
        return self.shortlist is None or bool((self.word_index >= 0).all())

    def _classes(self, tokens: Tensor) -> Tensor:
        """Each id's output class: itself, or its shortlist position (K for the pooled ids)."""
        if self.shortlist is None:
            return tokens
        if not self.fitted:
            raise RuntimeError(
                f"the decoder's shortlist of {self.shortlist} words has not been fitted: train with zoo fit "
                "(the task fits it on the training split's token counts), load a trained checkpoint, or "
                "call model.decoder.fit_shortlist(counts)"
            )
        return self.word_index[tokens]

    def _pooled_log_mass(self, classes: Tensor, dtype: torch.dtype) -> Tensor:
        """-log(V - K) where a class is the pooled one (its mass spread over V - K ids), else 0."""
        zero = torch.zeros(classes.shape, dtype=dtype, device=classes.device)
        if self.shortlist is None:
            return zero
        return zero.masked_fill(classes == self.shortlist, -math.log(self.vocab_size - self.shortlist))

    def _state_vectors(self, states: Tensor) -> Tensor:
        if states.dtype == torch.long:
            return self.state_emb[states]
        return states.to(self.state_emb.dtype) @ self.state_emb  # relaxed rows: the engine's float32

    def log_joint(self, tokens: Tensor, lengths: Tensor, states: Tensor) -> Tensor:
        """log p(z, y) per sequence: (B,) (arguments as ``log_joint_parts``)."""
        states_term, words_term = self.log_joint_parts(tokens, lengths, states)
        return states_term + words_term

    def log_joint_parts(self, tokens: Tensor, lengths: Tensor, states: Tensor) -> tuple[Tensor, Tensor]:
        """log p(z | ...) and log p(y | z, ...) per sequence, summed over each sequence's positions:
        (B,) each; their sum is log p(z, y).

        Args:
            tokens: B x T word ids (values past each length are ignored).
            lengths: (B,).
            states: B x T long (hard; values past each length ignored) or B x T x N float (relaxed).
        """
        B, T = tokens.shape
        valid = torch.arange(T, device=tokens.device) < lengths.unsqueeze(-1)
        classes = self._classes(torch.where(valid, tokens, 0))  # padding may hold any id
        if states.dtype == torch.long:
            states = torch.where(valid, states, 0)
        z = self._state_vectors(states)  # B x T x d
        y = self.word_emb(classes)
        if self.training and self.word_dropout > 0:
            dropped = torch.rand(B, T, 1, device=y.device) < self.word_dropout
            y = torch.where(dropped, self.blank.to(y.dtype), y)
        start_y, start_z = (s.expand(B, 1, -1) for s in self.start)
        inputs = torch.cat([torch.cat([start_y, y[:, :-1]], 1), torch.cat([start_z, z[:, :-1]], 1)], -1)
        h, _ = self.lstm(self.dropout(inputs))
        h = self.dropout(h)
        state_log_probs = torch.log_softmax(self.state_head(h), -1)  # B x T x N
        if states.dtype == torch.long:
            state_term = state_log_probs.gather(-1, states.unsqueeze(-1)).squeeze(-1)
        else:
            state_term = (states * state_log_probs).sum(-1)
        logits = self.word_head(torch.cat([h, z], -1)) @ self.word_emb.weight.T + self.word_bias  # B x T x C
        word_term = -F.cross_entropy(logits.flatten(0, 1), classes.flatten(), reduction="none").view(B, T)
        word_term = word_term + self._pooled_log_mass(classes, word_term.dtype)
        return torch.where(valid, state_term, 0.0).sum(-1), torch.where(valid, word_term, 0.0).sum(-1)

    @torch.no_grad()
    def sample(
        self,
        n: int,
        max_length: int,
        end: int,
        generator: torch.Generator | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Ancestral samples of p(z, y) (dropout as in the current mode; call it in eval mode): each
        sequence ends with its first ``end`` word or is cut at ``max_length``. Each word is drawn from
        ``nucleus(logits, temperature, top_p)`` (1 and 1: exactly p(y_t | ...)); the states exactly.

        Returns:
            tokens: n x T long (0 past each length), states: n x T long (-1 past each length), lengths: (n,),
            T <= max_length.
        """
        device = self.word_emb.weight.device
        self._classes(torch.zeros(1, dtype=torch.long, device=device))  # a shortlist must be fitted
        if self.shortlist is not None:  # class -> id: the listed ids by position, the pooled ids apart
            listed = self.word_index < self.shortlist
            ids_of = torch.empty(self.shortlist, dtype=torch.long, device=device)
            ids_of[self.word_index[listed]] = listed.nonzero().flatten()
            pooled = (~listed).nonzero().flatten()
        tokens = torch.zeros(n, max_length, dtype=torch.long, device=device)
        states = torch.full((n, max_length), -1, dtype=torch.long, device=device)
        lengths = torch.full((n,), max_length, dtype=torch.long, device=device)
        y, z = (s.expand(n, -1) for s in self.start)
        memory, running = None, torch.ones(n, dtype=torch.bool, device=device)
        for t in range(max_length):
            h, memory = self.lstm(self.dropout(torch.cat([y, z], -1)).unsqueeze(1), memory)
            h = self.dropout(h.squeeze(1))
            state = torch.multinomial(torch.softmax(self.state_head(h), -1), 1, generator=generator)[:, 0]
            z = self.state_emb[state]
            logits = self.word_head(torch.cat([h, z], -1)) @ self.word_emb.weight.T + self.word_bias
            cls = torch.multinomial(nucleus(logits, temperature, top_p), 1, generator=generator)[:, 0]
            word = cls
            if self.shortlist is not None:  # a listed class is its id; the pooled class a uniform other id
                draw = pooled[torch.randint(len(pooled), (n,), generator=generator, device=device)]
                word = torch.where(cls == self.shortlist, draw, ids_of[cls.clamp_max(self.shortlist - 1)])
            tokens[:, t], states[:, t] = torch.where(running, word, 0), torch.where(running, state, -1)
            lengths = torch.where(running & (word == end), t + 1, lengths)
            running &= word != end
            if not running.any():
                return tokens[:, : t + 1], states[:, : t + 1], lengths
            y = self.word_emb(cls)
        return tokens, states, lengths


def nucleus(logits: Tensor, temperature: float = 1.0, top_p: float = 1.0) -> Tensor:
    """softmax(logits / temperature) cut to its nucleus (Holtzman et al. 2020): the most probable classes
    whose mass first reaches ``top_p``, the rest zeroed (not renormalized: ``torch.multinomial`` does
    that). logits: ... x C; returns ... x C. The most probable class is always kept. The logits are
    shifted to a max of 0 before the division: a temperature of 1e-40 overflowed them to inf (NaN)."""
    probs = torch.softmax((logits - logits.amax(-1, keepdim=True)) / temperature, -1)
    if top_p >= 1.0:
        return probs
    ranked, order = probs.sort(-1, descending=True)
    above = ranked.cumsum(-1) - ranked  # the mass of the classes ranked before each one
    return torch.zeros_like(probs).scatter(-1, order, ranked.masked_fill(above >= top_p, 0.0))
