"""The checkpoint format: save_pretrained -> from_pretrained round trips, and every way a folder can
be wrong gets a clear CheckpointError with nothing loaded."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from zoo_testlib import example_batch, scores

import zoo
from zoo.hub.bundled import WEIGHTS
from zoo.hub.pretrained import CheckpointError, load_into, read_config, write_card
from zoo.models import BernoulliHMM, CategoricalHMM
from zoo.tasks import LikelihoodTask


def tiny(backend: str = "rank-space", **kw) -> CategoricalHMM:
    extra = {"rank": 3} if backend in ("low-rank", "rank-space") else {}
    torch.manual_seed(0)
    return CategoricalHMM(17, 6, backend, embedding_dim=8, hidden_dim=8, **{**extra, **kw})


@pytest.fixture
def saved(tmp_path) -> tuple[CategoricalHMM, Path]:
    model = tiny()
    return model, model.save_pretrained(tmp_path / "model")


def test_round_trip_identical_outputs_and_files(saved):
    model, folder = saved
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((folder / "config.json").read_text())
    assert config["zoo_format_version"] == 3 and config["zoo_version"] == zoo.__version__  # the heads
    assert config["class_path"] == "zoo.models.CategoricalHMM"
    assert config["init_args"] == model.config and config["dtype"] == "float32"
    loaded = zoo.from_pretrained(folder)
    assert type(loaded) is CategoricalHMM and not loaded.training
    batch = example_batch(model)
    assert torch.equal(scores(loaded, batch), scores(model, batch))
    assert CategoricalHMM.from_pretrained(str(folder)).config == model.config


def test_saved_files_get_the_umask_permissions_of_a_plain_write(tmp_path):
    """mkstemp's 0600 would make a saved folder unreadable to anyone else."""
    old = os.umask(0o022)
    try:
        folder = tiny().save_pretrained(tmp_path / "model")
    finally:
        os.umask(old)
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path.name


def test_float64_model_round_trips(tmp_path):
    model = tiny("exact").double()
    loaded = zoo.from_pretrained(model.save_pretrained(tmp_path / "m"))
    assert next(loaded.parameters()).dtype == torch.float64
    batch = example_batch(model)
    assert torch.equal(scores(loaded, batch), scores(model, batch))


def test_half_storage_loads_back_in_the_compute_dtype(tmp_path):
    """storage_dtype=float16: half the file, format 2, and the model runs in float32 again, with
    exactly the float16-rounded weights."""
    model = tiny("exact")
    full = model.save_pretrained(tmp_path / "full")
    half = model.save_pretrained(tmp_path / "half", storage_dtype="float16")
    config = read_config(half)
    assert (config["zoo_format_version"], config["dtype"]) == (3, "float16")  # the heads: 3, not 2
    assert config["compute_dtype"] == "float32"
    assert "compute_dtype" not in read_config(full) and read_config(full)["zoo_format_version"] == 3
    stored = load_file(half / "model.safetensors")
    assert {t.dtype for t in stored.values()} == {torch.float16}
    assert 2 * sum(t.nbytes for t in stored.values()) == sum(t.nbytes for t in model.state_dict().values())
    loaded = zoo.from_pretrained(half)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    rounded = tiny("exact")
    rounded.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
    batch = example_batch(model)
    assert torch.equal(scores(loaded, batch), scores(rounded, batch))
    torch.testing.assert_close(scores(loaded, batch), scores(model, batch), rtol=1e-2, atol=1e-2)
    assert next(zoo.from_pretrained(half, dtype=torch.float64).parameters()).dtype == torch.float64
    assert next(zoo.from_pretrained(full, dtype="bfloat16").parameters()).dtype == torch.bfloat16
    task = LikelihoodTask(tiny("exact"), init_from=str(half))  # fine-tuning reads it in float32
    assert torch.equal(scores(task.model, batch), scores(rounded, batch))


