"""`zoo predict` for the likelihood families: the HMMs on text and music, and the structured VAE, with
LikelihoodWriter's JSON lines (it failed with Lightning's "predict_dataloader must be implemented")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from cli_testlib import REPO, predict
from test_training_cli import music_recipe, recipe, write_ptb
from test_vae_cli import recipe as vae_recipe

from zoo.cli import main
from zoo.data import CaptionsDataModule, MusicDataModule, PTBDataModule
from zoo.models import CategoricalHMM, StructuredVAE
from zoo.tasks import LikelihoodTask, LikelihoodWriter, SegmentationWriter, TreeWriter, VAETask


def fitted(path) -> object:
    """The checkpoint of a 2-step ``zoo fit`` of the recipe ``path``."""
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (ckpt,) = path.parent.rglob("*.ckpt")
    return ckpt


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("backend", ["exact", "rank-space"])
def test_predict_writes_each_sentences_score_states_and_words(tmp_path, backend):
    vocab = write_ptb(tmp_path)
    test = "the cat sat\nthe zebra ran on the mat\n\na dog\n"  # a blank line; zebra: not in the vocabulary
    (tmp_path / "ptb.test.txt").write_text(test)
    path = recipe(tmp_path, vocab, backend)
    ckpt = fitted(path)
    out = tmp_path / "scores.jsonl"
    with pytest.warns(UserWarning, match="1 of 4 lines left out"):  # the blank line
        assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out) == 0
    written = rows(out)
    assert [r["index"] for r in written] == [0, 1, 2]
    assert [r["line"] for r in written] == [1, 2, 4]  # its line in the file (the blank one left out)
    assert [" ".join(r["words"]) for r in written] == [
        "the cat sat <eos>", "the zebra ran on the mat <eos>", "a dog <eos>"
    ]  # fmt: skip
    task = LikelihoodTask.load_from_checkpoint(ckpt).eval()
    data = PTBDataModule(data_dir=str(tmp_path), batch_tokens=64)
    data.setup()
    for r in written:
        ids = data.datasets["test"][r["index"]]
        batch = {"tokens": ids[None], "lengths": torch.tensor([len(ids)])}
        with torch.no_grad():
            log_p = float(task(batch))
        assert r["events"] == len(ids) == len(r["words"]) == len(r["states"])
        assert r["log_likelihood"] == pytest.approx(log_p, rel=1e-5)
        assert r["nll"] == pytest.approx(-log_p / len(ids), rel=1e-5)
        with torch.no_grad():  # the states are the best path: their score is the max score
            posterior = task.model.posterior(batch)
            best = float(posterior.max_score - posterior.log_partition)
            assert posterior.log_prob(torch.tensor([r["states"]])).item() == pytest.approx(best, abs=1e-4)


def test_predict_states_false_scores_without_decoding(tmp_path, monkeypatch):
    """A rank-space HMM's Viterbi over 4,096 states took 0.3 s a token on a CPU, its log p 1e-4 s
    (audit): ``predict_states: false`` leaves the decode out, and the scores stay the same."""
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "rank-space")
    ckpt = fitted(path)
    both, scores = tmp_path / "both.jsonl", tmp_path / "scores.jsonl"
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", both) == 0
    monkeypatch.setattr(CategoricalHMM, "decode", lambda *_: pytest.fail("decoded"))
    option = ("--model.init_args.predict_states", "false")
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", scores, *option) == 0
    decoded, scored = rows(both), rows(scores)
    assert all("states" in r for r in decoded) and not any("states" in r for r in scored)
    assert [{k: v for k, v in r.items() if k != "states"} for r in decoded] == scored
    with pytest.raises(ValueError, match="predict_states must be true or false, got 'no'"):
        LikelihoodTask(CategoricalHMM(vocab, 4), predict_states="no")


def test_the_predicted_split_is_chosen_and_checked(tmp_path):
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "exact")
    ckpt = fitted(path)
    out, split = tmp_path / "valid.jsonl", ("--data.init_args.predict_split", "valid")
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out, *split) == 0
    assert len(rows(out)) == len((tmp_path / "ptb.valid.txt").read_text().splitlines()) == 9
    with pytest.raises(ValueError, match=r"predict_split must be one of \['train', 'valid', 'test'\], got"):
        PTBDataModule(data_dir=str(tmp_path), predict_split="dev")


def test_predict_without_a_writer_says_it_writes_nothing(tmp_path):
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "exact")
    ckpt = fitted(path)
    with pytest.warns(UserWarning, match="zoo predict without a writer callback writes nothing"):
        assert main(["predict", "--config", str(path), "--ckpt_path", str(ckpt)]) == 0


def test_a_writer_replaces_an_existing_file_only_when_told(tmp_path, capsys):
    """The writers replaced an existing output file without a word (audit): now one line, before anything
    is predicted, unless overwrite: true."""
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "exact")
    ckpt = fitted(path)
    out = tmp_path / "precious.jsonl"
    out.write_text("MY PRECIOUS DATA\n")
    capsys.readouterr()
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"zoo: error: the output_path of LikelihoodWriter, {out}, exists: give another one, or overwrite: "
        "true (init_args) to replace it"
    )
    assert out.read_text() == "MY PRECIOUS DATA\n"
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out, overwrite=True) == 0
    assert len(rows(out)) == 7
    module = SimpleNamespace(predict_step=lambda batch, batch_idx: None)
    for writer in (LikelihoodWriter, TreeWriter, SegmentationWriter):  # what they share
        with pytest.raises(FileExistsError, match=f"the output_path of {writer.__name__}, {out}, exists"):
            writer(str(out)).setup(None, module, "predict")
        writer(str(out), overwrite=True).setup(None, module, "predict")
        writer(str(out)).setup(None, module, "fit")  # it writes only when predicting
    assert len(rows(out)) == 7


def test_predict_decodes_music_frames(tmp_path):
    path = music_recipe(tmp_path)
    ckpt = fitted(path)
    out = tmp_path / "pieces.jsonl"
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out) == 0
    written = rows(out)
    music = MusicDataModule(str(tmp_path / "JSB_Chorales.pickle"), batch_size=4)
    music.setup()
    assert [r["events"] for r in written] == music.datasets["test"].lengths.tolist() == [6, 7]
    assert all(len(r["states"]) == r["events"] and "words" not in r for r in written)


def test_predict_scores_and_decodes_captions_with_the_structured_vae(tmp_path):
    path = vae_recipe(tmp_path, backend="exact")
    ckpt = fitted(path)
    out = tmp_path / "captions.jsonl"
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out) == 0
    written = rows(out)
    assert [r["index"] for r in written] == [0, 1, 2]  # the three test captions
    assert written[0]["words"] == ["a", " plate", " of", " food", " on", " a", " table", "<|endoftext|>"]
    task = VAETask.load_from_checkpoint(ckpt).eval()
    data = CaptionsDataModule("text", str(tmp_path), tokenizer_cache=str(tmp_path / "tok"))
    data.setup()
    for r in written:
        ids = data.datasets["test"][r["index"]]
        assert r["log_likelihood"] < 0 and r["events"] == len(ids) == len(r["words"])
        batch = {"tokens": ids[None], "lengths": torch.tensor([len(ids)])}
        assert r["states"] == task.model.decode(batch)[0].tolist()  # the MAP states of q


def test_a_random_evaluation_is_seeded_by_the_batch_index():
    """The VAE's importance-sampled log p: the global generator's state does not decide it."""
    model = StructuredVAE(
        vocab_size=50257, num_states=6, backend="exact", encoder_layers=1, encoder_dim=16, encoder_heads=2,
        state_dim=8, decoder_dim=8, decoder_hidden=8, dropout=0.0, eval_samples=5,
    )  # fmt: skip
    task = VAETask(model).eval()
    batch = {"tokens": torch.randint(0, 50000, (2, 5)), "lengths": torch.tensor([5, 3])}
    scores = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        with torch.no_grad():
            scores.append(task.predict_step(batch, 0)["log_likelihood"])
    assert torch.equal(*scores)


def test_decode_is_the_whole_models_in_any_mode():
    """In training mode state dropout keeps a subset of the states and the MLPs drop units: decode
    still gives the whole model's Viterbi states (indices of all N), and leaves the mode as it was."""
    model = CategoricalHMM(12, 16, state_dropout=0.5, dropout=0.3, embedding_dim=8, hidden_dim=8)
    batch = {"tokens": torch.randint(1, 12, (3, 7)), "lengths": torch.tensor([7, 2, 5])}
    expected = model.eval().decode(batch)
    model.train()
    for _ in range(3):
        assert torch.equal(model.decode(batch), expected)
    assert model.training
    with torch.no_grad():
        best = model.eval().posterior(batch).max_score
    scored = model.posterior(batch).log_prob(expected) + model.posterior(batch).log_partition
    torch.testing.assert_close(scored, best, atol=1e-4, rtol=0)


