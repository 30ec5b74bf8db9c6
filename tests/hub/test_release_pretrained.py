"""scripts/release_pretrained.py against the local Hub: every bundled checkpoint is pushed with its
card to ``ORG/<arch.tag>``; one (a word model, with its vocabulary) is then downloaded by repo id, and
loaded again offline from the cache, with the same weights and vocabulary as the bundled folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_hub.fixtures import local_hub  # noqa: F401

import zoo  # noqa: F401  (registers the bundled checkpoints)
from zoo.hub.bundled import bundled_folders

REPO_ROOT = Path(__file__).resolve().parents[2]
ORG = "zoo-release-test"

LOAD = """
import json, sys, torch
import zoo
from safetensors.torch import load_file
model = zoo.from_pretrained(sys.argv[1])
bundled = model.upgrade_state_dict(load_file(sys.argv[2] + "/model.safetensors"))  # older key names
same = all(torch.equal(model.state_dict()[k], v) for k, v in bundled.items())
vocab = zoo.from_pretrained(sys.argv[2]).vocab
print("RESULT " + json.dumps({"class": type(model).__name__, "same": same, "vocab": model.vocab == vocab,
                              "has_vocab": model.vocab is not None}))
"""


def client(hub, cache: Path, args: list[str], offline: bool = False) -> subprocess.CompletedProcess:
    env = hub.env(cache, offline=offline)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.skipif(not bundled_folders(), reason="no bundled checkpoints")
def test_release_pushes_every_bundled_checkpoint_and_one_loads_by_repo_id_offline(local_hub, tmp_path):  # noqa: F811
    from huggingface_hub import HfApi

    cache = tmp_path / "cache"
    out = client(local_hub, cache, ["scripts/release_pretrained.py", "--org", ORG, "--token", "test-token"])
    pushed = {
        line.split()[0]: line.split()[1:]
        for line in out.stdout.splitlines()
        if line.startswith(("hmm", "pcfg", "hsmm", "vae"))
    }  # noqa: E501
    assert set(pushed) == set(bundled_folders())
    folders = bundled_folders()
    tag = next((t for t in folders if (folders[t] / "vocab.json").is_file()), next(iter(folders)))
    folder = folders[tag]
    repo_id, sha = pushed[tag]
    assert repo_id == f"{ORG}/{tag}" and len(sha) == 40
    api = HfApi(endpoint=local_hub.endpoint, token="test-token")
    files = set(api.list_repo_files(repo_id))
    assert {"config.json", "model.safetensors", "README.md", "results.json", "training_config.yaml"} <= files
    assert ("vocab.json" in files) == (folder / "vocab.json").is_file()
    card = Path(api.hf_hub_download(repo_id, "README.md", cache_dir=tmp_path / "card")).read_text()
    assert repo_id in card and "Results" in card
    for offline in (False, True):  # download into the empty cache, then from the cache alone
        out = client(local_hub, cache, ["-c", LOAD, repo_id, str(folder)], offline=offline)
        result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
        assert result["same"], f"{repo_id} (offline={offline}) does not hold the bundled weights"
        assert result["vocab"], f"{repo_id} (offline={offline}) does not hold the bundled vocabulary"
        assert result["has_vocab"] == (folder / "vocab.json").is_file()
