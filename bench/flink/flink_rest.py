"""What the Flink-side bench scripts share: a streaming TableEnvironment on a local
MiniCluster that logs under a given directory, finding its REST port in that log, and
reading the REST API."""
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


def log_to(work_dir):
    """Makes PyFlink's gateway log under `work_dir`/log (where `rest_port` reads the
    MiniCluster's port back); returns that directory. Call before creating the environment."""
    log_dir = os.path.abspath(os.path.join(work_dir, "log"))
    os.makedirs(log_dir, exist_ok=True)
    os.environ["FLINK_LOG_DIR"] = log_dir
    return log_dir


def streaming_table_env(conf):
    """A streaming TableEnvironment with every option of `conf` set, on the cluster and in
    the table config."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    c = Configuration()
    for k, v in conf.items():
        c.set_string(k, v)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(c).build())
    for k, v in conf.items():
        t_env.get_config().set(k, v)
    return t_env
