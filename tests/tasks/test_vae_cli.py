"""The structured VAE through the zoo command: fit (fast_dev_run and a short run), checkpoint reload,
validate from a checkpoint, the state-usage plot, the paper and CPU recipes, and clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from cli_testlib import config_with_ddp, cpu_trainer, logged, recipes

import zoo
from zoo.cli import main
from zoo.data import CaptionsDataModule
from zoo.tasks import VAETask

RECIPES = recipes("vae")
CAPTIONS = ["a man riding a horse", "two dogs in the snow", "a red bus", "a plate of food on a table",
            "a cat on a mat", "people walking in a park"]  # fmt: skip


def write_captions(directory: Path) -> None:
    for split, lines in (("train", CAPTIONS), ("valid", CAPTIONS[:3]), ("test", CAPTIONS[3:])):
        (directory / f"{split}.txt").write_text("\n".join(lines) + "\n")


def recipe(tmp: Path, backend: str = "randomized", **model) -> Path:
    write_captions(tmp)
    init = {
        "num_states": 6, "backend": backend, "encoder_layers": 1, "encoder_dim": 16, "encoder_heads": 2,
        "state_dim": 8, "decoder_dim": 8, "decoder_hidden": 8, "dropout": 0.0, "eval_samples": 5,
    }  # fmt: skip
    init.update({"randomized": {"k1": 2, "k2": 2}, "low-rank": {"rank": 3}}.get(backend, {}))
    init.update(model)
    config = {
        "seed_everything": 0,
        "model": {
            "class_path": "zoo.tasks.VAETask",
            "init_args": {"model": {"class_path": "zoo.models.StructuredVAE", "init_args": init}, "lr": 0.01},
        },
        "data": {
            "class_path": "zoo.data.CaptionsDataModule",
            "init_args": {
                "source": "text",
                "path": str(tmp),
                "batch_size": 4,
                "tokenizer_cache": str(tmp / "tok"),
            },
        },
        "trainer": cpu_trainer(tmp),
    }
    path = tmp / f"vae-{backend}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("backend", ["exact", "randomized", "low-rank"])
def test_fit_fast_dev_run(tmp_path, backend):
    assert main(["fit", "--config", str(recipe(tmp_path, backend)), "--trainer.fast_dev_run", "2"]) == 0


def test_fit_reload_validate_and_plot_state_usage(tmp_path):
    path = recipe(tmp_path)
    assert (
        main(["fit", "--config", str(path), "--trainer.max_epochs", "2", "--trainer.log_every_n_steps", "1"])
        == 0
    )
    (ckpt,) = tmp_path.rglob("*.ckpt")
    val = logged(tmp_path, "val/nll_sentence")
    assert len(val) == 2 and all(v > 0 for v in val)
    assert len(logged(tmp_path, "val/neg_elbo_sentence")) == 2  # the ELBO is logged beside the NLL
    distinct = logged(tmp_path, "val/distinct_map_states")  # q's state usage
    information = logged(tmp_path, "val/token_state_information")
    assert len(distinct) == 2 and all(d >= 1 for d in distinct)
    assert len(information) == 2 and all(0 <= i <= math.log(6) for i in information)
    about_sentence = logged(tmp_path, "val/sentence_state_information")  # beyond the position: at most that
    assert len(about_sentence) == 2 and all(0 <= s <= i + 1e-6 for s, i in zip(about_sentence, information))
    assert logged(tmp_path, "train/entropy")

    task = VAETask.load_from_checkpoint(ckpt).eval()
    again = VAETask.load_from_checkpoint(ckpt).eval()
    assert task.hparams["model"]["init_args"]["backend"] == "randomized"
    batch = {"tokens": torch.tensor([[64, 3797, 50256]]), "lengths": torch.tensor([3])}
    with torch.no_grad():
        g = [torch.Generator().manual_seed(0) for _ in range(2)]
        torch.testing.assert_close(
            task.model.log_likelihood(batch, g[0]), again.model.log_likelihood(batch, g[1])
        )

    out = tmp_path / "validate"
    assert main(["validate", "--config", str(path), "--ckpt_path", str(ckpt),
                 "--trainer.logger.init_args.save_dir", str(out)]) == 0  # fmt: skip
    assert logged(out, "val/nll_sentence") == pytest.approx([val[-1]], rel=1e-6)

    png = tmp_path / "usage.png"
    assert main(["state-usage", str(ckpt), "--out", str(png), "--split", "valid"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_fits_the_decoder_shortlist_on_the_training_tokens(tmp_path):
    """With decoder_vocab, zoo fit fits the shortlist on the training split's token counts before the
    first step; the checkpoint keeps it, and the exported folder scores as the checkpoint does."""
    path = recipe(tmp_path, "exact", decoder_vocab=20)
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "1"]) == 0
    (ckpt,) = tmp_path.rglob("*.ckpt")
    decoder = VAETask.load_from_checkpoint(ckpt).model.decoder
    data = CaptionsDataModule(source="text", path=str(tmp_path), tokenizer_cache=str(tmp_path / "tok"))
    counts = data.token_counts("train")
    listed = (decoder.word_index < 20).nonzero().flatten()
    assert len(listed) == 20 and 50256 in listed.tolist()
    assert counts[listed].min() >= counts[decoder.word_index == 20].max()  # the most frequent ids
    assert main(["export", str(ckpt), str(tmp_path / "out")]) == 0
    model = zoo.from_pretrained(tmp_path / "out")
    assert torch.equal(model.decoder.word_index, decoder.word_index)
    assert model.sample(2, max_length=5, generator=torch.Generator().manual_seed(0))["tokens"].max() < 50257


def test_kl_warmup_ramps_the_kl_weight_and_word_dropout_trains(tmp_path):
    path = recipe(tmp_path, "exact", word_dropout=0.3)
    args = ["fit", "--config", str(path), "--model.init_args.kl_warmup_steps", "4", "--trainer.max_steps",
            "6", "--trainer.max_epochs", "10", "--trainer.log_every_n_steps", "1"]  # fmt: skip
    assert main(args) == 0
    assert logged(tmp_path, "train/kl_weight") == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0])
    kl = logged(tmp_path, "train/kl")  # -(log p(x~) + H(q)) per sentence, logged as the ELBO's parts are
    parts = [logged(tmp_path, f"train/{name}") for name in ("states", "entropy")]
    assert kl == pytest.approx([-(s + h) for s, h in zip(*parts)], rel=1e-5, abs=1e-5) and len(kl) == 6
    (ckpt,) = tmp_path.rglob("*.ckpt")
    task = VAETask.load_from_checkpoint(ckpt)
    assert task.kl_warmup_steps == 4 and task.model.decoder.word_dropout == 0.3
    with pytest.raises(ValueError, match="kl_warmup_steps must be an int >= 0"):
        VAETask(task.model, kl_warmup_steps=-1)


def test_vocabulary_mismatch_is_a_clear_error(tmp_path, capsys):
    path = recipe(tmp_path, vocab_size=100)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 2
    assert "zoo: error: the model has vocab_size = 100 but the data has 50257" in capsys.readouterr().err


def test_a_sentence_longer_than_the_encoder_reads_is_refused_before_training(tmp_path, capsys):
    """A caption of more GPT-2 tokens than max_positions stopped the run at its batch with a traceback
    naming no split or sentence (audit); the longest caption here has 7 tokens with <|endoftext|>."""
    path = recipe(tmp_path, max_positions=6)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 2
    error = capsys.readouterr().err
    assert "zoo: error: 1 of the 6 sentences of the train split are longer than the encoder's 6" in error
    assert "sentence 3, has 8 GPT-2 tokens" in error
    assert "lower the data module's max_words, or build the model with a larger max_positions" in error


def test_rank_space_is_a_clear_error(tmp_path, capsys):
    assert main(["fit", "--config", str(recipe(tmp_path, "rank-space")), "--trainer.fast_dev_run", "1"]) == 2
    assert "Use backend='low-rank'" in capsys.readouterr().err


def test_state_usage_needs_a_checkpoint(tmp_path, capsys):
    assert main(["state-usage", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "x.png")]) == 2
    assert "zoo state-usage: error: no checkpoint at" in capsys.readouterr().err


def test_recipes_cover_table_5_and_cpu_variants():
    names = {p.stem for p in RECIPES}
    assert {f"mscoco-{row}" for row in ("full-100", "topk-100", "rdp-100", "topk-2000", "rdp-2000")} <= names
    assert {f"ptb-short-{b}-small" for b in ("exact", "topk", "rdp", "low-rank")} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses_and_composes_with_ddp(path, capsys):
    config = config_with_ddp(path, capsys)
    model = config["model"]["init_args"]["model"]["init_args"]
    N = model["num_states"]
    if "rdp" in path.stem:
        assert model["k1"] == model["k2"] == N // 10  # Table 5: K1 = K2 = 10% N
    if "topk" in path.stem:
        assert model["k2"] == 0 and model["k1"] == N // 5
    if path.stem.startswith("mscoco"):
        assert (
            model["pretrained_encoder"] == "gpt2" and config["data"]["init_args"]["source"] == "coco-karpathy"
        )


def test_init_missing_ok_starts_a_low_rank_vae_from_an_exact_one(tmp_path):
    """The low-rank q has one weight the exact one lacks (its feature map): init_from refuses the
    partial load unless init_missing_ok names it; then every other weight is the source's."""
    from zoo.hub.pretrained import CheckpointError

    sizes = {"encoder_layers": 1, "encoder_dim": 8, "encoder_heads": 2, "state_dim": 4, "decoder_dim": 4}
    torch.manual_seed(0)
    exact = zoo.models.StructuredVAE(num_states=4, backend="exact", decoder_hidden=4, **sizes)
    exact.save_pretrained(tmp_path / "exact")
    source = str(tmp_path / "exact")

    def low_rank():
        torch.manual_seed(1)
        return zoo.models.StructuredVAE(num_states=4, backend="low-rank", rank=2, decoder_hidden=4, **sizes)

    feature_map = r"missing keys \['inference.transition.feature_map.weight'\].*init_missing_ok"
    with pytest.raises(CheckpointError, match=feature_map):
        VAETask(low_rank(), init_from=source)
    fresh = low_rank().state_dict()["inference.transition.feature_map.weight"]
    task = VAETask(low_rank(), init_from=source, init_missing_ok=["inference.transition.feature_map.weight"])
    loaded = task.model.state_dict()
    # it kept its initialization
    assert torch.equal(loaded.pop("inference.transition.feature_map.weight"), fresh)
    expected = exact.state_dict()
    assert loaded.keys() == expected.keys() and all(torch.equal(loaded[k], expected[k]) for k in loaded)
    again = VAETask(exact.__class__.from_config(exact.spec()), init_from=source,
                    init_missing_ok=["decoder.word_bias"])  # fmt: skip
    assert torch.equal(again.model.decoder.word_bias, exact.decoder.word_bias)  # present: loaded
    with pytest.raises(ValueError, match=r"names \['inference.nothing'\], which StructuredVAE does not"):
        VAETask(low_rank(), init_from=source, init_missing_ok=["inference.nothing"])
    with pytest.raises(ValueError, match="init_missing_ok must be a list of weight names, got 'x'"):
        VAETask(low_rank(), init_from=source, init_missing_ok="x")


