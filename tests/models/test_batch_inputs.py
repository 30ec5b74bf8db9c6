"""Every family checks a batch the same way (``zoo.models.inputs``): ``lengths`` first, as a tensor or a
list; word ids of an integer tensor, frames of 0 / 1 and finite features within each length, with errors
that name what was expected and what was given; and whatever lies past each length is ignored."""

from __future__ import annotations

import re

import pytest
import torch

import zoo.models
from zoo.hub.families import family

FAMILIES = ["CategoricalHMM", "BernoulliHMM", "PCFG", "GaussianHSMM", "StructuredVAE"]
TOKEN_FAMILIES = ["CategoricalHMM", "PCFG", "StructuredVAE"]
# values written past each length: none of them may change a score
PADDING = {"tokens": (-1, 10**6), "frames": (7.0, float("nan")), "features": (float("nan"), 1e30)}
# the smartwatch HSMMs standardize each sequence over its length before anything else reads the lengths
EXTRA = {"GaussianHSMM": {"standardize_sequences": True}}


def build(name: str):
    """A tiny eval-mode model of the family, its ragged example batch (lengths 5, 3, 4) and its key."""
    torch.manual_seed(0)
    spec = family(name)
    model = getattr(zoo.models, name)(**spec.test_sizes, **EXTRA.get(name, {})).eval()
    if getattr(model, "input_projection", None) is not None:
        dims = model.input_projection.input_dim, model.input_projection.output_dim
        model.input_projection.set(torch.zeros(dims[0]), torch.eye(*dims))
    batch = spec.example_batch(model, torch.Generator().manual_seed(0))
    return model, batch, getattr(model, "observation_key", "tokens")