def test_resaving_keeps_the_storage_dtype(tmp_path):
    """from_pretrained(folder).save_pretrained(folder) on a float16-stored folder wrote float32 (twice the
    file), while the kept results and the card still described float16 storage (audit V)."""
    folder = tmp_path / "copy"
    shutil.copytree(WEIGHTS / "hmm_categorical_n512_d64.ptb_exact", folder)
    before = read_config(folder)
    assert (before["dtype"], before["compute_dtype"]) == ("float16", "float32")
    zoo.from_pretrained(folder).save_pretrained(folder)
    after = read_config(folder)
    assert (after["dtype"], after["compute_dtype"]) == ("float16", "float32")
    assert {t.dtype for t in load_file(folder / "model.safetensors").values()} == {torch.float16}
    zoo.from_pretrained(folder).save_pretrained(folder, storage_dtype="float32")  # asked for: changed
    assert read_config(folder)["dtype"] == "float32" and "compute_dtype" not in read_config(folder)


def test_a_trained_model_re_saves_into_its_own_narrow_folder(tmp_path):
    """The same-model check compared the folder's float16 weights with the model's float32 ones: a
    trained model re-saved into its own float16 folder was "another model", and overwrite=True, the
    way out, deleted its results (audit H). A loaded bundled HSMM re-saves in its own format (its
    projection is float16-exact: format 5 only where a projection needs float32)."""
    model = tiny("exact")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1e-3 * torch.randn_like(parameter))  # not float16-exact
    folder = model.save_pretrained(tmp_path / "half", storage_dtype="float16", results={"test/ppl": 9.0})
    model.save_pretrained(folder, storage_dtype="float16")
    model.save_pretrained(folder)  # the folder's float16 kept
    assert read_config(folder)["dtype"] == "float16" and (folder / "results.json").exists()
    copy = tmp_path / "hsmm"
    shutil.copytree(WEIGHTS / "hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact", copy)
    before = read_config(copy)["zoo_format_version"]
    zoo.from_pretrained(copy).save_pretrained(copy)
    assert read_config(copy)["zoo_format_version"] == max(before, 3)  # its keys moved in format 3


def test_a_value_beyond_the_storage_dtypes_range_is_refused(tmp_path):
    """storage_dtype=float16 stored 99,504 (a fitted input projection's 1 / std) as inf: the save and the
    load passed, and the first use blamed the input (audit V)."""
    model = tiny("exact")
    with torch.no_grad():
        next(model.parameters()).view(-1)[3] = 99504.0
    name = next(n for n, _ in model.named_parameters())
    with pytest.raises(ValueError, match=rf"{re.escape(name)} holds values beyond float16's range .*99504"):
        model.save_pretrained(tmp_path / "half", storage_dtype="float16")
    assert not (tmp_path / "half").exists()  # checked before anything is written
    loaded = zoo.from_pretrained(model.save_pretrained(tmp_path / "bf16", storage_dtype="bfloat16"))
    assert torch.isfinite(next(loaded.parameters())).all()


