"""A small local HTTP server that speaks the OpenAI embeddings API (POST /v1/embeddings),
serving the hash embedder's vectors and counting every text it embeds."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from handlers.embed import HashEmbedder


def send_json(handler: BaseHTTPRequestHandler, payload: object) -> None:
    """Answer a request of a stand-in HTTP API with `payload` as JSON (200)."""
    out = json.dumps(payload).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(out)))
    handler.end_headers()
    handler.wfile.write(out)


class EmbeddingServer:
    def __init__(self, dimension: int = 64) -> None:
        self.embedder = HashEmbedder(dimension)
        self.texts: Counter[str] = Counter()
        self.requests = 0
        self.models: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                server.requests += 1
                server.models.add(body["model"])
                server.texts.update(inputs)
                data = [
                    {"object": "embedding", "index": i, "embedding": server.vector(t)}
                    for i, t in enumerate(inputs)
                ]
                send_json(
                    self,
                    {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )

            def log_message(self, *args: object) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def vector(self, text: str) -> list[float]:
        return [float(x) for x in self.embedder.embed_one(text)]

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
