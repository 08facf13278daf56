"""What the Flink-side bench scripts share: finding the MiniCluster's REST port in its log,
and reading the REST API."""
import glob
import json
import os
import re
import time
import urllib.request


def rest_port(log_dir, script):
    """The REST port of the MiniCluster logging under `log_dir` (a free port, whatever is
    configured), read back from its log."""
    pattern = re.compile(r"Rest endpoint listening at [^:\s]+:(\d+)")
    deadline = time.time() + 120
    while time.time() < deadline:
        for path in glob.glob(os.path.join(log_dir, "flink-*.log")):
            m = pattern.search(open(path).read())
            if m:
                return int(m.group(1))
        time.sleep(0.1)
    raise SystemExit(f"{script}: no REST endpoint in the log under {log_dir}")


def get(port, path):
    """GET `path` from the REST API on 127.0.0.1:`port`, as JSON."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)
