"""``CRF``: a linear-chain CRF layer with learned transition scores, on the exact chain engine.

It has pytorch-crf's interface and parameters (``torchcrf.CRF``: the same constructor, the same
``start_transitions``, ``end_transitions`` and ``transitions``, so its state dict loads), and adds
what that layer lacks: the tag marginals, the whole ``LinearChain`` distribution (entropy,
sampling, pairwise marginals), transition constraints (BIO / BIOES schemes, see
``transition_constraints``), float32 answers for float16 / bfloat16 emissions (autocast), any
value at padded positions of ``tags`` (e.g. -100) and clear errors on bad input.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor, nn

from zoo.inference.chain.distribution import LinearChain
from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import ZeroProbability

REDUCTIONS = ("none", "sum", "mean", "token_mean")


class CRF(nn.Module):
    """A linear-chain conditional random field over ``num_tags`` tags (Lafferty et al. 2001).

    A tag sequence y_1..y_L of emission scores e (L x num_tags) scores
    ``start[y_1] + sum_t e_t[y_t] + sum_{t>=2} transitions[y_{t-1}, y_t] + end[y_L]``.

    Args:
        num_tags: the number of tags N.
        batch_first: inputs are B x T (x N) when True, T x B (x N) otherwise (pytorch-crf's default).
        allowed_transitions: optional N x N bool, False where tag i may not be followed by tag j.
        allowed_start: optional N bool, False where a sequence may not start with the tag.
        allowed_end: optional N bool, False where a sequence may not end with the tag.
            Forbidden scores are -inf: no decoded path, marginal or sample uses them, and a gold
            sequence that does is an error. ``transition_constraints(labels, scheme)`` gives the
            three for BIO / BIOES tag sets.

    Masks are B x T (or T x B) bool or 0/1 tensors of left-aligned padding: each row ones, then
    zeros, and at least the first position on. Emissions in float16 or bfloat16 are computed in
    float32 (the parameters' dtype, or a wider one of the emissions).
    """

    def __init__(
        self,
        num_tags: int,
        batch_first: bool = False,
        allowed_transitions: Tensor | None = None,
        allowed_start: Tensor | None = None,
        allowed_end: Tensor | None = None,
    ):
        if isinstance(num_tags, bool) or not isinstance(num_tags, numbers.Integral) or num_tags <= 0:
            raise ValueError(f"num_tags must be a positive int, got {num_tags!r}")
        num_tags = int(num_tags)
        super().__init__()
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        # not persistent: the state dict keeps pytorch-crf's three keys; constraints are arguments
        self.register_buffer(
            "allowed_transitions",
            _allowed("allowed_transitions", allowed_transitions, (num_tags,) * 2),
            persistent=False,
        )
        self.register_buffer(
            "allowed_start", _allowed("allowed_start", allowed_start, (num_tags,)), persistent=False
        )
        self.register_buffer(
            "allowed_end", _allowed("allowed_end", allowed_end, (num_tags,)), persistent=False
        )
        if not _some_length_allowed(self.allowed_start, self.allowed_transitions, self.allowed_end):
            raise ValueError(
                "the constraints allow no tag sequence of any length: no path from an allowed start tag "
                "through allowed transitions reaches an allowed end tag"
            )
        masks = (self.allowed_transitions, self.allowed_start, self.allowed_end)
        self.constrained = not all(bool(allowed.all()) for allowed in masks)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Scores drawn uniformly from [-0.1, 0.1], as pytorch-crf does."""
        for score in (self.start_transitions, self.end_transitions, self.transitions):
            nn.init.uniform_(score, -0.1, 0.1)

    def extra_repr(self) -> str:
        constrained = ", constrained" if self.constrained else ""
        return f"num_tags={self.num_tags}, batch_first={self.batch_first}{constrained}"

    def forward(
        self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None, reduction: str = "sum"
    ) -> Tensor:
        """The log-likelihood log p(tags | emissions): (B,) for reduction "none"; else a scalar, its
        "sum", "mean" over sequences or "token_mean" (the sum over the mask's tokens).

        emissions: T x B x N (B x T x N if batch_first); tags: T x B (B x T) integer tags, any value
        where the mask is off; mask: T x B (B x T), None for full length.
        """
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        emissions, lengths = self._batch_major(emissions, mask)
        tags = self._checked_tags(tags, lengths, emissions.shape[1])
        if len(lengths) == 0:  # an empty batch, as pytorch-crf: sum 0, mean NaN, and a graph to backward
            empty_parameters = sum(p[:0].sum() for p in self.parameters())  # 0, with their gradients
            log_likelihood = emissions.sum((1, 2)) + empty_parameters
        else:
            log_likelihood = self._explained(emissions, lengths, lambda chain: chain.log_prob(tags))
        if reduction == "none":
            return log_likelihood
        if reduction == "sum":
            return log_likelihood.sum()
        if reduction == "mean":
            return log_likelihood.mean()
        return log_likelihood.sum() / lengths.sum()

    def decode(self, emissions: Tensor, mask: Tensor | None = None) -> list[list[int]]:
        """The most probable tag sequence of each sequence (Viterbi): B lists of its length."""
        emissions, lengths = self._batch_major(emissions, mask)
        with torch.no_grad():
            if len(lengths) == 0:
                return []
            best = self._explained(emissions, lengths, lambda chain: chain.argmax)
        return [row[:length] for row, length in zip(best.tolist(), lengths.tolist())]

    def marginals(self, emissions: Tensor, mask: Tensor | None = None) -> Tensor:
        """p(y_t = i | emissions): T x B x N (B x T x N if batch_first), zero where the mask is off."""
        emissions, lengths = self._batch_major(emissions, mask)
        if len(lengths) == 0:
            marginals = emissions.new_zeros(emissions.shape)
        else:
            marginals = self._explained(emissions, lengths, lambda chain: chain.marginals)
        return marginals if self.batch_first else marginals.transpose(0, 1)

    def distribution(self, emissions: Tensor, mask: Tensor | None = None) -> LinearChain:
        """The ``LinearChain`` of p(tags | emissions), batch-major (B x T) whatever the layer's
        layout: every engine operation (``log_partition``, ``marginals``, ``pairwise_marginals``,
        ``entropy``, ``log_prob``, ``argmax``, ``max_score``, ``sample``, ``rsample``)."""
        return self._chain(*self._batch_major(emissions, mask))

    def _chain(self, emissions: Tensor, lengths: Tensor) -> LinearChain:
        """The chain of B x T x N emissions and (B,) lengths: the end scores join each last unary."""
        T = emissions.shape[1]
        last = torch.arange(T, device=emissions.device) == (lengths - 1).unsqueeze(-1)  # B x T
        start, end, transitions = self.start_transitions, self.end_transitions, self.transitions
        if self.constrained:  # -inf where forbidden: no gradient flows there
            start = start.masked_fill(~self.allowed_start, float("-inf"))
            end = end.masked_fill(~self.allowed_end, float("-inf"))
            transitions = transitions.masked_fill(~self.allowed_transitions, float("-inf"))
        dtype = emissions.dtype
        unary = torch.where(last.unsqueeze(-1), emissions + end.to(dtype), emissions)
        return LinearChain(DenseChain(unary, transitions.to(dtype), start.to(dtype)), lengths)

    def _explained(self, emissions: Tensor, lengths: Tensor, operation):
        """``operation(chain)``, where a sequence with no allowed tag sequence is an error naming it."""
        try:
            return operation(self._chain(emissions, lengths))
        except ZeroProbability:
            dead = self._without_path(emissions, lengths)
            raise ValueError(
                f"sequences {dead} (lengths {lengths[dead].tolist()}) have no tag sequence of non-zero "
                "probability: the constraints allow none of that length, or the emissions are -inf for "
                "every tag they allow at some position"
            ) from None

    def _without_path(self, emissions: Tensor, lengths: Tensor) -> list[int]:
        """The sequences no allowed tag sequence with finite emissions covers (boolean forward)."""
        allowed = self.allowed_transitions.float()
        reach = self.allowed_start & torch.isfinite(emissions[:, 0])  # B x N
        alive = []
        for t in range(emissions.shape[1]):
            if t:
                reach = ((reach.float() @ allowed) > 0) & torch.isfinite(emissions[:, t])
            alive.append((reach & self.allowed_end).any(-1))
        ends = torch.stack(alive, 1).gather(1, (lengths - 1).unsqueeze(-1)).squeeze(-1)
        return (~ends).nonzero().flatten().tolist()

    # --- input checks ------------------------------------------------------------------------
    def _batch_major(self, emissions: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """B x T x N emissions in the computing dtype and (B,) lengths from the mask."""
        if not isinstance(emissions, Tensor) or not emissions.is_floating_point():
            raise TypeError(f"emissions must be a floating-point tensor, got {_described(emissions)}")
        if emissions.dim() != 3 or emissions.shape[2] != self.num_tags:
            layout = "B x T x N" if self.batch_first else "T x B x N"
            raise ValueError(
                f"emissions must have shape {layout} with N = num_tags = {self.num_tags}, "
                f"got {tuple(emissions.shape)}"
            )
        if not self.batch_first:
            emissions = emissions.transpose(0, 1)
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        if torch.finfo(dtype).bits < 32:
            dtype = torch.float32
        emissions = emissions.to(dtype)
        B, T, _ = emissions.shape
        if mask is None:
            lengths = torch.full((B,), T, dtype=torch.long, device=emissions.device)
        else:
            lengths = self._lengths(mask, B, T)
        return self._finite(emissions, lengths), lengths

    @staticmethod
    def _finite(emissions: Tensor, lengths: Tensor) -> Tensor:
        """The emissions, NaN or +inf past each length set to 0; raises where the mask is on."""
        if emissions.numel() == 0 or bool(emissions.amax() < float("inf")):  # one reduction: no NaN or +inf
            return emissions
        bad = torch.isnan(emissions) | (emissions == float("inf"))
        valid = torch.arange(emissions.shape[1], device=lengths.device) < lengths.unsqueeze(-1)
        inside = (bad & valid.unsqueeze(-1)).any(-1)
        if bool(inside.any()):
            b, t = inside.nonzero()[0].tolist()
            raise ValueError(
                f"emissions must not be NaN or +inf where the mask is on: sequence {b}, position {t}"
            )
        return emissions.masked_fill(bad, 0.0)

    def _lengths(self, mask: Tensor, B: int, T: int) -> Tensor:
        """(B,) lengths of a left-aligned B x T (or T x B) mask, checked."""
        expected = (B, T) if self.batch_first else (T, B)
        if not isinstance(mask, Tensor) or tuple(mask.shape) != expected:
            raise ValueError(
                f"mask must have shape {'B x T' if self.batch_first else 'T x B'} = {expected} "
                f"like the emissions' first two dimensions, got {_described(mask)}"
            )
        if mask.is_floating_point() or mask.is_complex():
            raise TypeError(f"mask must be a bool or integer tensor of 0 and 1, got {mask.dtype}")
        mask = mask if self.batch_first else mask.transpose(0, 1)
        if mask.dtype != torch.bool:
            if ((mask != 0) & (mask != 1)).any():
                raise ValueError("mask must hold only 0 and 1")
            mask = mask.bool()
        lengths = mask.sum(-1)
        prefix = torch.arange(T, device=mask.device) < lengths.unsqueeze(-1)
        if (lengths == 0).any():
            raise ValueError(
                f"mask of the first position must be on in every sequence: sequence "
                f"{int((lengths == 0).nonzero()[0])} is empty"
            )
        if (mask != prefix).any():
            b = int((mask != prefix).any(-1).nonzero()[0])
            raise ValueError(
                "mask must be left-aligned padding (ones, then zeros, in each sequence): sequence "
                f"{b} is {mask[b].int().tolist()}"
            )
        return lengths

    def _checked_tags(self, tags: Tensor, lengths: Tensor, T: int) -> Tensor:
        """B x T long tags, 0 where the mask is off; in 0..N-1 and allowed by the constraints."""
        B = lengths.shape[0]
        expected = (B, T) if self.batch_first else (T, B)
        if not isinstance(tags, Tensor) or tags.is_floating_point() or tags.dtype == torch.bool:
            raise TypeError(f"tags must be an integer tensor, got {_described(tags)}")
        if tuple(tags.shape) != expected:
            raise ValueError(
                f"tags must have shape {'B x T' if self.batch_first else 'T x B'} = {expected} like "
                f"the emissions' first two dimensions, got {tuple(tags.shape)}"
            )
        tags = tags if self.batch_first else tags.transpose(0, 1)
        valid = torch.arange(T, device=tags.device) < lengths.unsqueeze(-1)
        tags = torch.where(valid, tags.long(), 0)
        outside = (tags < 0) | (tags >= self.num_tags)
        if outside.any():
            b, t = outside.nonzero()[0].tolist()
            raise ValueError(
                f"tags must lie in 0..num_tags-1 = 0..{self.num_tags - 1} where the mask is on: "
                f"sequence {b}, position {t} has {int(tags[b, t])}"
            )
        if self.constrained:
            self._check_allowed(tags, valid, lengths)
        return tags

    def _check_allowed(self, tags: Tensor, valid: Tensor, lengths: Tensor) -> None:
        """Raise where a gold sequence starts, moves or ends where the constraints forbid it."""
        first, last = tags[:, 0], tags.gather(1, (lengths - 1).unsqueeze(-1)).squeeze(-1)
        for what, ends, allowed in (("starts", first, self.allowed_start), ("ends", last, self.allowed_end)):
            bad = ~allowed[ends]
            if bad.any():
                b = int(bad.nonzero()[0])
                raise ValueError(
                    f"tags: sequence {b} {what} with tag {int(ends[b])}, which the constraints forbid"
                )
        bad = ~self.allowed_transitions[tags[:, :-1], tags[:, 1:]] & valid[:, 1:]
        if bad.any():
            b, t = bad.nonzero()[0].tolist()
            raise ValueError(
                f"tags: sequence {b} moves from tag {int(tags[b, t])} to tag {int(tags[b, t + 1])} "
                f"at position {t + 1}, which the constraints forbid"
            )


def _allowed(name: str, value: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """A bool constraint mask of the given shape (all True when None), checked."""
    if value is None:
        return torch.ones(shape, dtype=torch.bool)
    value = torch.as_tensor(value)
    if value.dtype != torch.bool or tuple(value.shape) != shape:
        raise ValueError(f"{name} must be a bool tensor of shape {shape}, got {_described(value)}")
    return value.clone()


def _some_length_allowed(start: Tensor, transitions: Tensor, end: Tensor) -> bool:
    """Whether some tag sequence starts, moves and ends as allowed: the tags reachable after each number
    of steps, until they repeat (boolean N-vectors; at most 2^N sets, in practice a few)."""
    reach, seen = start, set()
    while (key := tuple(reach.tolist())) not in seen:
        if bool((reach & end).any()):
            return True
        seen.add(key)
        reach = (reach.float() @ transitions.float()) > 0
    return False


def _described(value) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__}"
