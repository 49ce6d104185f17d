#!/usr/bin/env python3
"""A broken exec adapter for nemesis/tests/exec.rs: it answers every request twice (and
the first one with an id no request had), as a buggy adapter might."""
import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["id"] + 1000, "type": "fail", "error": "busy"}), flush=True)
    print(json.dumps({"id": request["id"], "type": "fail", "error": "unavailable"}), flush=True)
    print(json.dumps({"id": request["id"], "type": "fail", "error": "unavailable"}), flush=True)
