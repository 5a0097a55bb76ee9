"""A Hub-shaped HTTP server on 127.0.0.1 for the tests (HF_ENDPOINT points at it): only what huggingface_hub
2.x calls to list and fetch a model repo, as its source in the venv does it:

    GET  /api/models/ORG/REPO[/revision/REV]          repo info (sha, siblings with sizes: model_info)
    GET  /api/models/ORG/REPO/tree/REV?recursive=...  the file list with sizes (and lfs)  (list_repo_tree)
    HEAD /ORG/REPO/resolve/REV/PATH                   X-Repo-Commit, ETag, Content-Length (hf_hub_download)
    GET  /ORG/REPO/resolve/REV/PATH                   the bytes; `Range: bytes=N-` gives 206

Unknown repos and files answer 404 with the X-Error-Code the Hub sends (RepoNotFound, EntryNotFound).
`cut_after` makes the next GET of a file send its full Content-Length, then only that many bytes, then drop
the connection (a cut network); `requests` records every request line (with its Range header).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, Path | bytes]]) -> None:
        self.repos = repos
        self.cut_after: int | None = None
        self.requests: list[str] = []
        self._sha: dict[tuple[str, str], str] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, head=True)

            def do_GET(self) -> None:
                hub._serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _bytes(self, repo: str, path: str) -> bytes | Path:
        return self.repos[repo][path]

    def _size(self, repo: str, path: str) -> int:
        data = self._bytes(repo, path)
        return data.stat().st_size if isinstance(data, Path) else len(data)

    def sha256(self, repo: str, path: str) -> str:
        if (repo, path) not in self._sha:
            data = self._bytes(repo, path)
            if isinstance(data, Path):
                with open(data, "rb") as f:
                    self._sha[repo, path] = hashlib.file_digest(f, "sha256").hexdigest()
            else:
                self._sha[repo, path] = hashlib.sha256(data).hexdigest()
        return self._sha[repo, path]

    def _sibling(self, repo: str, path: str) -> dict:
        size, sha = self._size(repo, path), self.sha256(repo, path)
        return {"rfilename": path, "size": size, "blobId": sha[:40],
                "lfs": {"sha256": sha, "size": size, "pointerSize": 134}}

    def _json(self, h: BaseHTTPRequestHandler, status: int, body, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        h.send_response(status)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(raw)

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        self.requests.append(f"{h.command} {path} {h.headers.get('Range') or ''}".strip())
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?", path):
            repo = m.group(1)
            if repo not in self.repos:
                return self._json(h, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return self._json(h, 200, {"id": repo, "modelId": repo, "sha": COMMIT,
                                       "siblings": [self._sibling(repo, p) for p in sorted(self.repos[repo])]})
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/[^/]+(?:/(.*))?", path):
            repo = m.group(1)
            if repo not in self.repos:
                return self._json(h, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return self._json(h, 200, [
                {"type": "file", "oid": self.sha256(repo, p)[:40], "size": self._size(repo, p), "path": p,
                 "lfs": {"oid": self.sha256(repo, p), "size": self._size(repo, p), "pointerSize": 134}}
                for p in sorted(self.repos[repo])])
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/[^/]+/(.+)", path):
            repo, file = m.groups()
            if repo not in self.repos:
                return self._json(h, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if file not in self.repos[repo]:
                return self._json(h, 404, {"error": "Entry not found"},
                                  {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
            return self._file(h, repo, file, head)
        self._json(h, 404, {"error": f"the fake Hub does not serve {path}"})

    def _file(self, h: BaseHTTPRequestHandler, repo: str, file: str, head: bool) -> None:
        size = self._size(repo, file)
        start = 0
        if (rng := h.headers.get("Range")) and (m := re.fullmatch(r"bytes=(\d+)-", rng.strip())):
            start = int(m.group(1))
        h.send_response(206 if start else 200)
        h.send_header("Content-Length", str(size - start))
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", f'"{self.sha256(repo, file)}"')
        h.send_header("Accept-Ranges", "bytes")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        h.end_headers()
        if head:
            return
        limit = size - start
        if self.cut_after is not None:
            limit, self.cut_after = min(limit, self.cut_after), None
            h.close_connection = True
        data = self._bytes(repo, file)
        with open(data, "rb") if isinstance(data, Path) else io.BytesIO(data) as f:
            f.seek(start)
            left = limit
            while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                h.wfile.write(chunk)
                left -= len(chunk)
        h.wfile.flush()

