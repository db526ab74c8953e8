"""A local stand-in for the Hugging Face hub's HTTP API: the endpoints huggingface_hub's ``create_repo`` and
``upload_folder`` call (0.x and 1.x+ alike), on 127.0.0.1, for ``HF_ENDPOINT``. Real huggingface_hub code runs
against it; what it received is kept for the test to read.

    POST /api/repos/create                          {"name", "organization", "private" or "visibility", "type"}
                                                    -> {"url"}; 409 where it exists. "private": True/False/None (the
                                                    hub's default) as asked
    POST /api/models/{repo}/preupload/{revision}    {"files": [...]} -> every file "regular" (no LFS/Xet upload)
    POST /api/models/{repo}/commit/{revision}       NDJSON: a header, then files (base64) -> {"commitOid", ...}
    POST /api/validate-yaml                         {"content": README.md} -> no errors (the content is kept)

Only ``token`` may write (``Authorization: Bearer <token>``); any other is refused with 401 (no token) or 403,
as the hub refuses a read-only token. Any other request is answered 404 and recorded in ``unknown``.
"""
from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HubStandIn:
    def __init__(self, token: str):
        self.token = token
        self.repos: dict = {}  # repo id -> {"private": bool, "files": {path: bytes}, "commits": [message]}
        self.unknown: list = []
        self.refused: list = []
        self.cards: list = []  # README.md contents sent to /api/validate-yaml
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the test reads the records
                pass

            def _reply(self, status: int, body: dict, headers: dict | None = None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                auth = self.headers.get("Authorization", "")
                if auth != f"Bearer {hub.token}":
                    hub.refused.append(self.path)
                    status = 401 if not auth else 403
                    message = "Invalid credentials in Authorization header" if status == 401 else \
                        "You don't have the rights to create a model under this namespace"
                    return self._reply(status, {"error": message}, {"X-Error-Message": message})
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] == ["api", "repos", "create"]:
                    request = json.loads(body)
                    repo = "/".join(x for x in (request.get("organization"), request["name"]) if x)
                    if repo in hub.repos:
                        return self._reply(409, {"error": "You already created this model repo", "url": self._url(repo)})
                    private = request.get("private")  # huggingface_hub 0.x; 1.x+ sends "visibility"
                    if "visibility" in request:
                        private = request["visibility"] == "private"
                    hub.repos[repo] = {"private": private, "files": {}, "commits": []}
                    return self._reply(200, {"url": self._url(repo), "name": repo})
                if parts[:2] == ["api", "validate-yaml"]:  # the model card's metadata, before a commit with README.md
                    hub.cards.append(json.loads(body)["content"])
                    return self._reply(200, {"errors": [], "warnings": []})
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("preupload", "commit"):
                    repo = "/".join(parts[2:4])
                    if repo not in hub.repos:
                        return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    if parts[4] == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                            "shouldIgnore": False, "oid": None} for f in files]})
                    return self._commit(repo, body)
                hub.unknown.append(("POST", self.path))
                return self._reply(404, {"error": f"not in the stand-in: {self.path}"})

            def do_GET(self):
                hub.unknown.append(("GET", self.path))
                return self._reply(404, {"error": f"not in the stand-in: {self.path}"})

            def _url(self, repo: str) -> str:
                return f"{hub.endpoint}/{repo}"

            def _commit(self, repo: str, body: bytes):
                message = ""
                for line in body.decode().splitlines():
                    item = json.loads(line)
                    if item["key"] == "header":
                        message = item["value"].get("summary", "")
                    elif item["key"] == "file":
                        value = item["value"]
                        hub.repos[repo]["files"][value["path"]] = base64.b64decode(value["content"])
                    else:
                        hub.unknown.append(("commit operation", item["key"]))
                hub.repos[repo]["commits"].append(message)
                oid = hashlib.sha1(body).hexdigest()
                return self._reply(200, {"commitUrl": f"{hub.endpoint}/{repo}/commit/{oid}", "commitOid": oid,
                                         "success": True})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
