"""A local Hugging Face Hub for the tests (a test double, see README.md): start it, point the client at it.

    with LocalHub(tmp_path / "hub") as hub:
        subprocess.run([sys.executable, "-c", script], env=hub.env(tmp_path / "cache"), check=True)

``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` are read when ``huggingface_hub`` is imported, so client code runs in a
subprocess with the environment ``hub.env(...)`` builds.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from pathlib import Path

SERVER = Path(__file__).with_name("server.py")
START_TIMEOUT_S = 30.0
RESULT = "RESULT "
# client scripts report with emit(**values); run_client_code returns the last report
EMIT = "def emit(**values):\n    print(" + repr(RESULT) + " + json.dumps(values, default=str))\n"


class LocalHub:
    """The local Hub server in a subprocess, storing its repositories under ``root``.

    ``endpoint`` is its URL (``http://127.0.0.1:PORT``) once started; the server's request log is
    ``root / "server.log"``.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.endpoint: str | None = None
        self._process: subprocess.Popen | None = None

    def start(self) -> LocalHub:
        if self._process is not None:
            raise RuntimeError(f"the local Hub is already running at {self.endpoint}")
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "server.log", "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, str(SERVER), "--root", str(self.root), "--port", "0"],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        line = self._read_line(START_TIMEOUT_S)
        if not line.startswith("LISTENING "):
            self.stop()
            log_tail = (self.root / "server.log").read_text()[-2000:]
            raise RuntimeError(
                f"the local Hub did not start: expected 'LISTENING <url>', got {line!r}\n{log_tail}"
            )
        self.endpoint = line.split(maxsplit=1)[1].strip()
        return self

    def _read_line(self, timeout_s: float) -> str:
        """The server's first stdout line, or '' if it exits or stays silent for ``timeout_s``."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return ""
        return self._process.stdout.readline()

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()
        self._process = None
        self.endpoint = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def env(
        self, cache_dir: str | os.PathLike, offline: bool = False, token: str | None = "test-token"
    ) -> dict[str, str]:
        """``os.environ`` with the Hugging Face client pointed at this Hub and caching under ``cache_dir``.

        ``token=None`` leaves the client without a token (and no token file in ``cache_dir`` to fall back to).
        """
        if self.endpoint is None:
            raise RuntimeError("the local Hub is not running: use `with LocalHub(root) as hub:`")
        cache_dir = Path(cache_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        env.pop("TRANSFORMERS_OFFLINE", None)
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_HOME=str(cache_dir),
            HF_HUB_CACHE=str(cache_dir / "hub"),
            HF_HUB_OFFLINE="1" if offline else "0",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_XET="1",  # no Xet storage here: uploads go through LFS, downloads through /resolve
            HF_HUB_DISABLE_UPDATE_CHECK="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
        )
        if token is not None:
            env["HF_TOKEN"] = token
        return env


def run_client_code(
    code: str, env: dict[str, str], args: tuple[str, ...] = (), cwd=None, timeout: float = 180
) -> dict:
    """Run Python ``code`` (with ``sys.argv[1:] = args``) in a subprocess with ``env`` (``LocalHub.env``);
    it must import json and report through ``EMIT``'s ``emit(**values)``. Returns the last values emitted."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    results = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    failure = f"client script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0 and results, failure
    return json.loads(results[-1][len(RESULT) :])
