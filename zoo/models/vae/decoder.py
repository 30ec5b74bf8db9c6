"""The structured VAE's generative model p(z, y): an autoregressive LSTM over states and words
(Fu et al. 2022, Sec. 4):

    p(z, y) = prod_t p(z_t | z_<t, y_<t) p(y_t | z_<=t, y_<t)
    p(z_t | z_<t, y_<t)    = softmax(MLP_z(h_t))
    p(y_t | z_<=t, y_<t)   = softmax(MLP_y([h_t; s_{z_t}]) . w_y + b)   (tied to the word embeddings)
    h_t = LSTM([w_{y_{t-1}}; s_{z_{t-1}}]) with learned start vectors for y_0 and z_0,

s_i the decoder's own state embeddings (N x d), w_v its word embeddings (V x d). States may be hard
(B x T long) or relaxed one-hot rows (B x T x N float, Gumbel-softmax samples): a relaxed row enters
as sum_i x_t(i) s_i and scores sum_i x_t(i) log p(z_t = i | ...) (Eq. 33's log p(x~(theta), y)).
"""

from __future__ import annotations

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
    """

    def __init__(
        self,
        vocab_size: int,
        num_states: int,
        dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.vocab_size, self.num_states = vocab_size, num_states
        self.word_emb = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.word_emb.weight, std=dim**-0.5)
        self.state_emb = nn.Parameter(torch.randn(num_states, dim) / dim**0.5)
        self.start = nn.Parameter(torch.zeros(2, dim))  # y_0 and z_0
        self.lstm = nn.LSTM(
            2 * dim, hidden_dim, num_layers, batch_first=True, dropout=dropout if num_layers > 1 else 0
        )
        self.dropout = nn.Dropout(dropout)
        self.state_head = nn.Sequential(nn.Linear(hidden_dim, dim), nn.Tanh(), nn.Linear(dim, num_states))
        self.word_head = nn.Sequential(nn.Linear(hidden_dim + dim, dim), nn.Tanh())
        self.word_bias = nn.Parameter(torch.zeros(vocab_size))

    def _state_vectors(self, states: Tensor) -> Tensor:
        if states.dtype == torch.long:
            return self.state_emb[states.clamp_min(0)]
        return states @ self.state_emb

    def log_joint(self, tokens: Tensor, lengths: Tensor, states: Tensor) -> Tensor:
        """log p(z, y) per sequence: (B,).

        Args:
            tokens: B x T word ids (values past each length are ignored).
            lengths: (B,).
            states: B x T long (hard; values past each length ignored) or B x T x N float (relaxed).
        """
        B, T = tokens.shape
        z = self._state_vectors(states)  # B x T x d
        y = self.word_emb(tokens)
        start_y, start_z = (s.expand(B, 1, -1) for s in self.start)
        inputs = torch.cat([torch.cat([start_y, y[:, :-1]], 1), torch.cat([start_z, z[:, :-1]], 1)], -1)
        h, _ = self.lstm(self.dropout(inputs))
        h = self.dropout(h)
        state_log_probs = torch.log_softmax(self.state_head(h), -1)  # B x T x N
        if states.dtype == torch.long:
            state_term = state_log_probs.gather(-1, states.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        else:
            state_term = (states * state_log_probs).sum(-1)
        logits = self.word_head(torch.cat([h, z], -1)) @ self.word_emb.weight.T + self.word_bias  # B x T x V
        word_term = -F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none").view(B, T)
        valid = torch.arange(T, device=tokens.device) < lengths.unsqueeze(-1)
        return torch.where(valid, state_term + word_term, 0.0).sum(-1)

    @torch.no_grad()
    def sample(
        self, n: int, max_length: int, end: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Ancestral samples of p(z, y) (dropout as in the current mode; call it in eval mode): each
        sequence ends with its first ``end`` word or is cut at ``max_length``.

        Returns:
            tokens: n x T long (0 past each length), states: n x T long (-1 past each length), lengths: (n,),
            T <= max_length.
        """
        device = self.word_emb.weight.device
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
            word = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]
            tokens[:, t], states[:, t] = torch.where(running, word, 0), torch.where(running, state, -1)
            lengths = torch.where(running & (word == end), t + 1, lengths)
            running &= word != end
            if not running.any():
                return tokens[:, : t + 1], states[:, : t + 1], lengths
            y = self.word_emb(word)
        return tokens, states, lengths
