#!/usr/bin/env python3
"""A deliberately unsafe lock service: one process, leases on wall-clock time, no fencing.

    python3 examples/toy_lock_service.py --listen 127.0.0.1:7201

Its wire protocol is one text line a request over TCP:

    ACQUIRE KEY LEASE_MS WAIT_MS OWNER  ->  OK | BUSY
    RELEASE KEY OWNER                    ->  OK | NOTHOLDER
    WRITE KEY VALUE OWNER                ->  OK      (its own resource: every write lands)

A key is free when nobody holds it or its holder's lease ran out by `time.time()`. That is
all: no fencing token, so a holder that stalls past its lease (a GC pause, a stopped
process) goes on writing while the next holder writes too, and nothing downstream can tell
them apart; wall-clock leases jump with the clock; the lock table lives in memory and dies
with the process. `examples/toy_client.py` is its exec client adapter, and
`locksmith test --system exec --nodes 1 --nemesis pause` finds it invalid (README, "Testing
your own lock service").
"""

import argparse
import socketserver
import threading
import time

locks = {}  # key -> (owner, expires_at wall-clock seconds)
resource = {}  # key -> the last value written
mutex = threading.Lock()


def try_acquire(key, lease_ms, owner):
    now = time.time()
    with mutex:
        holder = locks.get(key)
        if holder is None or holder[1] <= now:
            locks[key] = (owner, now + lease_ms / 1000.0)
            return True
        return False


def release(key, owner):
    with mutex:
        holder = locks.get(key)
        if holder is not None and holder[0] == owner and holder[1] > time.time():
            del locks[key]
            return True
        return False


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            words = raw.decode("utf-8", "replace").split()
            if len(words) == 5 and words[0] == "ACQUIRE":
                key, lease_ms, wait_ms, owner = words[1], int(words[2]), int(words[3]), words[4]
                deadline = time.time() + wait_ms / 1000.0
                granted = try_acquire(key, lease_ms, owner)
                while not granted and time.time() < deadline:
                    time.sleep(0.01)
                    granted = try_acquire(key, lease_ms, owner)
                reply = "OK" if granted else "BUSY"
            elif len(words) == 3 and words[0] == "RELEASE":
                reply = "OK" if release(words[1], words[2]) else "NOTHOLDER"
            elif len(words) == 4 and words[0] == "WRITE":
                # No token to check: the resource takes whatever comes.
                with mutex:
                    resource[words[1]] = words[2]
                print(f"write {words[1]} {words[2]} by {words[3]}", flush=True)
                reply = "OK"
            else:
                reply = "ERROR"
            self.wfile.write((reply + "\n").encode())
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT (127.0.0.1 only)")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    if host not in ("127.0.0.1", "localhost"):
        parser.error("--listen: loopback only")
    with Server((host, int(port)), Handler) as server:
        print(f"toy lock service on {args.listen}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
