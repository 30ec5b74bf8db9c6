"""The local Hub and the real ``huggingface_hub`` client: push, download, pinned revisions, offline, errors.

Client code runs in subprocesses (``HF_ENDPOINT`` / ``HF_HUB_OFFLINE`` are read at import) and prints one JSON
line with what it saw; the server's raw HTTP answers are checked with ``urllib``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import textwrap
import urllib.error
import urllib.request

import pytest
from local_hub import EMIT, LocalHub, run_client_code
from local_hub.fixtures import local_hub  # noqa: F401

REPO = "hub-tests/tiny-model"
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
    prelude = "import json, sys\nPARAMS = json.loads(sys.argv[2])\n" + EMIT
    cache.mkdir(parents=True, exist_ok=True)
    return run_client_code(
        prelude + textwrap.dedent(script),
        hub.env(cache, offline=offline, token=token),
        args=(str(cache), json.dumps(params)),
        timeout=120,
    )


@pytest.fixture(scope="module")
def pushed(local_hub, tmp_path_factory):  # noqa: F811
    """The repository pushed once for the module: weights + config, card, then a commit of a new config."""
    work = tmp_path_factory.mktemp("push")
    out = run_client(local_hub, work, PUSH, repo=REPO, config_v1=CONFIG_V1, config_v2=CONFIG_V2)
    return {**out, "hub": local_hub}


def raw_request(hub: LocalHub, method: str, path: str, headers=None, base: str | None = None, data=None):
    """One raw request to the server (redirects not followed): ``(status, headers, body)``."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    url = (base or hub.endpoint) + path
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
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
    from safetensors.numpy import load_file

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
        unknown_repo=outcome(lambda: hf_hub_download("hub-tests/no-such-model", "config.json")),
        unknown_repo_info=outcome(lambda: api.model_info("hub-tests/no-such-model")),
        unknown_file=outcome(lambda: hf_hub_download(repo, "no-such-file.json")),
        unknown_revision=outcome(lambda: hf_hub_download(repo, "config.json", revision="no-such-branch")),
        unknown_pinned=outcome(lambda: hf_hub_download(repo, "config.json", revision="0" * 40)),
        unknown_tree_revision=outcome(lambda: api.list_repo_files(repo, revision="no-such-branch")),
        exists=[api.repo_exists(repo), api.repo_exists("hub-tests/no-such-model"),
                api.file_exists(repo, "config.json"), api.file_exists(repo, "no-such-file.json")],
        duplicate=outcome(lambda: api.create_repo(repo)),
        duplicate_ok=outcome(lambda: api.create_repo(repo, exist_ok=True)),
        stale_parent=outcome(lambda: api.upload_file(
            path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, parent_commit=PARAMS["first"])),
        pull_request=outcome(lambda: api.upload_file(
            path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, create_pr=True)),
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
        create=status(lambda: api.create_repo("hub-tests/anonymous")),
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
    assert got["pull_request"] == "HTTP 501"  # said plainly rather than committed to main


def test_writes_without_a_token_are_refused_reads_are_not(pushed, tmp_path):
    got = run_client(pushed["hub"], tmp_path / "cache", NO_TOKEN, token=None, repo=REPO)
    assert got == {"create": 401, "upload": 401, "delete": 401, "read": "ok"}
    status, _, _ = raw_request(pushed["hub"], "GET", f"/api/models/{REPO}")
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
    status, headers, _ = raw_request(pushed["hub"], "HEAD", f"/{REPO}/resolve/v1/config.json")
    assert status == 404 and headers["X-Error-Code"] == "RevisionNotFound"  # the tag was deleted