def test_float16_weights_without_a_compute_dtype_run_in_float32(tmp_path):
    """A folder whose float16 weights record no compute_dtype (written by hand or another tool) loaded in
    float16 and failed at its first use (audit V)."""
    folder, bundled = tmp_path / "copy", WEIGHTS / "hmm_categorical_n512_d64.ptb_exact"
    shutil.copytree(bundled, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["compute_dtype"]
    (folder / "config.json").write_text(json.dumps(config))
    model = zoo.from_pretrained(folder)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    batch = example_batch(model)
    assert torch.equal(scores(model, batch), scores(zoo.from_pretrained(bundled), batch))


def test_a_float16_model_is_refused_at_save(tmp_path):
    """A float16 model saved and loaded, then failed at its first use with a TypeError (audit V)."""
    with pytest.raises(ValueError, match=r"runs in float16.*model.float\(\).*storage_dtype='float16'"):
        tiny().half().save_pretrained(tmp_path / "half")
    assert not (tmp_path / "half").exists()


def test_bad_dtypes_are_errors(tmp_path, saved):
    with pytest.raises(ValueError, match="storage_dtype must name a floating torch dtype .*'int8'"):
        tiny().save_pretrained(tmp_path / "int8", storage_dtype="int8")
    assert not (tmp_path / "int8").exists()
    with pytest.raises(ValueError, match="dtype must name a floating torch dtype .*'half-ish'"):
        zoo.from_pretrained("no-such-org/no-such-model", dtype="half-ish")
    _, folder = saved  # float16 was loaded, then its first use named an internal tensor
    with pytest.raises(ValueError, match=r"dtype float16: every dynamic program refuses it .*storage_dtype"):
        zoo.from_pretrained(folder, dtype=torch.float16)


def test_subclass_from_pretrained_checks_the_class(saved):
    with pytest.raises(CheckpointError, match="holds a CategoricalHMM, not a BernoulliHMM"):
        BernoulliHMM.from_pretrained(saved[1])


def test_missing_folder_and_missing_files(tmp_path, saved):
    with pytest.raises(CheckpointError, match="neither a local folder nor a Hub repo id"):
        zoo.from_pretrained(tmp_path / "does" / "not" / "exist")
    with pytest.raises(CheckpointError, match="zoo export CKPT OUT_DIR"):
        zoo.from_pretrained(str(tmp_path / "best.ckpt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"has no config.json .*found nothing"):
        zoo.from_pretrained(tmp_path / "empty")
    (saved[1] / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="has config.json but no model.safetensors"):
        zoo.from_pretrained(saved[1])


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_foreign_newer_and_unknown_configs(saved):
    _, folder = saved
    original = (folder / "config.json").read_text()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(
        CheckpointError, match="not a zoo model config .*transformers config, model_type='bert'"
    ):
        zoo.from_pretrained(folder)
    (folder / "config.json").write_text(original[: len(original) // 2])
    with pytest.raises(CheckpointError, match="not valid JSON .*corrupt or truncated"):
        zoo.from_pretrained(folder)
    cases = [
        ({"zoo_format_version": 6, "zoo_version": "9.0"}, "format 6 .*reads formats 1..5: upgrade"),
        ({"zoo_format_version": "1"}, "must be an int >= 1"),
        ({"class_path": "os.system"}, "only zoo model classes"),
        ({"class_path": "zoo.models.NoSuchModel"}, "cannot build zoo.models.NoSuchModel"),
        ({"class_path": "zoo.tasks.LikelihoodTask"}, "not a zoo model"),
        ({"init_args": {"vocab_size": 17}}, "cannot build"),
        ({"dtype": "int64"}, "floating torch dtype"),
        ({"zoo_format_version": 1, "compute_dtype": "float64"}, "needs zoo_format_version 2 or later"),
        ({"zoo_format_version": 2, "compute_dtype": "long"}, "'compute_dtype' must name a floating"),
    ]
    for changes, message in cases:
        (folder / "config.json").write_text(original)
        _edit_config(folder, **changes)
        with pytest.raises(CheckpointError, match=message):
            zoo.from_pretrained(folder)


def test_corrupt_truncated_and_swapped_weights(tmp_path, saved):
    model, folder = saved
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="does not match the checksum .*corrupt, truncated"):
        zoo.from_pretrained(folder)
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF
    weights.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="does not match the checksum"):
        zoo.from_pretrained(folder)
    # a damaged file whose checksum was updated too: safetensors rejects the header
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
    _edit_config(folder, weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest())
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        zoo.from_pretrained(folder)


def _resave(folder: Path, weights: dict) -> None:
    save_file(weights, folder / "model.safetensors")
    _edit_config(
        folder, weights_sha256=hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda w: w.pop("start_query"), r"missing keys \['start_query'\]"),
        (lambda w: w.update(extra=torch.zeros(2)), r"unexpected keys \['extra'\]"),
        (
            lambda w: w.update(state_emb=torch.zeros(7, 8)),
            r"state_emb: shape \(7, 8\), the model has \(6, 8\)",
        ),
        (lambda w: w.update(state_emb=w["state_emb"].double()),
         "state_emb is stored in float64, but config.json records dtype float32"),  # fmt: skip
    ],
)
def test_mismatched_weights_are_rejected_whole(saved, edit, message):
    _, folder = saved
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    _resave(folder, weights)
    with pytest.raises(CheckpointError, match=message):
        zoo.from_pretrained(folder)


def test_config_of_another_size_is_a_shape_error(saved):
    _, folder = saved
    config = read_config(folder)
    _edit_config(folder, init_args={**config["init_args"], "num_states": 7})
    with pytest.raises(CheckpointError, match="do not fit CategoricalHMM: .*shape"):
        zoo.from_pretrained(folder)


def test_nothing_loads_partially(saved):
    """A mismatched state dict leaves the target model untouched (torch's load_state_dict alone
    copies the matching tensors before it raises)."""
    _, folder = saved
    weights = load_file(folder / "model.safetensors")
    weights["state_emb"] = torch.zeros(7, 8)
    target = tiny()
    target.load_state_dict({k: torch.randn_like(v) for k, v in target.state_dict().items()})
    before = {k: v.clone() for k, v in target.state_dict().items()}
    weights["start_query"] = weights["start_query"] + 1
    with pytest.raises(CheckpointError):
        load_into(target, weights, "edited")
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


@pytest.mark.parametrize("extras", [True, False], ids=["with-extras", "weights-only"])
def test_saving_over_another_models_save_needs_overwrite(tmp_path, extras):
    """Another model's save (other class, arguments or weights) is never replaced without overwrite=True,
    its extras or not (its weights, card and vocab.json were replaced silently)."""
    folder = tmp_path / "m"
    given = {"results": {"dataset": "ptb", "metrics": {"test/ppl": 10.0}}, "training_config": "a: 1\n"}
    tiny().save_pretrained(folder, **(given if extras else {}))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    for other in (tiny("exact"), zoo.create_model("pcfg_nt10_pt20_d64", backend="exact")):
        with pytest.raises(FileExistsError, match=r"holds another model \(a CategoricalHMM .*overwrite=True"):
            other.save_pretrained(folder)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written
    other = tiny("exact")
    other.save_pretrained(folder, training_config="b: 2\n", overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "config.json", "model.safetensors", "training_config.yaml"
    ]  # fmt: skip
    assert zoo.from_pretrained(folder).config == other.config
    assert not list(folder.glob(".*"))  # no temporary files left behind


def test_the_training_config_as_text_or_a_files_path(tmp_path):
    """A recipe's path was written as the file's text, then a crash left a half-written folder."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: {architecture: hmm_categorical_n512_d64}\n")
    for given in (recipe, str(recipe), recipe.read_text()):
        folder = tmp_path / f"saved-{type(given).__name__}-{len(str(given))}"
        tiny().save_pretrained(folder, training_config=given)
        assert (folder / "training_config.yaml").read_text() == recipe.read_text()
    for bad, message in (("recipe_missing.yaml", "no such file"), ("- a\n- b\n", "a YAML mapping")):
        with pytest.raises(ValueError, match=message):
            tiny().save_pretrained(tmp_path / "bad", training_config=bad)
        assert not (tmp_path / "bad").exists()  # checked before anything is written


def test_a_training_config_naming_this_machines_state_is_refused(tmp_path):
    """A resumed run's config.yaml (ckpt_path, and the vocab_from zoo fit set to that checkpoint): the
    card's commands restored the checkpoint instead of the folder's weights (audit); zoo export writes
    the config without them (portable)."""
    local = tmp_path / "run" / "epoch=0-step=3.ckpt"
    for given, named in (
        ("ckpt_path: run/epoch=0-step=3.ckpt\n", "ckpt_path: run/epoch=0-step=3.ckpt"),
        (f"data:\n  init_args:\n    vocab_from: {local}\n", f"vocab_from: {local}"),
        ("data: {init_args: {vocab_from: vocab.json}}\n", "vocab_from: vocab.json"),
    ):
        expected = f"training_config must name no state of this machine, got {named}: "
        with pytest.raises(ValueError, match=re.escape(expected)):
            tiny().save_pretrained(tmp_path / "bad", training_config=given)
        assert not (tmp_path / "bad").exists()  # checked before anything is written
    for source in ("hmm_categorical_n512_d64.ptb_exact", "org/name", "org/name@v1", "null"):  # any machine's
        given = f"data:\n  init_args:\n    vocab_from: {source}\nckpt_path: null\n"
        folder = tiny().save_pretrained(tmp_path / source.replace("/", "-"), training_config=given)
        assert (folder / "training_config.yaml").read_text() == given


def test_resaving_the_same_model_keeps_its_results_training_config_and_curve(tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(WEIGHTS / "hmm_categorical_n512_d64.ptb_exact", folder)
    names = ("results.json", "training_config.yaml", "learning_curve.png")
    extras = {name: (folder / name).read_bytes() for name in names}
    model = zoo.from_pretrained(folder)
    model.save_pretrained(folder)
    assert {n: (folder / n).read_bytes() for n in extras} == extras
    card = (folder / "README.md").read_text()
    assert "](learning_curve.png)" in card and "zoo fit --config training_config.yaml" in card
    batch = example_batch(model)
    assert torch.equal(scores(zoo.from_pretrained(folder), batch), scores(model, batch))


def test_saving_into_a_folder_of_your_own_replaces_none_of_its_files(tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    own = {"README.md": "# my project\n", "results.json": "{}\n", "training_config.yaml": "x: 1\n",
           "notes.txt": "mine\n"}  # fmt: skip
    for name, text in own.items():
        (folder / name).write_text(text)
    model = zoo.create_model("hmm_categorical_n512_d64", backend="exact")
    with pytest.raises(FileExistsError) as error:
        model.save_pretrained(folder)
    assert "is not a zoo pretrained-model folder" in str(error.value)
    assert "README.md, results.json, training_config.yaml" in str(error.value) and "overwrite=True" in str(
        error.value
    )
    assert {p.name: p.read_text() for p in folder.iterdir()} == own  # nothing written
    (folder / "empty").mkdir()
    (folder / "empty" / "notes.txt").write_text("mine\n")  # files a save never writes do not count
    model.save_pretrained(folder / "empty")
    assert (folder / "empty" / "notes.txt").read_text() == "mine\n"
    model.save_pretrained(folder, overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine\n" and not (folder / "results.json").exists()
    assert zoo.from_pretrained(folder).config == model.config


def test_init_from_a_pretrained_folder_and_mismatches(tmp_path, saved):
    model, folder = saved
    fresh = tiny()
    fresh.load_state_dict({k: torch.randn_like(v) for k, v in fresh.state_dict().items()})
    task = LikelihoodTask(fresh.spec(), init_from=str(folder))
    batch = example_batch(model)
    assert torch.equal(scores(task.model, batch), scores(model, batch))
    assert task.hparams["init_from"] is None
    with pytest.raises(
        CheckpointError, match="holds a CategoricalHMM, but the task's model is a BernoulliHMM"
    ):
        LikelihoodTask(BernoulliHMM(6, 5, embedding_dim=8, hidden_dim=8).spec(), init_from=str(folder))
    bigger = CategoricalHMM(17, 7, "rank-space", rank=3, embedding_dim=8, hidden_dim=8)
    differences = r"shape .*differ from the model's as \(checkpoint, model\): .*'num_states': \(6, 7\)"
    with pytest.raises(CheckpointError, match=differences):
        LikelihoodTask(bigger.spec(), init_from=str(folder))
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not a zoo model config"):
        LikelihoodTask(tiny().spec(), init_from=str(copy))


def test_bad_save_arguments_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="result 'test/ppl' must be a finite number"):
        tiny().save_pretrained(tmp_path / "a", results={"test/ppl": "n/a"})
    with pytest.raises(ValueError, match="result 'test/ppl' must be a finite number, got nan"):
        tiny().save_pretrained(tmp_path / "a", results={"test/ppl": float("nan")})  # NaN in the JSON (audit)
    with pytest.raises(ValueError, match="unknown architecture 'hmm_small'"):
        tiny().save_pretrained(tmp_path / "b", architecture="hmm_small")
    with pytest.raises(ValueError, match="architecture='pcfg_nt10_pt20_d64' does not describe this model: "
                                         "pcfg_nt10_pt20_d64 is a PCFG, the model a CategoricalHMM"):
        tiny().save_pretrained(tmp_path / "b", architecture="pcfg_nt10_pt20_d64")  # was written (audit)
    with pytest.raises(ValueError, match=r"the model's num_states = 6 \(hmm_categorical_n512_d64: 512\)"):
        tiny().save_pretrained(tmp_path / "b", architecture="hmm_categorical_n512_d64")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_models_config_is_read_only():
    """Editing ``model.config`` changed what a save recorded, not the model: a folder that did not load
    (num_states) or a wrong dropout on reload, pushed without an error (audit)."""
    import copy
    import pickle

    model = tiny()
    for edit in (lambda: model.config.__setitem__("num_states", 99), lambda: model.config.update(dropout=0.9),
                 lambda: model.config.pop("dropout"), lambda: setattr(model, "config", {})):  # fmt: skip
        with pytest.raises(TypeError, match="model.config is read-only"):
            edit()
    assert model.config["num_states"] == 6 and model.config == copy.deepcopy(model).config
    assert pickle.loads(pickle.dumps(model)).config == model.config


def test_a_save_keeps_a_users_file_that_only_looks_like_a_shard(saved):
    """Saving the same model again removed every model-*-of-*.safetensors file (audit)."""
    model, folder = saved
    mine = folder / "model-backup-of-monday.safetensors"
    mine.write_bytes(b"mine")
    model.save_pretrained(folder)
    model.save_pretrained(folder, max_shard_size=2000)
    model.save_pretrained(folder)  # from shards back to one file: its own shards go
    assert mine.read_bytes() == b"mine"
    assert sorted(p.name for p in folder.glob("model*")) == [mine.name, "model.safetensors"]
    model.save_pretrained(folder, max_shard_size=2000)
    tiny("exact").save_pretrained(folder, overwrite=True)  # overwrite replaces checkpoint files only
    assert mine.read_bytes() == b"mine"  # was removed (audit V)
    assert sorted(p.name for p in folder.glob("model*")) == [mine.name, "model.safetensors"]


def test_a_config_with_a_non_string_architecture_is_refused(saved):
    _, folder = saved
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architecture": 5}))
    with pytest.raises(CheckpointError, match="'architecture' must be a str or null, got 5"):
        zoo.from_pretrained(folder)


@pytest.mark.parametrize(
    ("architecture", "message"),
    [
        ("hmm_categorical_n512_d64", "hmm_categorical_n512_d64 is a CategoricalHMM, the model a PCFG"),
        ("pcfg_nt11_pt20_d64", "unknown architecture 'pcfg_nt11_pt20_d64'; did you mean"),
        ("pcfg_nt30_pt60_d256", "the model's num_nonterminals = 10 (pcfg_nt30_pt60_d256: 30)"),
    ],
)
def test_a_config_whose_architecture_is_not_its_model_is_refused(tmp_path, architecture, message):
    """Another family's or an unknown architecture loaded without a word, and the card then named it
    (audit)."""
    folder = tmp_path / "pcfg"
    shutil.copytree(WEIGHTS / "pcfg_nt10_pt20_d64.ptb_exact", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architecture": architecture}))
    said = (
        f"'architecture' is {architecture!r}, but its class_path and init_args (a PCFG) are architecture "
        f"'pcfg_nt10_pt20_d64': {message}"
    )
    for read in (zoo.from_pretrained, write_card):
        with pytest.raises(CheckpointError, match=re.escape(said)) as error:
            read(folder)
        fix = "; set 'architecture' to \"pcfg_nt10_pt20_d64\", as save_pretrained records it"
        assert str(error.value).endswith(fix)
    (folder / "config.json").write_text(json.dumps({**config, "architecture": None}))
    assert type(zoo.from_pretrained(folder)).__name__ == "PCFG"  # null: none claimed


def test_bundled_cards_name_their_tag():
    """The bundled cards' examples said from_pretrained("path/to/this/folder") (audit)."""
    for folder in sorted(p for p in WEIGHTS.iterdir() if (p / "config.json").is_file()):
        card = (folder / "README.md").read_text()
        assert "path/to/this/folder" not in card and "huggingface-cli" not in card
        assert f'zoo.from_pretrained("{folder.name}")  # bundled with structured-zoo: offline' in card


def test_parsing_task_fine_tunes_from_a_pretrained_grammar(tmp_path):
    from zoo.tasks import ParsingTask

    torch.manual_seed(0)
    grammar = zoo.create_model("pcfg_nt10_pt20_d64", backend="low-rank", vocab_size=30)
    folder = grammar.save_pretrained(tmp_path / "pcfg")
    torch.manual_seed(1)
    task = ParsingTask(grammar.spec(), init_from=str(folder))
    batch = example_batch(grammar)
    assert torch.equal(scores(task.model, batch), scores(grammar, batch))


def test_names_that_are_no_pretrained_model_get_a_hint_before_any_download():
    with pytest.raises(CheckpointError, match="did you mean hmm_categorical_n4096_d64.ptb_rank_space"):
        zoo.from_pretrained("hmm_categorical_n4096_d64.ptb_rank_spce")
    tags = "is an architecture, not a pretrained model: its pretrained tags are hmm_categorical_n4096_d64"
    with pytest.raises(CheckpointError, match=tags):
        zoo.from_pretrained("hmm_categorical_n4096_d64")
    with pytest.raises(CheckpointError, match="it has no pretrained weights yet"):
        zoo.from_pretrained("hmm_categorical_n16384_d256")


def test_an_unreachable_hub_is_not_blamed_on_offline_mode(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(CheckpointError, match=r"the Hub could not be reached \(no network\?\)") as error:
        zoo.from_pretrained("zoo-tests/missing", cache_dir=tmp_path)
    assert "HF_HUB_OFFLINE" not in str(error.value)


def test_pushing_to_an_unreachable_hub_is_one_clear_error(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from zoo.cli import main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    message = r"org/x: the Hub \(http://127.0.0.1:9\) could not be reached \(no network\?\): .*was pushed"
    with pytest.raises(ConnectionError, match=message):
        tiny().push_to_hub("org/x", token="t")
    folder = tiny().save_pretrained(tmp_path / "m")
    assert main(["push", str(folder), "org/x", "--token", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zoo push: error: org/x: the Hub") and err.count("\n") == 1


def test_fitted_statistics_keep_full_precision_in_narrow_storage(tmp_path):
    """storage_dtype=float16 rounded an HSMM's fitted projection mean (1000.275 -> 1000.5, one standard
    deviation of that feature) and moved a 50-frame log p by 39 nats (audit Y). Its projection is kept
    in the model's dtype (format 5); the other weights are narrowed as asked."""
    from safetensors import safe_open

    from zoo.data.features import fit_feature_transform
    from zoo.models import GaussianHSMM

    g = torch.Generator().manual_seed(0)
    center, spread = torch.tensor([1000.3, 1500.7, 3.0]), torch.tensor([0.2, 0.5, 1.0])
    train = center + spread * torch.randn(500, 3, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    model = GaussianHSMM(num_states=3, feature_dim=3, input_dim=3, max_duration=4, embedding_dim=8,
                         hidden_dim=8).eval()  # fmt: skip
    model.input_projection.set(*fit_feature_transform(train.numpy(), 3))
    frames = (center + spread * torch.randn(1, 50, 3, generator=g)).float()
    batch = {"features": frames, "lengths": torch.tensor([50])}
    folder = model.save_pretrained(tmp_path / "half", storage_dtype="float16")
    config = read_config(folder)
    stored_as = (config["zoo_format_version"], config["dtype"], config["compute_dtype"])
    assert stored_as == (5, "float16", "float32")
    with safe_open(str(folder / "model.safetensors"), "pt") as stored:
        dtypes = {key: stored.get_tensor(key).dtype for key in stored.keys()}  # noqa: SIM118
    assert dtypes.pop("input_projection.mean") == dtypes.pop("input_projection.matrix") == torch.float32
    assert {d for d in dtypes.values() if d.is_floating_point} == {torch.float16}
    loaded = zoo.from_pretrained(folder)
    assert torch.equal(loaded.input_projection.mean, model.input_projection.mean)
    rounded = model.log_likelihood(batch).item()
    assert abs(loaded.log_likelihood(batch).item() - rounded) < 0.5  # the float16 rest: not 39 nats
    config["dtype"] = "bfloat16"  # a config that misstates its weights' storage
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"stored in float16, but config.json records dtype bfloat16"):
        zoo.from_pretrained(folder)
