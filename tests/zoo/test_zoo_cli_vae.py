"""The structured VAE in the zoo: a model whose encoder came from a pretrained GPT-2 (a local folder
here, "gpt2" in the paper's recipes) is rebuilt from its own checkpoint without that GPT-2, by
from_pretrained, zoo export, load_from_checkpoint, zoo test --ckpt_path and init_from; zoo fit -> zoo
test --results -> zoo export -> from_pretrained with identical scores, and fine-tuning from the folder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from zoo_testlib import scores

import zoo
from zoo.cli import main
from zoo.models import StructuredVAE
from zoo.tasks import VAETask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from test_vae_cli import recipe  # noqa: E402

ENCODER = {"encoder_layers": 1, "encoder_dim": 16, "encoder_heads": 2, "max_positions": 32}


def write_gpt2(folder: Path) -> Path:
    """A tiny GPT-2 (GPT-2's 50257 ids) saved with transformers, standing in for "gpt2"."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    GPT2Model(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(folder)
    return folder


def tokens(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"tokens": torch.randint(50257, (3, 5), generator=g), "lengths": torch.tensor([5, 3, 4])}


def test_pretrained_encoder_is_rebuilt_from_the_checkpoint_alone(tmp_path):
    gpt2 = write_gpt2(tmp_path / "gpt2")
    torch.manual_seed(0)
    sizes = dict(state_dim=8, decoder_dim=8, decoder_hidden=8, eval_samples=4, **ENCODER)
    model = StructuredVAE(
        num_states=4, backend="randomized", k1=1, k2=1, pretrained_encoder=str(gpt2), **sizes
    )
    folder = model.save_pretrained(tmp_path / "vae")
    shutil.rmtree(gpt2)  # loading must not need it: the weights are in the checkpoint
    loaded = zoo.from_pretrained(folder)
    assert loaded.config == model.config and loaded.config["pretrained_encoder"] == str(gpt2)
    batch = tokens()
    assert torch.equal(scores(loaded, batch), scores(model, batch))
    with pytest.raises(OSError, match="could not load the pretrained encoder"):  # building it anew needs it
        StructuredVAE(num_states=4, pretrained_encoder=str(gpt2), **ENCODER)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    """(recipe, checkpoint, results JSON, GPT-2 folder) of a tiny VAE on a local GPT-2, trained by zoo
    fit; the GPT-2 folder is deleted afterwards."""
    tmp = tmp_path_factory.mktemp("zoo-cli-vae")
    gpt2 = write_gpt2(tmp / "gpt2")
    config = recipe(tmp, "randomized", pretrained_encoder=str(gpt2), **ENCODER)
    assert main(["fit", "--config", str(config), "--trainer.max_steps", "2"]) == 0
    shutil.rmtree(gpt2)
    (checkpoint,) = tmp.rglob("*.ckpt")
    results = tmp / "results.json"
    args = ["test", "--config", str(config), "--ckpt_path", str(checkpoint), "--results", str(results)]
    assert main(args) == 0  # builds the recipe's model with --ckpt_path: the GPT-2 is not fetched
    return config, checkpoint, results, gpt2


def test_fit_test_export_load(trained, tmp_path):
    config, checkpoint, results, gpt2 = trained
    assert not gpt2.exists()
    measured = json.loads(results.read_text())
    assert measured["dataset"] == config.parent.name  # the "text" source: the folder of the sentences
    assert {"test/nll", "test/ppl", "test/nll_sentence", "test/neg_elbo_sentence"} <= set(measured["metrics"])
    metrics = measured["metrics"]  # the ELBO of the importance samples is a bound on the same sentences
    assert metrics["test/neg_elbo_sentence"] >= metrics["test/nll_sentence"]
    folder = tmp_path / "out"
    assert main(["export", str(checkpoint), str(folder), "--results", str(results)]) == 0
    task = VAETask.load_from_checkpoint(checkpoint).eval()
    model = zoo.from_pretrained(folder)
    assert model.config == task.model.config
    batch = tokens(1)
    assert torch.equal(scores(model, batch), scores(task.model, batch))
    card = ModelCard.load(folder / "README.md")
    index = card.data.to_dict()["model-index"][0]
    values = {m["name"]: m["value"] for r in index["results"] for m in r["metrics"]}
    assert values["test negative log-likelihood (nats per sentence)"] == pytest.approx(
        measured["metrics"]["test/nll_sentence"]
    )
    assert f"initialised from `{gpt2}`" in card.text


def test_fit_fine_tunes_from_an_exported_folder(trained, tmp_path, capsys):
    """Exported with float16 storage (as the bundled VAEs are): loaded and fine-tuned in float32."""
    config, checkpoint, _, _ = trained
    main(["export", str(checkpoint), str(tmp_path / "out"), "--storage-dtype", "float16"])
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["dtype"], saved["compute_dtype"]) == ("float16", "float32")
    exported = zoo.from_pretrained(tmp_path / "out")
    assert exported.encoder.wte.weight.dtype == torch.float32
    args = ["fit", "--config", str(config), "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
            "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.logger", "false"]  # fmt: skip
    assert main([*args, "--model.init_args.init_from", str(tmp_path / "out")]) == 0  # no GPT-2 fetched
    (tuned,) = (tmp_path / "runs").rglob("*.ckpt")
    task = VAETask.load_from_checkpoint(tuned)
    assert not torch.equal(task.model.encoder.wte.weight, exported.encoder.wte.weight)  # one step from it
    capsys.readouterr()
    assert main(["fit", "--config", str(config), "--trainer.fast_dev_run", "1"]) == 2  # GPT-2 needed
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("zoo: error: could not load the pretrained encoder")
    assert line.endswith("(give it with --model.init_args.model.init_args.pretrained_encoder)")
