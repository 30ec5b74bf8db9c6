"""The registry: names, patterns, errors, every architecture x backend round trip, recipes <-> registry."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch
import yaml
from zoo_testlib import example_batch, fit_inputs, scores, small_model

import zoo
from zoo.cli import main
from zoo.hub.bundled import bundled_folders
from zoo.hub.registry import (
    PretrainedTag,
    architecture,
    match_architecture,
    model_config,
    register_pretrained,
)
from zoo.models.base import ZooModel

REPO = Path(__file__).resolve().parents[2]
# <family>_<size>_d<width>; sizes: states (HMMs), nonterminals and preterminals (PCFG), states, longest
# duration, raw and modelled feature sizes (HSMM), states, encoder layers x width, LSTM size (VAE):
# docs/zoo-api.md
REGULARIZERS = {"dropout", "word_dropout", "state_dropout", "feature_dropout"}  # no weight depends on them
SIZES = r"n\d+|nt\d+_pt\d+|n\d+_dur\d+_in\d+_f\d+|n\d+_enc\d+x\d+_lstm\d+(_v\d+)?"
ARCH_NAME = re.compile(rf"^[a-z]+(_[a-z]+)?_({SIZES})_d\d+$")
CASES = [(name, backend) for name in zoo.list_models() for backend in architecture(name).backends]


def test_every_family_is_registered_on_import_with_documented_names():
    names = zoo.list_models()
    families = {architecture(n).class_path for n in names}
    exported = [getattr(zoo.models, n) for n in zoo.models.__all__]
    models = [c for c in exported if isinstance(c, type) and issubclass(c, ZooModel)]
    leaves = {
        f"zoo.models.{c.__name__}" for c in models if not any(o is not c and issubclass(o, c) for o in models)
    }
    assert families == leaves  # every model family zoo.models exports (not a base class like HMM)
    for name in names:
        assert ARCH_NAME.match(name), f"{name} does not follow <family>_<size>_d<width>"
        arch = architecture(name)
        assert arch.default_backend in arch.backends and arch.description and arch.recipes
        assert all((REPO / recipe).is_file() for recipe in arch.recipes), arch.recipes


def test_patterns_and_pretrained_listing():
    assert zoo.list_models("pcfg_*") == [n for n in zoo.list_models() if n.startswith("pcfg_")]
    assert zoo.list_models("*_n4096_*") == ["hmm_categorical_n4096_d64"]
    assert zoo.list_models("nothing*") == []
    assert zoo.list_models(pretrained=True) == sorted(bundled_folders())  # the weights in zoo/weights/


LISTING = re.compile(r"^zoo\.list_models\((?P<args>[^)]*)\)\s+# (?P<shown>\[.*\])$", re.M)


def test_the_docs_show_the_first_names_list_models_returns():
    """The README showed first names that were not the listings' first: the names sort as strings,
    n1024 before n256 (audit)."""
    docs = (REPO / "README.md", *(REPO / "docs").glob("*.md"))
    shown = [match for path in docs for match in LISTING.finditer(path.read_text())]
    assert len(shown) >= 2
    for match in shown:
        listed = eval(f"zoo.list_models({match['args']})", {"zoo": zoo})
        first = ast.literal_eval(match["shown"].replace(", ...]", "]"))
        assert (listed[: len(first)] if ", ...]" in match["shown"] else listed) == first, match.group()


@pytest.mark.parametrize("name, backend", CASES)
def test_every_architecture_round_trips_save_load(tmp_path, name, backend):
    """Each architecture with each of its backends (at test size): identical outputs after the trip."""
    torch.manual_seed(0)
    model = small_model(name, backend)
    assert model.config["backend"] == backend
    loaded = zoo.from_pretrained(model.save_pretrained(tmp_path / name))
    assert type(loaded) is type(model) and loaded.config == model.config
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert list(loaded_state) == list(state)  # buffers too (e.g. an HSMM's fitted input projection)
    assert all(torch.equal(loaded_state[k], v) for k, v in state.items())
    batch = example_batch(model)
    assert torch.equal(scores(loaded, batch), scores(model, batch))


@pytest.mark.parametrize(
    "name",
    [
        "hmm_categorical_n512_d64",
        "hmm_bernoulli_n256_d64",
        "pcfg_nt10_pt20_d64",
        "hsmm_gaussian_n8_dur32_in12_f12_d32",
    ],
)
def test_small_architectures_round_trip_at_full_size(tmp_path, name):
    torch.manual_seed(0)
    model = fit_inputs(zoo.create_model(name))
    folder = model.save_pretrained(tmp_path / name)
    assert zoo.from_pretrained(folder).config == model.config
    assert (folder / "config.json").read_text().count(f'"architecture": "{name}"') == 1
    batch = example_batch(model)
    assert torch.equal(scores(zoo.from_pretrained(folder), batch), scores(model, batch))


def test_create_model_defaults_backend_and_overrides():
    config = model_config("hmm_categorical_n16384_d256")
    assert config["backend"] == "rank-space" and config["rank"] == 4096 and config["num_states"] == 16384
    assert model_config("hmm_categorical_n16384_d256", "low_rank")["rank"] == 2048  # underscores accepted
    model = zoo.create_model("pcfg_nt10_pt20_d64", backend="rank-space", rank=5, vocab_size=30)
    assert model.config["rank"] == 5 and model.config["vocab_size"] == 30
    # a backend without registered settings: the model's own error says what it needs
    with pytest.raises(ValueError, match="needs rank=R"):
        zoo.create_model("hmm_categorical_n512_d64", backend="rank-space")


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown architecture 'hmm_categorical_n4069_d64'; did you mean"):
        zoo.create_model("hmm_categorical_n4069_d64")
    with pytest.raises(ValueError, match="unknown architecture 'resnet50'; see zoo.list_models"):
        zoo.create_model("resnet50")
    with pytest.raises(
        ValueError, match="no pretrained weights yet; train it with zoo fit .*hmm/ptb-exact.yaml"
    ):
        zoo.create_model("hmm_categorical_n16384_d256", pretrained=True)
    with pytest.raises(ValueError, match="unknown pretrained model 'pcfg_nt10_pt20_d64.ptb'"):
        zoo.create_model("pcfg_nt10_pt20_d64.ptb")
    with pytest.raises(ValueError, match="unknown backend|backend"):
        zoo.create_model("pcfg_nt10_pt20_d64", backend="fast")
    with pytest.raises(
        ValueError,
        match=r"hmm_categorical_n512_d64 \(CategoricalHMM\) takes no argument 'num_state' "
        r"\(did you mean 'num_states'\?\); its arguments: vocab_size, num_states, ",
    ):  # fmt: skip
        zoo.create_model("hmm_categorical_n512_d64", num_state=3)


def test_a_tag_with_pretrained_false_is_its_model_with_fresh_weights():
    tag = "hmm_categorical_n512_d64.ptb_exact"
    trained = zoo.create_model(tag)  # a tag alone: its weights
    fresh = zoo.create_model(tag, pretrained=False)
    assert fresh.config == trained.config and fresh.config["backend"] == "exact" and fresh.training
    assert not torch.equal(fresh.state_dict()["state_emb"], trained.state_dict()["state_emb"])
    assert zoo.create_model(tag, pretrained=False, dropout=0.3).config == {**trained.config, "dropout": 0.3}


def test_pretrained_hook_with_a_local_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("zoo.hub.registry._PRETRAINED", {})  # without the bundled tags
    torch.manual_seed(0)
    model = zoo.create_model("pcfg_nt10_pt20_d64", backend="low-rank")
    folder = model.save_pretrained(tmp_path / "weights")
    register_pretrained(PretrainedTag("pcfg_nt10_pt20_d64.test", str(folder), description="a test"))
    assert zoo.list_models(pretrained=True) == ["pcfg_nt10_pt20_d64.test"]
    assert main(["models", "--pretrained"]) == 0
    assert capsys.readouterr().out == f"pcfg_nt10_pt20_d64.test\t{folder}\ta test\n"
    batch = example_batch(model)
    for loaded in (
        zoo.create_model("pcfg_nt10_pt20_d64.test", pretrained=True),
        zoo.create_model("pcfg_nt10_pt20_d64.test"),  # a tag implies pretrained
        zoo.create_model("pcfg_nt10_pt20_d64", pretrained=True),  # the architecture's only tag
    ):
        assert torch.equal(scores(loaded, batch), scores(model, batch))
    with pytest.raises(ValueError, match="trained with backend 'low-rank', not 'exact'"):
        zoo.create_model("pcfg_nt10_pt20_d64.test", backend="exact")
    with pytest.raises(ValueError, match=r"take no overrides, got \['rank'\] \(pretrained=False builds"):
        zoo.create_model("pcfg_nt10_pt20_d64.test", rank=4)
    fresh = zoo.create_model("pcfg_nt10_pt20_d64.test", pretrained=False, rank=4)  # timm's random init
    assert fresh.config == {**model.config, "rank": 4} and fresh.training
    with pytest.raises(ValueError, match="already registered"):
        register_pretrained(PretrainedTag("pcfg_nt10_pt20_d64.test", str(folder)))
    with pytest.raises(ValueError, match="unknown architecture"):
        register_pretrained(PretrainedTag("pcfg_nt11_pt20_d64.test", str(folder)))


def test_a_tag_whose_folder_holds_another_architecture(tmp_path, monkeypatch):
    """from_pretrained(tag) returned whatever the tag's folder held (create_model(tag) refused it)."""
    monkeypatch.setattr("zoo.hub.registry._PRETRAINED", {})
    folder = zoo.create_model("pcfg_nt10_pt20_d64", backend="exact").save_pretrained(tmp_path / "pcfg")
    register_pretrained(PretrainedTag("hmm_categorical_n512_d64.mine", str(folder)))
    for load in (zoo.from_pretrained, zoo.create_model):
        with pytest.raises(ValueError, match=f"mine: {folder} does not hold a hmm_categorical_n512_d64"):
            load("hmm_categorical_n512_d64.mine")
    assert type(zoo.from_pretrained(folder)).__name__ == "PCFG"  # the folder itself: what it holds


