#!/usr/bin/env python3
"""The exec client adapter of examples/toy_lock_service.py (nemesis/PROTOCOL.md).

    --client-cmd 'python3 examples/toy_client.py {addr} {process} [--resource]'

With --resource the init line also says "resource":true, and the harness sends its writes
here, to the toy's own resource, instead of writing to the harness's.

The toy issues no fencing tokens, so the first line says {"type":"init","fencing":false}:
the harness then sends releases without a token, and its summary says which checks could
not apply. Each request becomes one line to the service; the answer maps to the protocol:
OK -> ok, BUSY -> fail busy, NOTHOLDER -> fail not-holder. A refused connection is a
definite `fail unavailable` (nothing reached the service); a connection that breaks
mid-request, or a request past its timeout_ms, is `info` (it may have taken effect).
"""

import json
import socket
import sys


def send(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Connection:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.addr = (host, int(port))
        self.sock = None
        self.reader = None

    def call(self, line, timeout_s):
        """The service's reply, or None if the outcome is unknown. Raises
        ConnectionRefusedError when nothing was sent."""
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=timeout_s)
            self.reader = self.sock.makefile("r")
        self.sock.settimeout(max(timeout_s, 0.001))
        try:
            self.sock.sendall((line + "\n").encode())
            reply = self.reader.readline().strip()
        except OSError:
            reply = ""
        if not reply:
            self.close()
            return None
        return reply

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.reader = None


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--resource"]):
        sys.exit("usage: toy_client.py ADDR PROCESS [--resource]")
    connection = Connection(sys.argv[1])
    owner = "p" + sys.argv[2]
    resource = sys.argv[3:] == ["--resource"]
    send({"type": "init", "fencing": False, "resource": resource})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        rid, op, key = request["id"], request["op"], request["key"]
        timeout_s = request.get("timeout_ms", 2000) / 1000.0
        if op == "acquire":
            wire = f"ACQUIRE {key} {request['lease_ms']} {request['wait_ms']} {owner}"
        elif op == "release":
            wire = f"RELEASE {key} {owner}"
        elif op == "write" and resource:
            wire = f"WRITE {key} {request['value']} {owner}"
        else:
            send({"id": rid, "type": "fail", "error": "invalid"})
            continue
        try:
            reply = connection.call(wire, timeout_s)
        except OSError:
            send({"id": rid, "type": "fail", "error": "unavailable"})
            continue
        if reply == "OK":
            send({"id": rid, "type": "ok"})
        elif reply == "BUSY" and op == "acquire":
            send({"id": rid, "type": "fail", "error": "busy"})
        elif reply == "NOTHOLDER" and op == "release":
            send({"id": rid, "type": "fail", "error": "not-holder"})
        else:
            send({"id": rid, "type": "info", "error": "timeout" if reply is None else "indeterminate"})


if __name__ == "__main__":
    main()
