"""The local Hub and the real ``huggingface_hub`` client: push, download, pinned revisions, offline, errors.

Client code runs in subprocesses (``HF_ENDPOINT`` / ``HF_HUB_OFFLINE`` are read at import) and prints one JSON
line with what it saw; the server's raw HTTP answers are checked with ``urllib``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest
from local_hub import LocalHub
from local_hub.fixtures import local_hub  # noqa: F401

REPO = "zoo-tests/tiny-model"
CONFIG_V1 = {"family": "hmm", "num_states": 4}
CONFIG_V2 = {"family": "hmm", "num_states": 8}

PUSH = """
    import json, sys
    from pathlib import Path
    import torch
    from huggingface_hub import HfApi, ModelCard, ModelCardData
    from safetensors.torch import save_file

    folder = Path(sys.argv[1]) / "upload"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PARAMS["config_v1"]))
    weights = {"emission": torch.arange(12.0).reshape(3, 4), "start": torch.ones(3)}
    save_file(weights, folder / "model.safetensors")
    api = HfApi()
    url = api.create_repo(PARAMS["repo"])
    first = api.upload_folder(repo_id=PARAMS["repo"], folder_path=folder, commit_message="Add weights")
    card = ModelCard.from_template(
        ModelCardData(license="mit", library_name="structured-zoo", tags=["hmm"]), model_id="tiny-model"
    )
    card_commit = card.push_to_hub(PARAMS["repo"], commit_message="Add model card")
    second = api.upload_file(
        path_or_fileobj=json.dumps(PARAMS["config_v2"]).encode(), path_in_repo="config.json",
        repo_id=PARAMS["repo"], commit_message="More states",
    )
    unchanged = api.upload_folder(repo_id=PARAMS["repo"], folder_path=folder, allow_patterns="*.safetensors")
    emit(url=url, url_repo_id=url.repo_id, first=first.oid, card=card_commit.split("/commit/")[-1],
         second=second.oid, unchanged=unchanged.oid)
"""


def run_client(
    hub: LocalHub, cache, script: str, offline: bool = False, token: str | None = "test-token", **params
):
    """Run ``script`` with the client pointed at ``hub``; returns what it passed to ``emit(**values)``."""
    prelude = (
        "import json, sys\n"
        "PARAMS = json.loads(sys.argv[2])\n"
        "def emit(**values):\n"
        "    print('RESULT ' + json.dumps(values, default=str))\n"
    )
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script), str(cache), json.dumps(params)],
        env=hub.env(cache, offline=offline, token=token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, f"client script failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(results[-1][len("RESULT ") :])


@pytest.fixture(scope="module")
def pushed(local_hub, tmp_path_factory):  # noqa: F811
    """The repository pushed once for the module: weights + config, card, then a commit of a new config."""
    work = tmp_path_factory.mktemp("push")
    out = run_client(local_hub, work, PUSH, repo=REPO, config_v1=CONFIG_V1, config_v2=CONFIG_V2)
    return {**out, "hub": local_hub}


def http(hub: LocalHub, method: str, path: str, headers=None, base: str | None = None):
    """One raw request to the server (redirects not followed): ``(status, headers, body)``."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request((base or hub.endpoint) + path, method=method, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_push_creates_commits_with_card_lfs_weights_and_file_listing(pushed, tmp_path):
    hub = pushed["hub"]
    assert pushed["url"] == f"{hub.endpoint}/{REPO}" and pushed["url_repo_id"] == REPO
    shas = [pushed["first"], pushed["card"], pushed["second"]]
    assert all(len(sha) == 40 and int(sha, 16) >= 0 for sha in shas) and len(set(shas)) == 3
    assert pushed["unchanged"] == pushed["second"]  # re-uploading unchanged weights makes no commit
    seen = run_client(
        hub,
        tmp_path / "cache",
        """
        from huggingface_hub import HfApi, ModelCard
        api = HfApi()
        info = api.model_info(PARAMS["repo"], files_metadata=True)
        old = api.model_info(PARAMS["repo"], revision=PARAMS["first"])
        refs = api.list_repo_refs(PARAMS["repo"])
        card = ModelCard.load(PARAMS["repo"])
        emit(
            sha=info.sha, old_sha=old.sha,
            siblings={s.rfilename: [s.size, s.lfs.sha256 if s.lfs else None] for s in info.siblings},
            old_files=sorted(s.rfilename for s in old.siblings),
            files=api.list_repo_files(PARAMS["repo"]),
            tree=[(f.path, f.last_commit.title) for f in api.list_repo_tree(PARAMS["repo"], expand=True)],
            branches={b.name: b.target_commit for b in refs.branches},
            commits=[c.title for c in api.list_repo_commits(PARAMS["repo"])],
            card_license=card.data.license, card_tags=card.data.tags, card_text="tiny-model" in card.text,
        )
        """,
        repo=REPO,
        first=pushed["first"],
    )
    assert seen["sha"] == pushed["second"] and seen["old_sha"] == pushed["first"]
    assert seen["branches"] == {"main": pushed["second"]}
    assert seen["files"] == [".gitattributes", "README.md", "config.json", "model.safetensors"]
    assert seen["old_files"] == [".gitattributes", "config.json", "model.safetensors"]
    config_size, config_lfs = seen["siblings"]["config.json"]
    assert config_size == len(json.dumps(CONFIG_V2)) and config_lfs is None  # text goes to git
    weights_size, weights_sha256 = seen["siblings"]["model.safetensors"]
    assert weights_sha256 is not None and len(weights_sha256) == 64  # binary goes to LFS
    stored = (hub.root / "blobs" / weights_sha256).read_bytes()
    assert len(stored) == weights_size and hashlib.sha256(stored).hexdigest() == weights_sha256
    assert dict(seen["tree"])["config.json"] == "More states"
    assert dict(seen["tree"])["model.safetensors"] == "Add weights"
    assert seen["commits"] == ["More states", "Add model card", "Add weights", "initial commit"]
    assert seen["card_license"] == "mit" and seen["card_tags"] == ["hmm"] and seen["card_text"]