def test_a_run_resumed_twice_goes_on_as_a_straight_run(tmp_path):
    """The audit's run: a VAE with the recipes' checkpoint (best by val/nll, last) and a step one, mid-epoch
    validation, stopped by max_steps at 5, resumed to 7 (the first step of epoch 2, no validation on the
    way), resumed to 10. The recipes' callback, which had saved nothing in the second run, wrote last.ckpt
    when it ended, marking epoch 2 completed after one batch: the third run skipped its rest (weights
    0.026 apart). Now the weights are the straight run's."""
    path = recipe(tmp_path, backend="exact", dropout=0.1)
    recipes = {"filename": "best", "monitor": "val/nll", "save_last": True, "enable_version_counter": False}
    steps = {"filename": "step", "save_last": True, "every_n_train_steps": 1}
    checkpoint = "lightning.pytorch.callbacks.ModelCheckpoint"
    callbacks = [{"class_path": checkpoint, "init_args": a} for a in (recipes, steps)]
    common = ["--config", str(path), "--data.init_args.batch_size", "2", "--trainer.max_epochs", "10",
              "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1",
              "--trainer.callbacks", json.dumps(callbacks), "--trainer.logger", "false"]  # fmt: skip

    def run(name, stops):
        previous = []
        for max_steps in stops:
            root = tmp_path / name
            folder = ["--trainer.default_root_dir", str(root / str(max_steps))]
            assert main(["fit", *common, "--trainer.max_steps", str(max_steps), *folder, *previous]) == 0
            previous = ["--ckpt_path", str(root / str(max_steps) / "checkpoints" / "last.ckpt")]
        return torch.load(previous[1], weights_only=False)

    straight, resumed = run("straight", [10]), run("resumed", [5, 7, 10])
    assert resumed["global_step"] == straight["global_step"] == 10 and resumed["epoch"] == straight["epoch"]
    for name, want in straight["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], want, rtol=0, atol=0, msg=name)