def test_ddp_predict_writes_every_process_share(tmp_path):
    """Two CPU processes (gloo) each predict half of the sentences: the file holds all of them, as one
    process writes it (each used to write its own half over the other's)."""
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "exact")
    ckpt = fitted(path)
    out = tmp_path / "ddp.jsonl"
    callback = {"class_path": "zoo.tasks.LikelihoodWriter", "init_args": {"output_path": str(out)}}
    command = [
        sys.executable, "-m", "zoo.cli", "predict", "--config", str(path), "--ckpt_path", str(ckpt),
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.use_distributed_sampler", "false",
        "--trainer.callbacks+", json.dumps(callback),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, cwd=REPO, env=env, capture_output=True, timeout=600)
    single = tmp_path / "single.jsonl"
    assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", single) == 0
    assert [r["index"] for r in rows(out)] == list(range(7))  # the 7 test sentences
    for a, b in zip(rows(out), rows(single)):
        assert a["states"] == b["states"]
        assert a["log_likelihood"] == pytest.approx(b["log_likelihood"], rel=1e-6)


def test_sequences_left_unpredicted_are_named(tmp_path):
    vocab = write_ptb(tmp_path)
    path = recipe(tmp_path, vocab, "exact")
    ckpt = fitted(path)
    out = tmp_path / "some.jsonl"
    one_batch = ("--data.init_args.batch_tokens", "12", "--trainer.limit_predict_batches", "1")
    with pytest.warns(UserWarning, match=r"some.jsonl: \d of 7 sequences were not predicted \(e.g. past"):
        assert predict(path, ckpt, "zoo.tasks.LikelihoodWriter", out, *one_batch) == 0
    assert 0 < len(rows(out)) < 7


def test_random_evaluations_number_the_batches_of_all_ranks():
    """Under DDP every rank's batch k was seeded k, so the ranks drew alike on different batches (audit):
    rank r of W seeds its batch k as k W + r; one process as before."""
    from types import SimpleNamespace

    from zoo.tasks.likelihood import evaluation_generator

    def first_draw(batch_idx, trainer=None, seed=0):
        return evaluation_generator(batch_idx, torch.device("cpu"), seed, trainer).initial_seed()

    assert [first_draw(k) for k in range(3)] == [0, 1, 2]
    assert first_draw(2, seed=1) == 1_000_005
    ranks = [SimpleNamespace(world_size=3, global_rank=r) for r in range(3)]
    seeds = [first_draw(k, trainer) for k in range(4) for trainer in ranks]
    assert seeds == list(range(12))