def test_resolve_headers_redirects_and_ranges(pushed):
    hub = pushed["hub"]
    status, headers, body = raw_request(hub, "HEAD", f"/{REPO}/resolve/main/config.json")
    content = json.dumps(CONFIG_V2).encode()
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == pushed["second"] and headers["Content-Length"] == str(len(content))
    git_blob_id = hashlib.sha1(b"blob %d\x00" % len(content) + content).hexdigest()
    assert headers["ETag"] == f'"{git_blob_id}"'
    status, headers, body = raw_request(
        hub, "GET", f"/{REPO}/resolve/{pushed['first']}/config.json", {"Range": "bytes=2-7"}
    )
    assert status == 206 and body == json.dumps(CONFIG_V1).encode()[2:8]
    assert headers["Content-Range"] == f"bytes 2-7/{len(json.dumps(CONFIG_V1))}"
    last = raw_request(hub, "GET", f"/{REPO}/resolve/main/config.json", {"Range": "bytes=-3"})
    assert last[0] == 206 and last[2] == content[-3:]
    beyond = raw_request(hub, "GET", f"/{REPO}/resolve/main/config.json", {"Range": f"bytes={len(content)}-"})
    assert beyond[0] == 416

    status, headers, _ = raw_request(hub, "HEAD", f"/{REPO}/resolve/main/model.safetensors")
    assert status == 302 and headers["X-Repo-Commit"] == pushed["second"]
    sha256 = headers["X-Linked-Etag"].strip('"')
    cdn = headers["Location"].split("/" + sha256)[0]
    assert cdn != hub.endpoint  # another origin: the client does not send its token there
    status, _, weights = raw_request(hub, "GET", "/" + sha256, base=cdn)
    assert status == 200 and hashlib.sha256(weights).hexdigest() == sha256
    assert headers["X-Linked-Size"] == str(len(weights))

    status, headers, _ = raw_request(hub, "HEAD", f"/{REPO}/resolve/main/missing.bin")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"
    assert headers["X-Repo-Commit"] == pushed["second"]  # lets the client cache the absence
    status, _, _ = raw_request(hub, "PUT", "/lfs-upload/" + "0" * 64)
    assert status == 403  # LFS uploads only for objects announced through the batch API


