"""The local Hub's storage: git-like repositories on disk, one JSON state file per repository.

Layout under the root directory::

    blobs/<sha256>                       every file content ever committed, addressed by its sha256
    repos/<type>s/<namespace>/<name>.json  a repository: its commits, branches and tags

A commit has a 40-hex id, its parent and the full listing of its files (path -> sha256, size, git blob id
and whether it is stored through LFS), so any past commit still resolves to the content it had. Branches and
tags are names pointing at commits. All mutations go through one lock and are written atomically.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files of 10 MB and more through LFS
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"


class HubError(Exception):
    """A request the Hub refuses: HTTP status, message, the ``X-Error-Code`` the client maps to an error."""

    def __init__(
        self,
        status: int,
        message: str,
        error_code: str | None = None,
        commit: str | None = None,
        extra: dict | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code
        self.commit = commit  # sent as X-Repo-Commit (the client caches "file does not exist at this commit")
        self.extra = extra or {}  # more fields of the JSON body


def repo_not_found(repo_type: str, repo_id: str) -> HubError:
    return HubError(404, f"Repository not found: {repo_type} '{repo_id}'.", "RepoNotFound")


def git_blob_id(content: bytes) -> str:
    """The id git gives a file: sha1 of ``blob <size>\\0<content>``."""
    return hashlib.sha1(b"blob %d\x00" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The small text file git stores in place of an LFS file."""
    return LFS_POINTER.format(sha256=sha256, size=size).encode()


def is_lfs_content(path: str, size: int, sample: bytes) -> bool:
    """Whether the Hub would store this file through LFS: large, or binary (a NUL byte in its first bytes)."""
    return size >= LFS_SIZE_THRESHOLD or b"\x00" in sample


def is_ignored(path: str, gitignore: str | None) -> bool:
    """Whether ``path`` matches a pattern of a ``.gitignore`` (glob patterns on the path or its file name)."""
    if not gitignore:
        return False
    name = path.rsplit("/", 1)[-1]
    for line in gitignore.splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        pattern = pattern.lstrip("/").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(name, pattern) or path.startswith(pattern + "/"):
            return True
    return False


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class FileEntry:
    """One file of a commit: its content's sha256 and size, its git blob id and whether it is an LFS file.

    The git blob id is that of the content for a regular file, of the LFS pointer for an LFS file.
    """

    path: str
    sha256: str
    size: int
    lfs: bool
    blob_id: str

    @classmethod
    def regular(cls, path: str, sha256: str, content: bytes) -> FileEntry:
        return cls(path, sha256, len(content), False, git_blob_id(content))

    @classmethod
    def large(cls, path: str, sha256: str, size: int) -> FileEntry:
        return cls(path, sha256, size, True, git_blob_id(lfs_pointer(sha256, size)))

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "size": self.size, "lfs": self.lfs, "oid": self.blob_id}

    @classmethod
    def from_json(cls, path: str, raw: dict) -> FileEntry:
        return cls(path, raw["sha256"], raw["size"], raw["lfs"], raw["oid"])


