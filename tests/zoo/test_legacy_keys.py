"""Weights saved before the backend heads (checkpoint formats 1-2, Lightning checkpoints of that time)
load into every family and backend under the heads' names, and score identically; new folders with
the heads' names are written in format 3."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from zoo_testlib import example_batch, scores, small_model

import zoo
from zoo.hub.pretrained import read_config
from zoo.hub.registry import architecture, list_models
from zoo.inference import Backend
from zoo.models.base import renamed_key
from zoo.tasks.likelihood import checked_missing_ok

# one architecture a family, every backend (the VAE's q has no rank-space backend)
CASES = [
    (name, backend.value)
    for name in ("hmm_categorical_n512_d64", "hmm_bernoulli_n256_d64", "pcfg_nt10_pt20_d64",
                 "hsmm_gaussian_n8_dur32_in12_f12_d32", "vae_crf_n100_enc2x64_lstm128_v8000_d56")
    for backend in Backend
    if not (name.startswith("vae") and backend is Backend.RANK_SPACE)
]  # fmt: skip


def old_names(model: zoo.models.ZooModel) -> dict[str, torch.Tensor]:
    """The model's state dict under the names before format 3 (its ``legacy_keys`` inverted)."""
    inverse = {new: old for old, new in model.legacy_keys.items()}
    return {renamed_key(key, inverse): value for key, value in model.state_dict().items()}


def test_the_cases_cover_every_family_and_backend():
    families = {architecture(name).class_path for name in list_models()}
    assert {architecture(name).class_path for name, _ in CASES} == families
    assert len(CASES) == 4 + 4 + 4 + 4 + 3


@pytest.mark.parametrize(("name", "backend"), CASES)
def test_old_names_load_through_load_state_dict_and_a_task_prefix(name, backend):
    """Lightning's checkpoint loading (``model.*`` keys of a task) goes through ``load_state_dict``."""
    torch.manual_seed(0)
    model = small_model(name, backend)
    old = old_names(model)
    torch.manual_seed(1)
    fresh = small_model(name, backend)
    task = nn.Module()
    task.model = fresh
    task.load_state_dict({f"model.{k}": v for k, v in old.items()})
    batch = example_batch(model)
    torch.testing.assert_close(scores(fresh, batch), scores(model, batch), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "backend"), CASES)
def test_a_format_2_folder_with_old_names_loads_and_scores_identically(tmp_path, name, backend):
    torch.manual_seed(0)
    model = small_model(name, backend).eval()
    folder = model.save_pretrained(tmp_path / "model", storage_dtype="float16")
    config = read_config(folder)
    old = old_names(model)
    moved = old.keys() != model.state_dict().keys()  # the exact VAE's keys did not move
    # format 5 where fitted statistics stay in float32 beside the float16 rest (an HSMM's projection)
    assert config["zoo_format_version"] == (5 if model.full_precision_keys else 3 if moved else 2)
    inverse = {new: old for old, new in model.legacy_keys.items()}
    weights = load_file(folder / "model.safetensors")
    save_file({renamed_key(k, inverse): v for k, v in weights.items()}, folder / "model.safetensors")
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    config.update(zoo_format_version=2, weights_sha256=digest)
    (folder / "config.json").write_text(json.dumps(config))
    loaded = zoo.from_pretrained(folder)
    batch = example_batch(model)
    rounded = zoo.from_pretrained(model.save_pretrained(tmp_path / "again", storage_dtype="float16"))
    torch.testing.assert_close(scores(loaded, batch), scores(rounded, batch), rtol=0, atol=0)


def test_families_without_moved_keys_keep_writing_formats_1_and_2(tmp_path):
    model = small_model("vae_crf_n100_enc2x64_lstm128_v8000_d56", "exact")
    assert read_config(model.save_pretrained(tmp_path / "full"))["zoo_format_version"] == 1
    half = model.save_pretrained(tmp_path / "half", storage_dtype="float16")
    assert read_config(half)["zoo_format_version"] == 2


def test_init_missing_ok_takes_old_names():
    model = small_model("vae_crf_n100_enc2x64_lstm128_v8000_d56", "low-rank")
    old, new = "inference.feature_map.weight", "inference.transition.feature_map.weight"
    assert checked_missing_ok([old], model) == [new] == checked_missing_ok([new], model)
    with pytest.raises(ValueError, match=r"init_missing_ok names \['inference.nothing'\]"):
        checked_missing_ok(["inference.nothing"], model)


def test_renamed_key_matches_whole_names_only():
    renames = {"rank_emb": "transition.rank_emb"}
    assert renamed_key("rank_emb", renames) == "transition.rank_emb"
    assert renamed_key("rank_emb.x", renames) == "transition.rank_emb.x"
    assert renamed_key("rank_embedding", renames) == "rank_embedding"
    assert renamed_key("transition.rank_emb", renames) == "transition.rank_emb"
