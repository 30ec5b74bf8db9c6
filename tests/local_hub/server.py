"""A local Hugging Face Hub for the tests: the HTTP endpoints the real ``huggingface_hub`` client calls.

A test double, not a product: one user, any bearer token accepted for writes, no pull requests, no Xet.
Run it as ``python tests/local_hub/server.py --root DIR --port 0``; it prints ``LISTENING http://127.0.0.1:PORT``
once ready. Point ``HF_ENDPOINT`` at that URL (and set ``HF_HUB_DISABLE_XET=1``) before importing
``huggingface_hub``. See README.md beside this file for the endpoints it speaks.

Large and binary files go through LFS as on the Hub: the client asks the LFS batch API where to PUT the
content, and ``/resolve`` answers them with a redirect to a second listening port standing for the CDN
(another origin, so the client neither follows the redirect on HEAD nor sends its token there).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

if __package__:
    from .store import DEFAULT_BRANCH, HubError, RepoStore, is_ignored, is_lfs_content, lfs_pointer
else:  # run as a script
    from store import DEFAULT_BRANCH, HubError, RepoStore, is_ignored, is_lfs_content, lfs_pointer

USER = "test-user"
TYPE_PREFIXES = {"datasets": "dataset", "spaces": "space", "models": "model"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body, whether sent with a Content-Length or chunked."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``bytes=START-[END]`` or ``bytes=-SUFFIX`` as a half-open ``(start, end)``; None for the whole file."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    start_text, _, end_text = header[len("bytes=") :].partition("-")
    if not start_text:
        return max(0, size - int(end_text)), size
    start = int(start_text)
    end = min(size, int(end_text) + 1) if end_text else size
    if start >= size or start >= end:
        raise HubError(416, f"Range {header} not satisfiable for a file of {size} bytes.")
    return start, end


class Response:
    """What a route answers: status, headers and body (``json`` is serialised)."""

    def __init__(self, status: int = 200, body: bytes | None = None, json_body=None, headers=None):
        self.status = status
        self.headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            self.headers.setdefault("Content-Type", "application/json; charset=utf-8")
        self.body = body if body is not None else b""


class HubApp:
    """The routes of the Hub origin, over one RepoStore. ``cdn_url`` is where LFS downloads are redirected."""

    def __init__(self, store: RepoStore):
        self.store = store
        self.endpoint = ""
        self.cdn_url = ""

    # ---- dispatch ----------------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers, body: bytes) -> Response:
        url = urlsplit(raw_path)
        query = parse_qs(url.query)
        segments = url.path.strip("/").split("/")
        token = self._token(headers)
        if segments[0] == "api":
            return self._api(method, segments[1:], query, headers, body, token)
        if segments[0] == "lfs-upload" and len(segments) == 2 and method == "PUT":
            return self._lfs_put(segments[1], body)
        repo_type, rest = self._split_type(segments, TYPE_PREFIXES, url_style=True)
        if len(rest) >= 5 and rest[2] == "resolve" and method in ("GET", "HEAD"):
            repo_id = "/".join(rest[:2])
            return self._resolve(
                repo_type, repo_id, unquote(rest[3]), unquote("/".join(rest[4:])), headers, token
            )
        if len(rest) == 6 and rest[1].endswith(".git") and rest[2:] == ["info", "lfs", "objects", "batch"]:
            repo_id = f"{rest[0]}/{rest[1][: -len('.git')]}"
            return self._lfs_batch(repo_type, repo_id, json.loads(body or b"{}"), token, headers)
        raise HubError(404, f"No route for {method} {url.path}.")

    @staticmethod
    def _split_type(segments: list[str], prefixes: dict, url_style: bool) -> tuple[str, list[str]]:
        """``[datasets, ns, name, ...]`` -> ``("dataset", [ns, name, ...])``; model URLs: no prefix."""
        if segments and segments[0] in prefixes and (not url_style or segments[0] != "models"):
            return prefixes[segments[0]], segments[1:]
        if url_style:
            return "model", segments
        raise HubError(404, f"Unknown repository type '{segments[0] if segments else ''}'.")

    @staticmethod
    def _token(headers) -> str | None:
        auth = headers.get("Authorization", "")
        if auth.lower().startswith("bearer ") and auth[len("bearer ") :].strip():
            return auth[len("bearer ") :].strip()
        return None

    @staticmethod
    def _require_token(token: str | None) -> None:
        if token is None:
            raise HubError(401, "Invalid username or password.")

    def _state(self, repo_type: str, repo_id: str, token: str | None) -> dict:
        """A repository's state; a private one is invisible without a token (RepoNotFound, as on the Hub)."""
        state = self.store.load(repo_type, repo_id)
        if state["private"] and token is None:
            raise HubError(404, f"Repository not found: {repo_type} '{repo_id}'.", "RepoNotFound")
        return state

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.endpoint}/{URL_PREFIXES[repo_type]}{repo_id}"

    # ---- /api --------------------------------------------------------------------------------------------
    def _api(self, method: str, segments: list[str], query: dict, headers, body: bytes, token) -> Response:
        route = (method, "/".join(segments))
        if route == ("GET", "whoami-v2"):
            self._require_token(token)
            return Response(
                json_body={"type": "user", "name": USER, "fullname": USER, "orgs": [], "auth": {}}
            )
        if route == ("POST", "validate-yaml"):
            return self._validate_yaml(json.loads(body))
        if route == ("POST", "repos/create"):
            self._require_token(token)
            return self._create_repo(json.loads(body))
        if route == ("DELETE", "repos/delete"):
            self._require_token(token)
            payload = json.loads(body)
            repo_type = payload.get("type") or "model"
            self.store.delete(repo_type, f"{payload.get('organization') or USER}/{payload['name']}")
            return Response(json_body={})
        repo_type, rest = self._split_type(segments, TYPE_PREFIXES, url_style=False)
        if len(rest) < 2:
            raise HubError(404, f"No route for {method} /api/{'/'.join(segments)}.")
        repo_id, action, args = "/".join(rest[:2]), (rest[2] if len(rest) > 2 else ""), rest[3:]
        if method == "GET" and action == "":
            return self._info(repo_type, repo_id, DEFAULT_BRANCH, query, token)
        if method == "GET" and action == "revision" and len(args) == 1:
            return self._info(repo_type, repo_id, unquote(args[0]), query, token)
        if method == "GET" and action == "tree" and args:
            path = unquote("/".join(args[1:]))
            return self._tree(repo_type, repo_id, unquote(args[0]), path, query, token)
        if method == "POST" and action == "paths-info" and len(args) == 1:
            return self._paths_info(repo_type, repo_id, unquote(args[0]), parse_qs(body.decode()), token)
        if method == "GET" and action == "refs":
            return self._refs(repo_type, repo_id, token)
        if method == "GET" and action == "commits" and len(args) == 1:
            return self._commits(repo_type, repo_id, unquote(args[0]), token)
        if method == "POST" and action == "preupload" and len(args) == 1:
            self._require_token(token)
            return self._preupload(repo_type, repo_id, unquote(args[0]), json.loads(body), query)
        if method == "POST" and action == "commit" and len(args) == 1:
            self._require_token(token)
            return self._commit(repo_type, repo_id, unquote(args[0]), body, query)
        if action in ("branch", "tag") and len(args) == 1 and method in ("POST", "DELETE"):
            self._require_token(token)
            return self._ref_change(method, action, repo_type, repo_id, unquote(args[0]), body)
        raise HubError(404, f"No route for {method} /api/{'/'.join(segments)}.")

    def _validate_yaml(self, payload: dict) -> Response:
        """The card's metadata block must be closed; an empty one gets the Hub's warning."""
        lines = payload.get("content", "").splitlines()
        if not lines or lines[0].strip() != "---":
            return Response(
                json_body={"errors": [], "warnings": [{"message": "empty or missing yaml metadata"}]}
            )
        if "---" not in (line.strip() for line in lines[1:]):
            return Response(
                400, json_body={"errors": [{"message": "The YAML metadata block is not closed."}]}
            )
        return Response(json_body={"errors": [], "warnings": []})

    def _create_repo(self, payload: dict) -> Response:
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        private = payload.get("visibility", "public") == "private" or bool(payload.get("private"))
        url = self._repo_url(repo_type, repo_id)
        try:
            self.store.create(repo_type, repo_id, private=private, author=USER)
        except HubError as error:
            error.extra["url"] = url  # the Hub's 409 names the existing repository
            raise
        return Response(json_body={"url": url, "name": repo_id, "id": repo_id})

    def _info(self, repo_type: str, repo_id: str, revision: str, query: dict, token) -> Response:
        """Model / dataset / space info at a revision: its commit id and the listing of its files."""
        state = self._state(repo_type, repo_id, token)
        commit = self.store.resolve(state, revision)
        files = self.store.files(state, commit)
        with_blobs = query.get("blobs", ["False"])[0].lower() in ("1", "true")
        siblings = []
        for path in sorted(files):
            entry = files[path]
            sibling = {"rfilename": path}
            if with_blobs:
                sibling.update(size=entry.size, blobId=entry.blob_id)
                if entry.lfs:
                    pointer_size = len(lfs_pointer(entry.sha256, entry.size))
                    sibling["lfs"] = {"sha256": entry.sha256, "size": entry.size, "pointerSize": pointer_size}
            siblings.append(sibling)
        info = {
            "_id": hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit,
            "lastModified": state["commits"][commit]["date"],
            "createdAt": state["createdAt"],
            "private": state["private"],
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
        }
        return Response(json_body=info)

    def _path_info(self, state: dict, commit: str, path: str, entry, expand: bool, is_dir: bool) -> dict:
        if is_dir:
            tree = sorted(
                (p, f.blob_id) for p, f in self.store.files(state, commit).items() if p.startswith(path + "/")
            )
            item = {
                "type": "directory",
                "oid": hashlib.sha1(json.dumps(tree).encode()).hexdigest(),
                "size": 0,
            }
        else:
            item = {"type": "file", "oid": entry.blob_id, "size": entry.size}
            if entry.lfs:
                pointer_size = len(lfs_pointer(entry.sha256, entry.size))
                item["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": pointer_size}
        item["path"] = path
        if expand:
            sha, info = self.store.last_commit_touching(state, commit, path)
            item["lastCommit"] = {"id": sha, "title": info["title"], "date": info["date"]}
        return item

    def _tree(self, repo_type: str, repo_id: str, revision: str, path: str, query: dict, token) -> Response:
        """The files and folders under ``path`` (children only, or all descendants with ``recursive``)."""
        state = self._state(repo_type, repo_id, token)
        commit = self.store.resolve(state, revision)
        files = self.store.files(state, commit)
        recursive = query.get("recursive", ["False"])[0].lower() in ("1", "true")
        expand = query.get("expand", ["False"])[0].lower() in ("1", "true")
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        if prefix and not any(p.startswith(prefix) for p in files):
            raise HubError(
                404, f"Folder '{path}' does not exist at {commit}.", "EntryNotFound", commit=commit
            )
        folders, listed_files = set(), []
        for p in files:
            if not p.startswith(prefix):
                continue
            parts = p[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                if recursive or depth == 1:
                    folders.add(prefix + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                listed_files.append(p)
        items = [self._path_info(state, commit, f, None, expand, is_dir=True) for f in sorted(folders)]
        items += [
            self._path_info(state, commit, p, files[p], expand, is_dir=False) for p in sorted(listed_files)
        ]
        return Response(json_body=items)

    def _paths_info(self, repo_type: str, repo_id: str, revision: str, form: dict, token) -> Response:
        state = self._state(repo_type, repo_id, token)
        commit = self.store.resolve(state, revision)
        files = self.store.files(state, commit)
        expand = form.get("expand", ["False"])[0].lower() in ("1", "true")
        items = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in files:
                items.append(self._path_info(state, commit, path, files[path], expand, is_dir=False))
            elif any(p.startswith(path + "/") for p in files):
                items.append(self._path_info(state, commit, path, None, expand, is_dir=True))
        return Response(json_body=items)

    def _refs(self, repo_type: str, repo_id: str, token) -> Response:
        state = self._state(repo_type, repo_id, token)

        def refs(kind: str, prefix: str) -> list[dict]:
            return [
                {"name": name, "ref": f"{prefix}{name}", "targetCommit": sha}
                for name, sha in sorted(state[kind].items())
            ]

        branches, tags = refs("branches", "refs/heads/"), refs("tags", "refs/tags/")
        return Response(json_body={"branches": branches, "converts": [], "tags": tags, "pullRequests": []})

    def _commits(self, repo_type: str, repo_id: str, revision: str, token) -> Response:
        state = self._state(repo_type, repo_id, token)
        commit = self.store.resolve(state, revision)
        items = [
            {
                "id": sha,
                "title": info["title"],
                "message": info["message"],
                "authors": [{"user": info["author"]}],
                "date": info["date"],
            }
            for sha, info in self.store.history(state, commit)
        ]
        return Response(json_body=items)

    @staticmethod
    def _no_pull_requests(query: dict) -> None:
        if query.get("create_pr", ["0"])[0] not in ("0", "false", "False"):
            raise HubError(501, "The local test Hub does not implement pull requests (create_pr).")

    def _preupload(self, repo_type: str, repo_id: str, revision: str, payload: dict, query: dict) -> Response:
        """For each file: regular or LFS upload, whether a ``.gitignore`` ignores it, the id it has now."""
        self._no_pull_requests(query)
        state = self.store.load(repo_type, repo_id)
        commit = self.store.resolve(state, revision)
        files = self.store.files(state, commit)
        gitignore = payload.get("gitIgnore")
        if gitignore is None and ".gitignore" in files:
            gitignore = self.store.read_blob(files[".gitignore"].sha256).decode()
        answers = []
        for item in payload["files"]:
            path = item["path"]
            lfs = is_lfs_content(path, item["size"], base64.b64decode(item["sample"]))
            current = files.get(path)
            oid = None if current is None else (current.sha256 if current.lfs else current.blob_id)
            answers.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": is_ignored(path, gitignore),
                    "oid": oid,
                }
            )
        return Response(json_body={"files": answers, "commitOid": commit})

    def _commit(self, repo_type: str, repo_id: str, revision: str, body: bytes, query: dict) -> Response:
        """An ndjson commit: a header (summary, description, parentCommit), then one line per operation."""
        self._no_pull_requests(query)
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "A commit starts with a 'header' line.")
        header = lines[0]["value"]
        operations = []
        for line in lines[1:]:
            if line["key"] == "file":
                value = line["value"]
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"Unsupported encoding '{value['encoding']}' for '{value['path']}'.")
                line = {
                    "key": "file",
                    "value": {"path": value["path"], "content": base64.b64decode(value["content"])},
                }
            operations.append(line)
        sha = self.store.commit(
            repo_type,
            repo_id,
            revision,
            operations,
            title=header.get("summary", ""),
            description=header.get("description", ""),
            parent_commit=header.get("parentCommit"),
            author=USER,
        )
        commit_url = f"{self._repo_url(repo_type, repo_id)}/commit/{sha}"
        return Response(
            json_body={
                "success": True,
                "commitOid": sha,
                "commitUrl": commit_url,
                "hookOutput": "",
                "pullRequestUrl": None,
            }
        )

    def _ref_change(
        self, method: str, action: str, repo_type: str, repo_id: str, name: str, body: bytes
    ) -> Response:
        """Create a branch (``startingPoint``) or a tag (at the revision in the URL); delete either."""
        kind = "branches" if action == "branch" else "tags"
        if method == "DELETE":
            self.store.delete_ref(repo_type, repo_id, kind, name)
            return Response(json_body={})
        payload = json.loads(body or b"{}")
        if action == "branch":
            self.store.create_ref(
                repo_type, repo_id, kind, name, payload.get("startingPoint") or DEFAULT_BRANCH
            )
        else:  # POST /tag/{revision} with {"tag": name}
            self.store.create_ref(repo_type, repo_id, kind, payload["tag"], name)
        return Response(json_body={})

    # ---- LFS ---------------------------------------------------------------------------------------------
    def _lfs_batch(self, repo_type: str, repo_id: str, payload: dict, token, headers) -> Response:
        """Upload instructions: a PUT URL for each object the store does not have yet."""
        self._require_token(token)
        self.store.load(repo_type, repo_id)
        if payload.get("operation") != "upload":
            raise HubError(
                400, "The local test Hub's LFS batch API only answers uploads (downloads go via /resolve)."
            )
        objects = []
        for obj in payload["objects"]:
            oid, size = obj["oid"], obj["size"]
            answer = {"oid": oid, "size": size, "authenticated": True}
            if not self.store.has_blob(oid):
                with self.store.lock:
                    self.store.pending_lfs[oid] = size
                answer["actions"] = {
                    "upload": {"href": f"{self.endpoint}/lfs-upload/{oid}", "expires_in": 3600}
                }
            objects.append(answer)
        return Response(json_body={"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def _lfs_put(self, oid: str, body: bytes) -> Response:
        """The content of an LFS object announced by the batch API (checked against its sha256 and size)."""
        with self.store.lock:
            size = self.store.pending_lfs.get(oid)
        if size is None:
            raise HubError(403, f"No upload of LFS object {oid} was announced through the batch API.")
        if len(body) != size or hashlib.sha256(body).hexdigest() != oid:
            raise HubError(
                400, f"LFS object {oid}: content does not match the announced sha256 and size {size}."
            )
        self.store.put_blob(body)
        with self.store.lock:
            self.store.pending_lfs.pop(oid, None)
        return Response(200)

    # ---- downloads ---------------------------------------------------------------------------------------
    def _resolve(
        self, repo_type: str, repo_id: str, revision: str, filename: str, headers, token
    ) -> Response:
        """A file at a revision, with the headers the client's cache relies on (X-Repo-Commit, ETag, size)."""
        state = self._state(repo_type, repo_id, token)
        commit = self.store.resolve(state, revision)
        entry = self.store.files(state, commit).get(filename)
        if entry is None:
            raise HubError(404, f"Entry not found: '{filename}' at {commit}.", "EntryNotFound", commit=commit)
        meta = {"X-Repo-Commit": commit, "ETag": f'"{entry.blob_id}"', "Accept-Ranges": "bytes"}
        if entry.lfs:
            location = f"{self.cdn_url}/{entry.sha256}?filename={quote(filename.rsplit('/', 1)[-1])}"
            meta.update(
                {"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size), "Location": location}
            )
            return Response(302, body=f"Found. Redirecting to {location}".encode(), headers=meta)
        return content_response(self.store.read_blob(entry.sha256), headers.get("Range"), meta)


def content_response(content: bytes, range_header: str | None, headers: dict) -> Response:
    headers = {**headers, "Content-Type": "application/octet-stream"}
    span = parse_range(range_header, len(content))
    if span is None:
        return Response(200, body=content, headers=headers)
    start, end = span
    headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(content)}"
    return Response(206, body=content[start:end], headers=headers)


class Cdn:
    """The storage origin LFS downloads are redirected to: ``/<sha256>`` serves an object, no token."""

    def __init__(self, store: RepoStore):
        self.store = store

    def handle(self, method: str, raw_path: str, headers, body: bytes) -> Response:
        sha256 = urlsplit(raw_path).path.strip("/")
        if method not in ("GET", "HEAD") or "/" in sha256 or not self.store.has_blob(sha256):
            raise HubError(404, f"No object {sha256}.")
        return content_response(self.store.read_blob(sha256), headers.get("Range"), {"ETag": f'"{sha256}"'})


def make_handler(app) -> type[BaseHTTPRequestHandler]:
    """An HTTP/1.1 handler answering every method through ``app.handle``; errors as the Hub sends them."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            body = read_body(self)
            try:
                response = app.handle(self.command, self.path, self.headers, body)
            except HubError as error:
                headers = {"X-Error-Message": error.message}
                if error.error_code:
                    headers["X-Error-Code"] = error.error_code
                if error.commit:
                    headers["X-Repo-Commit"] = error.commit
                body = {"error": error.message, **error.extra}
                response = Response(error.status, json_body=body, headers=headers)
            except (KeyError, ValueError) as error:  # malformed payloads
                message = f"Bad request: {error!r}"
                response = Response(400, json_body={"error": message}, headers={"X-Error-Message": message})
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler


def serve(
    root: str, port: int = 0, host: str = "127.0.0.1"
) -> tuple[ThreadingHTTPServer, ThreadingHTTPServer]:
    """Start the Hub and its CDN on ``host`` (Hub on ``port``, 0 = any free port) in background threads."""
    store = RepoStore(root)
    hub_app, cdn_app = HubApp(store), Cdn(store)
    hub = ThreadingHTTPServer((host, port), make_handler(hub_app))
    cdn = ThreadingHTTPServer((host, 0), make_handler(cdn_app))
    hub_app.endpoint = f"http://{host}:{hub.server_address[1]}"
    hub_app.cdn_url = f"http://{host}:{cdn.server_address[1]}"
    for server in (hub, cdn):
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return hub, cdn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", required=True, help="directory holding the repositories (created if missing)"
    )
    parser.add_argument("--port", type=int, default=0, help="port of the Hub (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    Path(args.root).mkdir(parents=True, exist_ok=True)
    hub, _ = serve(args.root, args.port, args.host)
    print(f"LISTENING http://{args.host}:{hub.server_address[1]}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
