"""The zoo's checkpoints through a Hub with the real client: push a model with its card and its
vocabulary (``zoo push`` and ``push_to_hub``), download it into an empty cache, load it by repo id and
by pinned revision, then again with the network off (``HF_HUB_OFFLINE=1``), outputs and vocabularies
identical everywhere.

Client code runs in subprocesses with ``LocalHub.env`` (the client reads ``HF_ENDPOINT`` and
``HF_HUB_OFFLINE`` when imported), from this checkout (``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from local_hub import EMIT, run_client_code
from local_hub.fixtures import local_hub  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO = "zoo-tests/hmm-rank-space"

PRELUDE = """
import json, sys
import torch
import zoo
from zoo.data.vocab import Vocabulary
sys.path.insert(0, PARAMS["zoo_tests"])
from zoo_testlib import example_batch, scores

def tiny(seed):
    torch.manual_seed(seed)
    return zoo.models.CategoricalHMM(17, 6, "rank-space", rank=3, embedding_dim=8, hidden_dim=8)

def words(prefix, unk="<unk>"):  # a vocabulary of the 17 ids
    specials = ["<eos>", unk] if unk else ["<eos>"]
    return Vocabulary(specials + [f"{prefix}{i}" for i in range(17 - len(specials))], unk=unk)

def vocab_of(model):
    return None if model.vocab is None else model.vocab.to_dict()

def logp(model):
    return scores(model, example_batch(model)).tolist()
"""


def run(
    hub, cache: Path, script: str, offline: bool = False, token: str | None = "test-token", **params
) -> dict:
    """Run ``script`` (after PRELUDE) in a client subprocess; returns what it passed to ``emit``."""
    env = hub.env(cache, offline=offline, token=token)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    params["zoo_tests"] = str(REPO_ROOT / "tests" / "zoo")
    code = (
        f"import json\nPARAMS = json.loads({json.dumps(json.dumps(params))})\n"
        + PRELUDE
        + EMIT
        + textwrap.dedent(script)
    )
    return run_client_code(code, env, cwd=REPO_ROOT)


PUSH = """
import subprocess
from pathlib import Path
import zoo.models
work = Path(PARAMS["work"])
first = tiny(0)
first.vocab = words("a")
first.save_pretrained(work / "first", results={"dataset": "ptb", "metrics": {"test/ppl": 123.4}})
# the CLI: zoo push DIR REPO_ID
out = subprocess.run([sys.executable, "-m", "zoo.cli", "push", str(work / "first"), PARAMS["repo"]],
                     capture_output=True, text=True, check=True).stdout
first_sha = out.split("commit ")[1].split()[0]
second = tiny(1)
second.vocab = words("b", unk=None)
commit = second.push_to_hub(PARAMS["repo"])  # the API; a new commit on main, without results
branch = tiny(2).push_to_hub(PARAMS["repo"], revision="dev")  # from main, without a vocabulary
emit(first_sha=first_sha, second_sha=commit.oid, first=logp(first), second=logp(second), dev=logp(tiny(2)),
     first_vocab=vocab_of(first), second_vocab=vocab_of(second))
"""

DOWNLOAD = """
from huggingface_hub import ModelCard, hf_hub_download, list_repo_files
repo, first_sha = PARAMS["repo"], PARAMS["first_sha"]
latest, pinned, dev = zoo.from_pretrained(repo), zoo.from_pretrained(repo, revision=first_sha), \\
    zoo.from_pretrained(repo, revision="dev")
card = ModelCard.load(hf_hub_download(repo, "README.md", revision=first_sha))
emit(latest=logp(latest), pinned=logp(pinned), dev=logp(dev), card_data=card.data.to_dict(), card=card.text,
     files=sorted(list_repo_files(repo)), first_files=sorted(list_repo_files(repo, revision=first_sha)),
     vocabs=[vocab_of(latest), vocab_of(pinned), vocab_of(dev)])
