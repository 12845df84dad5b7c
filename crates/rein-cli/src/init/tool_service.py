#!/usr/bin/env python3
"""A tool service for rein, in the Python standard library only.

rein's HTTP adapter POSTs a call's arguments as a JSON object to the tool's
`url` and reads a JSON result from a 2xx. A write carries its idempotency key
in the `Idempotency-Key` header, the same key for every attempt of one
intent: apply it once, and answer a repeat with the stored result and
`Idempotent-Replayed: true`. `GET <url>/status?key=K` says whether a key
was applied (200 with its result) or not (404), so rein can settle a call
whose answer was lost. A failure is a status code plus, optionally,
{"error": {"category", "retryable", "retry_after_ms", "effect", "message"}}
(`category` as rein's: invalid_arguments, not_found, conflict, transient,
rate_limited, ...); rein classifies it, retries what is safe, and tells the
model the rest.

Run it with `python3 tool_service.py [PORT]` (8080 by default; 0 picks a
free port) and point the config at it: `export TOOLS_URL=http://127.0.0.1:8080`.
Replace the orders below with your system.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ORDERS = {
    "A-1001": {"order_id": "A-1001", "status": "confirmed",
               "delivery_date": "2026-01-05T14:00:00Z",
               "buyer_email": "buyer-a1001@example.com", "items": []},
}
APPLIED = {}  # (tool, idempotency key) -> (arguments, result)
LOCK = threading.Lock()


def failure(status, category, message):
    return status, {"error": {"category": category, "message": message}}, False


def get_order(args, key):
    order = ORDERS.get(args.get("order_id"))
    if order is None:
        return failure(404, "not_found", f"no order with order_id {args.get('order_id')!r}")
    return 200, order, False


def set_delivery_time(tool, args, key):
    if not key:
        return failure(400, "invalid_arguments", f"{tool} needs an Idempotency-Key header")
    if (tool, key) in APPLIED:
        first, result = APPLIED[(tool, key)]
        if first != args:
            return failure(409, "conflict", "this key was first used with other arguments")
        return 200, result, True
    order = ORDERS.get(args.get("order_id"))
    if order is None:
        return failure(404, "not_found", f"no order with order_id {args.get('order_id')!r}")
    result = {"order_id": order["order_id"], "delivery_date": args["delivery_date"],
              "previous_delivery_date": order["delivery_date"]}
    order["delivery_date"] = args["delivery_date"]
    APPLIED[(tool, key)] = (args, result)
    return 200, result, False


TOOLS = {
    "get_order": get_order,
    "update_delivery_time": lambda args, key: set_delivery_time("update_delivery_time", args, key),
    "restore_delivery_time": lambda args, key: set_delivery_time("restore_delivery_time", args, key),
}


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body, replayed=False):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        tool = TOOLS.get(self.path.removeprefix("/tools/"))
        if tool is None:
            return self.answer(*failure(404, "not_found", f"no tool at {self.path}")[:2])
        try:
            args = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError as err:
            return self.answer(*failure(400, "invalid_arguments", f"not JSON: {err}")[:2])
        with LOCK:
            self.answer(*tool(args, self.headers.get("Idempotency-Key")))

    def do_GET(self):
        url = urlparse(self.path)
        tool = url.path.removeprefix("/tools/").removesuffix("/status")
        key = parse_qs(url.query).get("key", [""])[0]
        with LOCK:
            applied = APPLIED.get((tool, key))
        if applied is None:
            return self.answer(*failure(404, "not_found", f"no {tool} applied under {key!r}")[:2])
        self.answer(200, applied[1])

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Handler)
    print(f"tool service at http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()