DOWNLOAD = """
    import json
    from huggingface_hub import hf_hub_download, snapshot_download
    from safetensors.torch import load_file

    def config(path):
        with open(path) as f:
            return json.load(f)

    repo, first = PARAMS["repo"], PARAMS["first"]
    latest = snapshot_download(repo)
    pinned = snapshot_download(repo, revision=first)
    weights = load_file(hf_hub_download(repo, "model.safetensors", revision=first))
    emit(
        by_id=config(hf_hub_download(repo, "config.json")),
        by_branch=config(hf_hub_download(repo, "config.json", revision="main")),
        by_pinned=config(hf_hub_download(repo, "config.json", revision=first)),
        snapshot_latest=[latest.rsplit("/", 1)[-1], config(latest + "/config.json")],
        snapshot_pinned=[pinned.rsplit("/", 1)[-1], config(pinned + "/config.json")],
        weights={name: tensor.tolist() for name, tensor in weights.items()},
        card="license: mit" in open(latest + "/README.md").read(),
    )
"""

OFFLINE = """
    import json
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    repo, first = PARAMS["repo"], PARAMS["first"]
    with open(hf_hub_download(repo, "config.json")) as f:
        latest = json.load(f)
    with open(hf_hub_download(repo, "config.json", revision=first)) as f:
        pinned = json.load(f)
    snapshot = snapshot_download(repo)
    try:
        hf_hub_download(repo, "model.safetensors", revision=first)
        missing = None
    except LocalEntryNotFoundError as error:
        missing = [type(error).__name__, isinstance(error.__cause__, OfflineModeIsEnabled)]
    emit(latest=latest, pinned=pinned, snapshot=snapshot.rsplit("/", 1)[-1], missing=missing)
"""


def test_download_by_repo_id_branch_and_pinned_revision_into_an_empty_cache(pushed, tmp_path):
    got = run_client(pushed["hub"], tmp_path / "cache", DOWNLOAD, repo=REPO, first=pushed["first"])
    assert got["by_id"] == got["by_branch"] == CONFIG_V2
    assert got["by_pinned"] == CONFIG_V1  # the later commit did not change the pinned revision's content
    assert got["snapshot_latest"] == [pushed["second"], CONFIG_V2]
    assert got["snapshot_pinned"] == [pushed["first"], CONFIG_V1]
    assert got["weights"] == {
        "emission": [[4.0 * r + c for c in range(4)] for r in range(3)],
        "start": [1.0] * 3,
    }
    assert got["card"]