def score(model, batch):
    return model.log_likelihood(batch, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", FAMILIES)
def test_lengths_are_checked_first_and_may_be_a_list(name):
    model, batch, _ = build(name)
    as_list = {**batch, "lengths": batch["lengths"].tolist()}
    torch.testing.assert_close(score(model, as_list), score(model, batch))
    with pytest.raises(ValueError, match=re.escape("lengths must have shape (B,) = (3,), got (2,)")):
        score(model, {**batch, "lengths": torch.tensor([5, 3])})
    with pytest.raises(ValueError, match=re.escape("lengths must have shape (B,) = (3,), got (1,)")):
        score(model, {**batch, "lengths": [5]})
    with pytest.raises(ValueError, match=re.escape("lengths must lie in 1..T = 1..5, got [9, 3, 4]")):
        score(model, {**batch, "lengths": torch.tensor([9, 3, 4])})
    with pytest.raises(ValueError, match=re.escape("lengths must be integers, got [4.5, 3.0, 4.0]")):
        score(model, {**batch, "lengths": torch.tensor([4.5, 3, 4])})


@pytest.mark.parametrize("name", FAMILIES)
def test_an_empty_batch_is_named(name):
    """B = 0 was a torch reduction error (the PCFG) or named an internal tensor (``unary``)."""
    model, batch, key = build(name)
    empty = {key: batch[key][:0], "lengths": batch["lengths"][:0]}
    with pytest.raises(ValueError, match=rf"{name} got an empty batch: batch\['{key}'\] has shape \(0, "):
        score(model, empty)


@pytest.mark.parametrize("name", FAMILIES)
def test_padding_contents_do_not_matter(name):
    model, batch, key = build(name)
    expected = score(model, batch)
    T = batch[key].shape[1]
    past = torch.arange(T) >= batch["lengths"].unsqueeze(-1)  # B x T
    if batch[key].dim() == 3:
        past = past.unsqueeze(-1)
    for value in PADDING[key]:
        padded = batch[key].masked_fill(past, value)
        torch.testing.assert_close(score(model, {**batch, key: padded}), expected)


@pytest.mark.parametrize("name", TOKEN_FAMILIES)
def test_token_ids_are_checked_alike(name):
    model, batch, _ = build(name)
    tokens, lengths = batch["tokens"], batch["lengths"]
    for dtype in (torch.bool, torch.float32):
        with pytest.raises(TypeError, match=f"tokens must be an integer tensor, got {dtype}"):
            score(model, {**batch, "tokens": tokens.to(dtype)})
    one_dimensional = re.escape("tokens must have shape B x T (a batch of id sequences), got (5,)")
    with pytest.raises(ValueError, match=one_dimensional):
        score(model, {"tokens": tokens[0], "lengths": lengths[:1]})
    inside = tokens.clone()
    inside[1, 2] = -1  # the last token of the second sequence (length 3): inside its length
    message = (
        "token ids must lie in 0..16 (0..vocab_size-1) within each length, "
        "got -1 at sequence 1, position 2"
    )
    with pytest.raises(ValueError, match=re.escape(message) + ".*padding past a length may hold anything"):
        score(model, {**batch, "tokens": inside})
    assert torch.equal(tokens.int().long(), tokens)
    torch.testing.assert_close(score(model, {**batch, "tokens": tokens.int()}), score(model, batch))


@pytest.mark.parametrize("value", [2.0, -1.0, 0.5, float("nan")])
def test_bernoulli_frames_must_be_zero_or_one(value):
    model, batch, _ = build("BernoulliHMM")
    frames = batch["frames"].clone()
    frames[2, 3, 1] = value  # inside the third sequence (length 4)
    message = (
        f"frames must hold 0 or 1 (a key off or on) within each length, got {value} at sequence 2, frame 3, "
        "key 1"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        score(model, {**batch, "frames": frames})
    assert score(model, {**batch, "frames": batch["frames"].bool()}).isfinite().all()


def test_hsmm_names_non_finite_features_within_lengths():
    model, batch, _ = build("GaussianHSMM")
    features = batch["features"].clone()
    features[1, 2, 0] = float("inf")
    message = "must be finite within each length, got NaN or inf in sequences [1]"
    with pytest.raises(ValueError, match=re.escape(message)):
        score(model, {**batch, "features": features})


def test_hsmm_finite_features_whose_sum_overflows_are_not_called_non_finite():
    """The finite check is one reduction (``checks.all_finite``: min and max, not a sum, which would
    overflow here): huge finite frames pass (the per-sequence projection standardizes them)."""
    model, batch, _ = build("GaussianHSMM")
    features = batch["features"].clone()
    features[0, :2] = torch.finfo(features.dtype).max / 2  # finite frames; their sum overflows
    assert not torch.isfinite(features.sum())
    assert score(model, {**batch, "features": features}).isfinite().all()


def test_pcfg_names_the_lengths_given():
    model, batch, _ = build("PCFG")
    tokens = batch["tokens"][:1, :4]
    with pytest.raises(ValueError, match=re.escape("lengths must lie in 1..T = 1..4, got [10]")):
        score(model, {"tokens": tokens, "lengths": torch.tensor([10])})
    with pytest.raises(ValueError, match=re.escape("lengths must be integers, got [6.5]")):
        score(model, {"tokens": tokens, "lengths": torch.tensor([6.5])})


def test_pcfg_samples_decode_and_score_with_their_padding():
    from zoo.data.vocab import Vocabulary

    model, _, _ = build("PCFG")
    model.vocab = Vocabulary(["<eos>"] + [f"w{i}" for i in range(1, model.vocab_size)], unk=None)
    words, _ = model.sample([2, 5], n=1, generator=torch.Generator().manual_seed(0))
    words = words[0]  # 2 x 5, -1 past the first sentence's 2 words
    assert (words[0, 2:] == -1).all()
    assert len(model.vocab.decode(words[0])) == 2
    tokens = torch.cat([words, torch.full((2, 1), -1)], 1)  # room for <eos>
    n = torch.tensor([2, 5])
    tokens[torch.arange(2), n] = model.vocab.eos_id
    sampled = {"tokens": tokens, "lengths": n + 1}  # -1 padding past the first sentence's <eos>
    scores = model.log_likelihood(sampled)
    clean = {"tokens": tokens.clamp(min=0), "lengths": n + 1}
    torch.testing.assert_close(scores, model.log_likelihood(clean))
    trees, lengths = model.parse(sampled)
    assert lengths.tolist() == [2, 5]


# what a user asks of each family, each reading a batch or drawing from the model
USES = {
    "CategoricalHMM": ["log_likelihood", "decode", "posterior"],
    "BernoulliHMM": ["log_likelihood", "decode", "posterior"],
    "PCFG": ["log_likelihood", "parse", "posterior", "sample"],
    "GaussianHSMM": ["log_likelihood", "segment", "posterior"],
    "StructuredVAE": ["log_likelihood", "decode", "posterior", "elbo", "sample"],
}


@pytest.mark.parametrize("name", FAMILIES)
def test_a_float16_model_is_told_what_to_use(name):
    """A model in float16 (model.half()) is refused by name at every use, with the dtypes that work;
    not by the engine's message about one of its internal tensors."""
    model, batch, key = build(name)
    model.half()
    batch = {k: v.half() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in batch.items()}
    refused = rf"the {name} has float16 parameters .*model\.float\(\).*bfloat16"
    for use in USES[name]:
        arguments = ([3] if name == "PCFG" else 2) if use == "sample" else batch
        with pytest.raises(TypeError, match=refused):
            getattr(model, use)(arguments)