class RepoStore:
    """All repositories of one local Hub, persisted under ``root``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.pending_lfs: dict[str, int] = {}  # sha256 -> size announced through the LFS batch API

    # ---- blobs -------------------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256

    def has_blob(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def put_blob(self, content: bytes) -> str:
        """Store ``content``; returns its sha256."""
        sha256 = hashlib.sha256(content).hexdigest()
        path = self.blob_path(sha256)
        if not path.is_file():
            tmp = path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_bytes(content)
            os.replace(tmp, path)
        return sha256

    def read_blob(self, sha256: str) -> bytes:
        return self.blob_path(sha256).read_bytes()

    # ---- repositories ------------------------------------------------------------------------------------
    def _state_path(self, repo_type: str, repo_id: str) -> Path:
        namespace, name = repo_id.split("/")
        return self.root / "repos" / f"{repo_type}s" / namespace / f"{name}.json"

    def load(self, repo_type: str, repo_id: str) -> dict:
        """The state of a repository, or RepoNotFound."""
        if repo_type not in REPO_TYPES or repo_id.count("/") != 1:
            raise repo_not_found(repo_type, repo_id)
        path = self._state_path(repo_type, repo_id)
        if not path.is_file():
            raise repo_not_found(repo_type, repo_id)
        return json.loads(path.read_text())

    def save(self, repo_type: str, repo_id: str, state: dict) -> None:
        path = self._state_path(repo_type, repo_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, path)

    def exists(self, repo_type: str, repo_id: str) -> bool:
        return repo_type in REPO_TYPES and self._state_path(repo_type, repo_id).is_file()

    def create(self, repo_type: str, repo_id: str, private: bool, author: str) -> None:
        """A new repository with one initial commit (a ``.gitattributes``, as on the Hub) on ``main``."""
        with self.lock:
            if self.exists(repo_type, repo_id):
                raise HubError(409, f"You already created this {repo_type} repo: '{repo_id}'.")
            state = {
                "id": repo_id,
                "type": repo_type,
                "private": private,
                "createdAt": now_iso(),
                "branches": {},
                "tags": {},
                "commits": {},
            }
            gitattributes = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
            sha256 = self.put_blob(gitattributes)
            files = {".gitattributes": FileEntry.regular(".gitattributes", sha256, gitattributes).to_json()}
            commit = self._new_commit(state, None, files, "initial commit", "", author)
            state["branches"][DEFAULT_BRANCH] = commit
            self.save(repo_type, repo_id, state)

    def delete(self, repo_type: str, repo_id: str) -> None:
        with self.lock:
            self.load(repo_type, repo_id)
            self._state_path(repo_type, repo_id).unlink()

    # ---- revisions ---------------------------------------------------------------------------------------
    @staticmethod
    def resolve(state: dict, revision: str) -> str:
        """The commit a branch, tag, ``refs/heads/<b>``, ``refs/tags/<t>`` or commit id (or prefix) names."""
        name = revision
        for prefix, table in (("refs/heads/", "branches"), ("refs/tags/", "tags")):
            if name.startswith(prefix) and name[len(prefix) :] in state[table]:
                return state[table][name[len(prefix) :]]
        if name in state["branches"]:
            return state["branches"][name]
        if name in state["tags"]:
            return state["tags"][name]
        if 7 <= len(name) <= 40 and all(c in "0123456789abcdef" for c in name):
            matches = [sha for sha in state["commits"] if sha.startswith(name)]
            if len(matches) == 1:
                return matches[0]
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def files(self, state: dict, commit: str) -> dict[str, FileEntry]:
        return {
            path: FileEntry.from_json(path, raw) for path, raw in state["commits"][commit]["files"].items()
        }

    def _new_commit(
        self, state: dict, parent: str | None, files: dict, title: str, description: str, author: str
    ) -> str:
        date = now_iso()
        payload = json.dumps([parent, files, title, description, date, len(state["commits"])], sort_keys=True)
        sha = hashlib.sha1(payload.encode()).hexdigest()
        state["commits"][sha] = {
            "parent": parent,
            "title": title,
            "message": description,
            "date": date,
            "author": author,
            "files": files,
        }
        return sha

    def commit(
        self,
        repo_type: str,
        repo_id: str,
        branch: str,
        operations: list[dict],
        title: str,
        description: str,
        parent_commit: str | None,
        author: str,
    ) -> str:
        """Apply the commit API's operations on top of ``branch``; returns the new commit id.

        An operation is ``{"key": "file", "value": {"path", "content" (base64 decoded to bytes)}}``,
        ``{"key": "lfsFile", "value": {"path", "oid", "size"}}``, ``deletedFile`` or ``deletedFolder``.
        """
        with self.lock:
            state = self.load(repo_type, repo_id)
            if branch not in state["branches"]:
                raise HubError(
                    404, f"Invalid rev id: {branch} (commits go to an existing branch)", "RevisionNotFound"
                )
            head = state["branches"][branch]
            if parent_commit is not None and not head.startswith(parent_commit):
                raise HubError(
                    412,
                    f"A commit has happened since. Please refresh and try again ('{branch}' is at {head}).",
                )
            files = dict(state["commits"][head]["files"])
            for op in operations:
                key, value = op["key"], op["value"]
                path = value["path"]
                if key == "file":
                    content = value["content"]
                    sha256 = self.put_blob(content)
                    files[path] = FileEntry.regular(path, sha256, content).to_json()
                elif key == "lfsFile":
                    sha256 = value["oid"]
                    if not self.has_blob(sha256):
                        raise HubError(422, f"LFS file '{path}' (sha256 {sha256}) was never uploaded.")
                    size = self.blob_path(sha256).stat().st_size
                    files[path] = FileEntry.large(path, sha256, size).to_json()
                elif key == "deletedFile":
                    if path not in files:
                        raise HubError(
                            404, f"A file with this name doesn't exist: '{path}'.", "EntryNotFound"
                        )
                    del files[path]
                elif key == "deletedFolder":
                    prefix = path.rstrip("/") + "/"
                    doomed = [p for p in files if p.startswith(prefix)]
                    if not doomed:
                        raise HubError(
                            404, f"A folder with this name doesn't exist: '{path}'.", "EntryNotFound"
                        )
                    for p in doomed:
                        del files[p]
                else:
                    raise HubError(400, f"Unknown commit operation '{key}'.")
            sha = self._new_commit(state, head, files, title, description, author)
            state["branches"][branch] = sha
            self.save(repo_type, repo_id, state)
            return sha

    def create_ref(self, repo_type: str, repo_id: str, kind: str, name: str, revision: str) -> str:
        """A new branch or tag (``kind``: ``"branches"`` or ``"tags"``) at ``revision``; 409 if it exists."""
        with self.lock:
            state = self.load(repo_type, repo_id)
            if name in state[kind]:
                raise HubError(409, f"Reference already exists: {name}.")
            if not name or name.startswith("refs/") or any(c in name for c in " ~^:?*[\\"):
                raise HubError(400, f"Invalid reference name: '{name}'.")
            target = self.resolve(state, revision)
            state[kind][name] = target
            self.save(repo_type, repo_id, state)
            return target

    def delete_ref(self, repo_type: str, repo_id: str, kind: str, name: str) -> None:
        with self.lock:
            state = self.load(repo_type, repo_id)
            if name not in state[kind]:
                raise HubError(404, f"Invalid rev id: {name}", "RevisionNotFound")
            if kind == "branches" and name == DEFAULT_BRANCH:
                raise HubError(403, "The default branch cannot be deleted.")
            del state[kind][name]
            self.save(repo_type, repo_id, state)

    def history(self, state: dict, commit: str) -> list[tuple[str, dict]]:
        """Commits from ``commit`` back to the first one."""
        out = []
        sha: str | None = commit
        while sha is not None:
            out.append((sha, state["commits"][sha]))
            sha = state["commits"][sha]["parent"]
        return out

    def last_commit_touching(self, state: dict, commit: str, path: str) -> tuple[str, dict]:
        """The latest commit (from ``commit`` back) that changed ``path`` (a file, or a folder's files)."""
        chain = self.history(state, commit)

        def view(files: dict) -> dict:
            return {p: f["sha256"] for p, f in files.items() if p == path or p.startswith(path + "/")}

        for (sha, info), (_, parent_info) in zip(chain, chain[1:]):
            if view(info["files"]) != view(parent_info["files"]):
                return sha, info
        return chain[-1]