def test_offline_mode_serves_the_cache_and_names_what_was_never_downloaded(pushed, tmp_path):
    cache = tmp_path / "cache"
    script = """
        from huggingface_hub import hf_hub_download, snapshot_download
        snapshot_download(PARAMS["repo"])
        emit(path=hf_hub_download(PARAMS["repo"], "config.json", revision=PARAMS["first"]))
    """
    run_client(pushed["hub"], cache, script, repo=REPO, first=pushed["first"])
    got = run_client(pushed["hub"], cache, OFFLINE, offline=True, repo=REPO, first=pushed["first"])
    assert got["latest"] == CONFIG_V2 and got["pinned"] == CONFIG_V1 and got["snapshot"] == pushed["second"]
    assert got["missing"] == ["LocalEntryNotFoundError", True]


ERRORS = """
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    )

    def outcome(call):
        try:
            call()
            return "ok"
        except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as error:
            return type(error).__name__
        except HfHubHTTPError as error:
            return f"HTTP {error.response.status_code}"

    api, repo = HfApi(), PARAMS["repo"]
    emit(
        unknown_repo=outcome(lambda: hf_hub_download("zoo-tests/no-such-model", "config.json")),
        unknown_repo_info=outcome(lambda: api.model_info("zoo-tests/no-such-model")),
        unknown_file=outcome(lambda: hf_hub_download(repo, "no-such-file.json")),
        unknown_revision=outcome(lambda: hf_hub_download(repo, "config.json", revision="no-such-branch")),
        unknown_pinned=outcome(lambda: hf_hub_download(repo, "config.json", revision="0" * 40)),
        unknown_tree_revision=outcome(lambda: api.list_repo_files(repo, revision="no-such-branch")),
        exists=[api.repo_exists(repo), api.repo_exists("zoo-tests/no-such-model"),
                api.file_exists(repo, "config.json"), api.file_exists(repo, "no-such-file.json")],
        duplicate=outcome(lambda: api.create_repo(repo)),
        duplicate_ok=outcome(lambda: api.create_repo(repo, exist_ok=True)),
        stale_parent=outcome(lambda: api.upload_file(
            path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, parent_commit=PARAMS["first"])),
    )
"""

NO_TOKEN = """
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    def status(call):
        try:
            call()
            return "ok"
        except HfHubHTTPError as error:
            return error.response.status_code

    api, repo = HfApi(), PARAMS["repo"]
    emit(
        create=status(lambda: api.create_repo("zoo-tests/anonymous")),
        upload=status(lambda: api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo)),
        delete=status(lambda: api.delete_repo(repo)),
        read=status(lambda: hf_hub_download(repo, "config.json")),
    )
"""


def test_unknown_repo_file_and_revision_raise_the_clients_errors(pushed, tmp_path):
    got = run_client(pushed["hub"], tmp_path / "cache", ERRORS, repo=REPO, first=pushed["first"])
    assert got["unknown_repo"] == got["unknown_repo_info"] == "RepositoryNotFoundError"
    assert got["unknown_file"] == "RemoteEntryNotFoundError"
    assert got["unknown_revision"] == got["unknown_pinned"] == got["unknown_tree_revision"]
    assert got["unknown_revision"] == "RevisionNotFoundError"
    assert got["exists"] == [True, False, True, False]
    assert got["duplicate"] == "HTTP 409" and got["duplicate_ok"] == "ok"
    assert got["stale_parent"] == "HTTP 412"  # committing on top of an old parent is refused


def test_writes_without_a_token_are_refused_reads_are_not(pushed, tmp_path):
    got = run_client(pushed["hub"], tmp_path / "cache", NO_TOKEN, token=None, repo=REPO)
    assert got == {"create": 401, "upload": 401, "delete": 401, "read": "ok"}
    status, _, _ = http(pushed["hub"], "GET", f"/api/models/{REPO}")
    assert status == 200  # the repository is untouched