"""

OFFLINE = """
from huggingface_hub import constants
from zoo.hub.pretrained import CheckpointError
from zoo.tasks import LikelihoodTask
assert constants.HF_HUB_OFFLINE
repo = PARAMS["repo"]
latest, pinned = zoo.from_pretrained(repo), zoo.from_pretrained(repo, revision=PARAMS["first_sha"])
task = LikelihoodTask(tiny(5).spec(), init_from=repo)  # fine-tuning from the cached Hub model
pinned_task = LikelihoodTask(tiny(5).spec(), init_from=f"{repo}@{PARAMS['first_sha']}")  # org/name@rev
try:
    zoo.from_pretrained("zoo-tests/never-downloaded")
    error = None
except CheckpointError as e:
    error = str(e)
emit(latest=logp(latest), pinned=logp(pinned), tuned=logp(task.model), tuned_pinned=logp(pinned_task.model),
     error=error,
     vocabs=[vocab_of(latest), vocab_of(pinned)])
"""


@pytest.fixture(scope="module")
def pushed(local_hub, tmp_path_factory):  # noqa: F811
    work = tmp_path_factory.mktemp("zoo-push")
    return run(local_hub, work / "cache", PUSH, repo=REPO, work=str(work))


def test_push_download_pinned_and_offline(local_hub, pushed, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"  # empty: everything below is downloaded from the Hub
    online = run(local_hub, cache, DOWNLOAD, repo=REPO, first_sha=pushed["first_sha"])
    assert online["latest"] == pushed["second"] and online["pinned"] == pushed["first"]
    assert online["dev"] == pushed["dev"] and pushed["first"] != pushed["second"]
    # one model per repo: the second push removed the first one's results.json
    assert online["first_files"] == [
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
        "results.json",
        "vocab.json",
    ]
    assert online["files"] == [
        ".gitattributes",
        "README.md",
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]
    # each revision's own vocabulary; dev's push (no vocabulary) removed the one it branched with
    assert online["vocabs"] == [pushed["second_vocab"], pushed["first_vocab"], None]
    assert pushed["first_vocab"]["unk"] == "<unk>" and pushed["second_vocab"]["unk"] is None
    # the pushed card: front matter for the Hub, usage naming the repo, our measured number
    data = online["card_data"]
    assert data["library_name"] == "structured-zoo" and data["license"] == "mit"
    assert data["model-index"][0]["results"][0]["metrics"][0] == {
        "type": "perplexity",
        "value": 123.4,
        "name": "test perplexity",
    }
    assert f'zoo.from_pretrained("{REPO}", revision="COMMIT_SHA")' in online["card"]

    offline = run(local_hub, cache, OFFLINE, offline=True, repo=REPO, first_sha=pushed["first_sha"])
    assert offline["latest"] == pushed["second"] and offline["pinned"] == pushed["first"]
    assert offline["tuned"] == pushed["second"] and offline["tuned_pinned"] == pushed["first"]
    assert offline["vocabs"] == [pushed["second_vocab"], pushed["first_vocab"]]
    assert "not in the Hub cache" in offline["error"] and "HF_HUB_OFFLINE" in offline["error"]


def test_unknown_repo_and_revision_are_clear_errors(local_hub, pushed, tmp_path):  # noqa: F811
    script = """
    from zoo.hub.pretrained import CheckpointError
    errors = []
    for source, revision in (("zoo-tests/no-such-model", None), (PARAMS["repo"], "no-such-branch")):
        try:
            zoo.from_pretrained(source, revision=revision)
        except CheckpointError as e:
            errors.append(str(e))
    emit(errors=errors)
    """
    errors = run(local_hub, tmp_path / "cache", script, repo=REPO)["errors"]
    assert len(errors) == 2
    assert "zoo-tests/no-such-model is not a local folder, and the Hub could not provide it" in errors[0]
    assert "revision no-such-branch" in errors[1]


def test_pretrained_tag_loads_from_the_hub_at_its_pinned_revision(local_hub, tmp_path):  # noqa: F811
    script = """
    from zoo.hub.registry import PretrainedTag, create_model, list_models, register_pretrained
    model = create_model("hmm_categorical_n512_d64", vocab_size=50)  # not the architecture's vocabulary
    try:
        register_pretrained(PretrainedTag("hmm_categorical_n512_d64.wrong", PARAMS["repo"] + "-x", None))
        model.push_to_hub(PARAMS["repo"] + "-x")
        create_model("hmm_categorical_n512_d64.wrong", pretrained=True)
        mismatch = None
    except ValueError as e:
        mismatch = str(e)
    model = create_model("hmm_categorical_n512_d64")
    sha = model.push_to_hub(PARAMS["repo"]).oid
    register_pretrained(PretrainedTag("hmm_categorical_n512_d64.ptb_exact_test", PARAMS["repo"], sha))
    loaded = create_model("hmm_categorical_n512_d64.ptb_exact_test", pretrained=True)
    emit(same=logp(loaded) == logp(model), listed=list_models("hmm_*", pretrained=True), mismatch=mismatch)
    """
    out = run(local_hub, tmp_path / "cache", script, repo="zoo-tests/hmm-n512")
    assert out["same"] and "hmm_categorical_n512_d64.ptb_exact_test" in out["listed"]
    assert "does not hold a hmm_categorical_n512_d64" in out["mismatch"]


def test_push_without_a_token_is_a_clear_cli_error(local_hub, tmp_path):  # noqa: F811
    script = """
    import subprocess
    folder = tiny(0).save_pretrained(PARAMS["work"])
    proc = subprocess.run([sys.executable, "-m", "zoo.cli", "push", str(folder), "zoo-tests/no-token"],
                          capture_output=True, text=True)
    emit(code=proc.returncode, err=proc.stderr)
    """
    out = run(local_hub, tmp_path / "cache", script, token=None, work=str(tmp_path / "m"))
    assert out["code"] == 2 and out["err"].startswith("zoo push: error: ") and "401" in out["err"]
    assert "hf auth login" in out["err"] and "HF_TOKEN" in out["err"]  # a bare 401 before (audit)


SHARDED = """
from huggingface_hub import HfApi, list_repo_files
from pathlib import Path
work, repo = Path(PARAMS["work"]), PARAMS["repo"]
model = tiny(3)
model.push_to_hub(repo)  # one file first
folder = model.save_pretrained(work / "sharded", max_shard_size=4000)
(folder / "model-backup-of-monday.safetensors").write_bytes(b"mine")  # only looks like a shard
zoo.hub.pretrained.push_to_hub(folder, repo)  # the shards replace it
sharded_files = sorted(list_repo_files(repo))
loaded = zoo.from_pretrained(repo)
HfApi().upload_file(path_or_fileobj=b"log", path_in_repo="model-log-of-run3.safetensors", repo_id=repo)
model.push_to_hub(repo)  # one file again: the shards and their index are deleted
files = sorted(list_repo_files(repo))
emit(expected=logp(model), loaded=logp(loaded), sharded_files=sharded_files, files=files)
"""


def test_sharded_weights_push_download_and_give_way(local_hub, tmp_path):  # noqa: F811
    seen = run(local_hub, tmp_path / "cache", SHARDED, repo="zoo-tests/sharded", work=str(tmp_path))
    assert seen["loaded"] == seen["expected"]  # downloaded into an empty cache, every shard fetched
    shards = [f for f in seen["sharded_files"] if f.startswith("model-")]
    assert len(shards) > 1 and "model.safetensors.index.json" in seen["sharded_files"]
    assert "model.safetensors" not in seen["sharded_files"]
    assert "model-backup-of-monday.safetensors" not in seen["sharded_files"]  # was pushed (audit V)
    assert seen["files"] == [".gitattributes", "README.md", "config.json", "model-log-of-run3.safetensors",
                             "model.safetensors"]  # a repo file like a shard's name was deleted  # fmt: skip
