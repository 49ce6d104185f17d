#!/usr/bin/env python3
"""An exec client adapter for lockd (nemesis/PROTOCOL.md), in Python with the stdlib only.

    locksmith test --system exec --nodes 3 \
      --node-cmd '"$LOCKSMITH_BIN" node --id {id} --peers {peers} --dial {peer_addrs} --client-listen {addr} --data-dir {dir}' \
      --client-cmd 'python3 examples/lockd_client.py {client_addrs} {process}'

lockd's clients speak tarpc, so this adapter talks to lockd through a small shim:
`locksmith client --cluster ADDRS --client-id N lines`, which serves the same JSON lines
with lockd's own client library (leader discovery, redirects, deadlines, retries). The
adapter checks each request and each answer, forwards them, and passes the shim's init
line on. Its client id is the history's process id, as the native harness's is (a label
only: the shim's client library registers a session with the cluster, which assigns its
id), so an exec run of lockd differs from a native one only by the protocol's hops.

Arguments: CLIENT_ADDRS (comma-separated, node 1 first) and PROCESS (the client id).
The harness sets LOCKSMITH_BIN to the locksmith binary that runs it.
"""

import json
import os
import subprocess
import sys


def send(stream, obj):
    stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
    stream.flush()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: lockd_client.py CLIENT_ADDRS PROCESS")
    addrs, process = sys.argv[1], sys.argv[2]
    locksmith = os.environ.get("LOCKSMITH_BIN", "locksmith")
    shim = subprocess.Popen(
        [locksmith, "client", "--cluster", addrs, "--client-id", process, "lines"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    init = json.loads(shim.stdout.readline())
    if init.get("type") != "init":
        sys.exit(f"lockd_client.py: the shim's first line is no init line: {init!r}")
    send(sys.stdout, init)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") not in ("acquire", "release"):
            # lockd has no fenced resource of its own; the harness keeps it.
            send(sys.stdout, {"id": request["id"], "type": "fail", "error": "invalid"})
            continue
        send(shim.stdin, request)
        answer_line = shim.stdout.readline()
        if not answer_line:
            # The shim is gone: say nothing more; the harness records info at the deadline
            # (or when this process exits) and starts a new adapter.
            sys.exit("lockd_client.py: the shim exited")
        answer = json.loads(answer_line)
        if answer.get("id") != request["id"]:
            sys.exit(f"lockd_client.py: answer {answer!r} to request {request!r}")
        send(sys.stdout, answer)


if __name__ == "__main__":
    main()