def test_repositories_survive_a_restart(tmp_path):
    with LocalHub(tmp_path / "hub") as hub:
        request = {"Authorization": "Bearer t", "Content-Type": "application/json"}
        req = urllib.request.Request(
            hub.endpoint + "/api/repos/create",
            data=json.dumps({"name": "kept", "organization": "hub-tests", "type": "dataset"}).encode(),
            headers=request,
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            assert json.load(response)["url"] == f"{hub.endpoint}/datasets/hub-tests/kept"
        _, _, before = raw_request(hub, "GET", "/api/datasets/hub-tests/kept")
    with pytest.raises(RuntimeError, match="not running"):
        hub.env(tmp_path / "cache")
    with LocalHub(tmp_path / "hub") as hub:
        status, _, after = raw_request(hub, "GET", "/api/datasets/hub-tests/kept")
        assert status == 200 and json.loads(after)["sha"] == json.loads(before)["sha"]
        status, headers, _ = raw_request(hub, "GET", "/api/models/hub-tests/kept")
        assert status == 404 and headers["X-Error-Code"] == "RepoNotFound"  # repo types are separate


MIXIN_MODEL = """
    import torch
    from huggingface_hub import PyTorchModelHubMixin

    class TinyModel(torch.nn.Module, PyTorchModelHubMixin, library_name="structured-zoo", tags=["hmm"]):
        def __init__(self, num_states: int = 2):  # pushed with 3: config.json must come back
            super().__init__()
            self.logits = torch.nn.Parameter(torch.zeros(num_states))
"""


MIXIN_LOAD = """
    def load(first):
        latest = TinyModel.from_pretrained(PARAMS["repo"])
        pinned = TinyModel.from_pretrained(PARAMS["repo"], revision=first)
        return {"latest": latest.logits.tolist(), "pinned": pinned.logits.tolist()}
"""

MIXIN_PUSH_AND_LOAD = """
    model = TinyModel(num_states=3)
    with torch.no_grad():
        model.logits.copy_(torch.tensor([0.5, -1.0, 2.0]))
    first = model.push_to_hub(PARAMS["repo"], commit_message="First weights").oid
    with torch.no_grad():
        model.logits.mul_(2)
    model.push_to_hub(PARAMS["repo"], commit_message="Doubled")
    emit(first=first, **load(first))  # pushing does not fill the cache: this downloads into an empty one
"""


def test_pytorch_model_hub_mixin_round_trip_by_repo_id_pinned_revision_and_offline(local_hub, tmp_path):  # noqa: F811
    """``push_to_hub`` / ``from_pretrained`` of the client's own mixin: config and weights come back."""
    repo, cache = "hub-tests/mixin-model", tmp_path / "cache"
    online = run_client(local_hub, cache, MIXIN_MODEL + MIXIN_LOAD + MIXIN_PUSH_AND_LOAD, repo=repo)
    first = online.pop("first")
    assert online == {"latest": [1.0, -2.0, 4.0], "pinned": [0.5, -1.0, 2.0]}
    offline_load = MIXIN_MODEL + MIXIN_LOAD + "\n    emit(**load(PARAMS['first']))\n"
    assert run_client(local_hub, cache, offline_load, offline=True, repo=repo, first=first) == online


LAYOUT = """
    from pathlib import Path
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    api, repo = HfApi(), PARAMS["repo"]
    api.create_repo(repo)
    api.upload_file(path_or_fileobj=b"*.tmp\\n", path_in_repo=".gitignore", repo_id=repo)
    folder = Path(sys.argv[1]) / "layout"
    for path in ["a.txt", "sub/b.txt", "sub/deep/c.txt", "scratch.tmp", "tokens.npy"]:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(path)
    api.upload_folder(repo_id=repo, folder_path=folder)

    def listing(entries):
        return [[type(e).__name__, e.path, getattr(e, "lfs", None) is not None] for e in entries]

    top, sub = listing(api.list_repo_tree(repo)), listing(api.list_repo_tree(repo, path_in_repo="sub"))
    paths = listing(api.get_paths_info(repo, ["a.txt", "sub", "nope", "tokens.npy"]))
    api.delete_file("a.txt", repo)
    api.delete_folder("sub/deep", repo)
    try:
        api.delete_file("a.txt", repo)
        missing = None
    except EntryNotFoundError as error:
        missing = type(error).__name__
    api.create_repo(PARAMS["secret"], private=True)
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=PARAMS["secret"])
    api.create_repo(PARAMS["doomed"])
    api.delete_repo(PARAMS["doomed"])
    api.create_repo(PARAMS["data"], repo_type="dataset")
    api.upload_file(path_or_fileobj=b"a b c\\n", path_in_repo="train.txt", repo_id=PARAMS["data"],
                    repo_type="dataset")
    with open(hf_hub_download(PARAMS["data"], "train.txt", repo_type="dataset")) as f:
        train = f.read()
    emit(top=top, sub=sub, paths=paths, after=api.list_repo_files(repo), missing=missing,
         secret=hf_hub_download(PARAMS["secret"], "config.json") is not None, user=api.whoami()["name"],
         deleted=[api.repo_exists(PARAMS["doomed"]), api.repo_exists(PARAMS["data"], repo_type="dataset"),
                  api.repo_exists(PARAMS["data"])], train=train)
"""

ANONYMOUS_READ = """
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError

    def outcome(call):
        try:
            call()
            return "ok"
        except RepositoryNotFoundError as error:
            return type(error).__name__

    api = HfApi()
    emit(info=outcome(lambda: api.model_info(PARAMS["secret"])),
         file=outcome(lambda: hf_hub_download(PARAMS["secret"], "config.json")),
         public=outcome(lambda: api.model_info(PARAMS["repo"])))
"""


def test_folders_deletions_gitignore_and_private_repos(local_hub, tmp_path):  # noqa: F811
    repos = {"repo": "hub-tests/layout", "secret": "hub-tests/secret", "doomed": "hub-tests/doomed"}
    repos["data"] = "hub-tests/corpus"
    got = run_client(local_hub, tmp_path / "owner", LAYOUT, **repos)
    assert got["top"] == [
        ["RepoFolder", "sub", False],
        ["RepoFile", ".gitattributes", False],
        ["RepoFile", ".gitignore", False],
        ["RepoFile", "a.txt", False],
        ["RepoFile", "tokens.npy", True],  # text, but .gitattributes sends *.npy to LFS
    ]  # scratch.tmp was ignored by the repository's .gitignore
    assert got["sub"] == [["RepoFolder", "sub/deep", False], ["RepoFile", "sub/b.txt", False]]
    assert got["paths"] == [
        ["RepoFile", "a.txt", False],
        ["RepoFolder", "sub", False],
        ["RepoFile", "tokens.npy", True],
    ]
    assert got["after"] == [".gitattributes", ".gitignore", "sub/b.txt", "tokens.npy"]
    assert got["missing"] == "RemoteEntryNotFoundError" and got["secret"] and got["user"] == "test-user"
    assert got["deleted"] == [False, True, False]  # deleted; a dataset is not a model of the same name
    assert got["train"] == "a b c\n"
    anonymous = run_client(local_hub, tmp_path / "anonymous", ANONYMOUS_READ, token=None, **repos)
    assert anonymous == {"info": "RepositoryNotFoundError", "file": "RepositoryNotFoundError", "public": "ok"}


def test_chunked_request_bodies_are_read(pushed):
    """The client streams some uploads without a Content-Length (``Transfer-Encoding: chunked``)."""
    host, port = pushed["hub"].endpoint.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    payload = json.dumps({"content": "---\nlicense: mit\n---\n# Card\n", "repoType": "model"}).encode()
    connection.request(
        "POST", "/api/validate-yaml", body=iter([payload[:10], payload[10:]]), encode_chunked=True
    )
    response = connection.getresponse()
    assert response.status == 200 and json.load(response) == {"errors": [], "warnings": []}
    connection.request("POST", "/api/validate-yaml", body=json.dumps({"content": "---\nlicense: mit\n"}))
    response = connection.getresponse()  # same connection: the chunked body was consumed to its end
    assert response.status == 400 and "not closed" in response.read().decode()
    connection.close()


def test_malformed_requests_get_clear_errors(pushed):
    hub, auth = pushed["hub"], {"Authorization": "Bearer t"}

    def post(path: str, payload, headers=auth) -> tuple[int, str]:
        status, _, body = raw_request(hub, "POST", path, headers, data=payload)
        return status, json.loads(body)["error"]

    status, error = post(
        "/api/repos/create", json.dumps({"name": "..", "organization": "hub-tests"}).encode()
    )
    assert status == 400 and "Invalid repo id 'hub-tests/..'" in error
    status, error = post("/api/repos/create", json.dumps({"name": "x", "type": "bucket"}).encode())
    assert status == 400 and "Invalid repo type 'bucket'" in error
    batch = {"operation": "upload", "objects": [{"oid": "../../etc", "size": 3}]}
    status, error = post(f"/{REPO}.git/info/lfs/objects/batch", json.dumps(batch).encode())
    assert status == 400 and "expected a sha256" in error
    header = {"key": "header", "value": {"summary": "ghost"}}
    ghost = {"key": "lfsFile", "value": {"path": "ghost.bin", "algo": "sha256", "oid": "a" * 64, "size": 3}}
    status, error = post(
        f"/api/models/{REPO}/commit/main", b"\n".join(json.dumps(x).encode() for x in (header, ghost))
    )
    assert status == 422 and "never uploaded" in error
    status, error = post(f"/api/models/{REPO}/commit/main", b"not json")
    assert status == 400 and "Bad request" in error
    status, error = post(f"/api/models/{REPO}/preupload/main", json.dumps({"files": 3}).encode())
    assert status == 400 and "Bad request" in error
    status, error = post(f"/api/models/{REPO}/no-such-action", b"")
    assert status == 404 and "No route" in error
    status, error = post("/api/repos/create", json.dumps({"name": "x"}).encode(), headers={})
    assert status == 401