def test_branches_and_tags_pin_content(pushed, tmp_path):
    script = """
        import json
        from huggingface_hub import HfApi, hf_hub_download
        api, repo = HfApi(), PARAMS["repo"]
        api.create_branch(repo, branch="dev", revision=PARAMS["first"])
        api.create_tag(repo, tag="v1", revision=PARAMS["first"])
        dev = api.upload_file(path_or_fileobj=b'{"dev": true}', path_in_repo="config.json", repo_id=repo,
                              revision="dev", commit_message="Try a dev config")

        def config(revision):
            with open(hf_hub_download(repo, "config.json", revision=revision)) as f:
                return json.load(f)

        refs = api.list_repo_refs(repo)
        emit(dev=dev.oid, dev_config=config("dev"), tag_config=config("v1"), main_config=config("main"),
             branches={b.name: b.target_commit for b in refs.branches},
             tags={t.name: t.target_commit for t in refs.tags})
        api.delete_branch(repo, branch="dev")
        api.delete_tag(repo, tag="v1")
    """
    got = run_client(pushed["hub"], tmp_path / "cache", script, repo=REPO, first=pushed["first"])
    assert got["dev_config"] == {"dev": True}
    assert got["tag_config"] == CONFIG_V1 and got["main_config"] == CONFIG_V2
    assert got["branches"] == {"main": pushed["second"], "dev": got["dev"]}
    assert got["tags"] == {"v1": pushed["first"]}
    status, headers, _ = http(pushed["hub"], "HEAD", f"/{REPO}/resolve/v1/config.json")
    assert status == 404 and headers["X-Error-Code"] == "RevisionNotFound"  # the tag was deleted


def test_resolve_headers_redirects_and_ranges(pushed):
    hub = pushed["hub"]
    status, headers, body = http(hub, "HEAD", f"/{REPO}/resolve/main/config.json")
    content = json.dumps(CONFIG_V2).encode()
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == pushed["second"] and headers["Content-Length"] == str(len(content))
    git_blob_id = hashlib.sha1(b"blob %d\x00" % len(content) + content).hexdigest()
    assert headers["ETag"] == f'"{git_blob_id}"'
    status, headers, body = http(
        hub, "GET", f"/{REPO}/resolve/{pushed['first']}/config.json", {"Range": "bytes=2-7"}
    )
    assert status == 206 and body == json.dumps(CONFIG_V1).encode()[2:8]

    status, headers, _ = http(hub, "HEAD", f"/{REPO}/resolve/main/model.safetensors")
    assert status == 302 and headers["X-Repo-Commit"] == pushed["second"]
    sha256 = headers["X-Linked-Etag"].strip('"')
    cdn = headers["Location"].split("/" + sha256)[0]
    assert cdn != hub.endpoint  # another origin: the client does not send its token there
    status, _, weights = http(hub, "GET", "/" + sha256, base=cdn)
    assert status == 200 and hashlib.sha256(weights).hexdigest() == sha256
    assert headers["X-Linked-Size"] == str(len(weights))

    status, headers, _ = http(hub, "HEAD", f"/{REPO}/resolve/main/missing.bin")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"
    assert headers["X-Repo-Commit"] == pushed["second"]  # lets the client cache the absence
    status, _, _ = http(hub, "PUT", "/lfs-upload/" + "0" * 64)
    assert status == 403  # LFS uploads only for objects announced through the batch API


def test_repositories_survive_a_restart(tmp_path):
    with LocalHub(tmp_path / "hub") as hub:
        request = {"Authorization": "Bearer t", "Content-Type": "application/json"}
        req = urllib.request.Request(
            hub.endpoint + "/api/repos/create",
            data=json.dumps({"name": "kept", "organization": "zoo-tests", "type": "dataset"}).encode(),
            headers=request,
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            assert json.load(response)["url"] == f"{hub.endpoint}/datasets/zoo-tests/kept"
        _, _, before = http(hub, "GET", "/api/datasets/zoo-tests/kept")
    with pytest.raises(RuntimeError, match="not running"):
        hub.env(tmp_path / "cache")
    with LocalHub(tmp_path / "hub") as hub:
        status, _, after = http(hub, "GET", "/api/datasets/zoo-tests/kept")
        assert status == 200 and json.loads(after)["sha"] == json.loads(before)["sha"]
        status, headers, _ = http(hub, "GET", "/api/models/zoo-tests/kept")
        assert status == 404 and headers["X-Error-Code"] == "RepoNotFound"  # repo types are separate
