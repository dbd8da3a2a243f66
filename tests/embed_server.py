"""A small HTTP server on loopback that speaks Ollama's /api/embed and OpenAI's
/v1/embeddings, with deterministic bag-of-words vectors (so similar words score alike)."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIM = 64


def vector(text: str) -> list[float]:
    v = [0.0] * DIM
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        h = int(hashlib.md5(word[:5].encode()).hexdigest(), 16)
        v[h % DIM] += 1.0
    return v


class EmbedServer:
    def __init__(self, *, models=("nomic-embed-text", "text-embedding-3-small"), api_key: str | None = None):
        self.models = set(models)
        self.api_key = api_key
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "payload": payload, "auth": self.headers.get("Authorization")})
                inputs = payload.get("input")
                inputs = [inputs] if isinstance(inputs, str) else inputs
                if payload.get("model") not in server.models:
                    return self._reply(404, {"error": f"model \"{payload.get('model')}\" not found, try pulling it first"})
                if self.path == "/api/embed":
                    return self._reply(200, {"model": payload["model"], "embeddings": [vector(t) for t in inputs]})
                if self.path == "/v1/embeddings":
                    if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                        return self._reply(401, {"error": "bad key"})
                    return self._reply(200, {"data": [{"index": i, "embedding": vector(t)} for i, t in enumerate(inputs)]})
                return self._reply(404, {"error": "no such endpoint"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