def test_a_local_folder_named_like_a_tag_is_loaded_and_said(tmp_path, monkeypatch):
    """A folder saved under a tag's name (a fine-tuned copy of a bundled model) lost to the tag without a
    word; now from_pretrained loads it (a local folder first, as transformers does) and warns.
    create_model(tag) keeps to the registry."""
    monkeypatch.chdir(tmp_path)
    tag = "hmm_categorical_n512_d64.ptb_exact"
    bundled = zoo.from_pretrained(tag)
    tuned = zoo.create_model("hmm_categorical_n512_d64", backend="exact")
    tuned.save_pretrained(tag)
    batch = example_batch(tuned)
    with pytest.warns(UserWarning, match=f"{tag}: a local folder of that name is loaded, not the pretrained"):
        local = zoo.from_pretrained(tag)
    assert torch.equal(scores(local, batch), scores(tuned, batch))
    assert torch.equal(scores(zoo.create_model(tag), batch), scores(bundled, batch))


RECIPES = sorted((REPO / "recipes").glob("*/*.yaml"))
MODEL_RECIPES = [r for r in RECIPES if "model" in yaml.safe_load(r.read_text())]


@pytest.mark.parametrize("recipe", MODEL_RECIPES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_recipe_trains_a_registered_architecture(recipe):
    """A recipe's model is create_model(arch, backend) (a -r<rank> variant differs in the rank only, a
    -topk- recipe is the randomized backend's top-K baseline: k1 = K1 + K2, k2 = 0; training-time
    regularizers, which shape no weight, may differ), and the architecture lists the recipe."""
    spec = yaml.safe_load(recipe.read_text())["model"]["init_args"]["model"]
    args = spec["init_args"]
    module, _, short = spec["class_path"].rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module), short)).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    name = match_architecture(spec["class_path"], {**defaults, **args})  # the arguments the model gets
    assert name is not None, f"{recipe.name}: no registered architecture has {args}"
    arch = architecture(name)
    assert str(recipe.relative_to(REPO)) in arch.recipes
    variant = re.search(r"-r(\d+)$", recipe.stem)
    overrides = {"rank": int(variant.group(1))} if variant else {}
    if "-topk-" in recipe.stem:
        randomized = model_config(name, "randomized")
        overrides.update(k1=randomized["k1"] + randomized["k2"], k2=0)
    config = {**defaults, **model_config(name, args["backend"], **overrides)}
    shaping = {k: v for k, v in args.items() if k not in REGULARIZERS}
    assert {k: config.get(k) for k in shaping} == shaping
