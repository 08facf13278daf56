#!/usr/bin/env python3
"""Flink's side of weir-state-bench: the same keyed SUM/COUNT, with Flink's RocksDB state
backend and incremental checkpoints (or its heap backend), and the same shape of input —
every key once (the load), then a fixed number of scattered keys updated per second.

Pure Flink SQL over the datagen connector, run by PyFlink's local MiniCluster. Once the load
source has finished, the checkpoints that follow are read from Flink's own REST API
(`/jobs/<id>/checkpoints`): their end-to-end duration, `checkpointed_size` (what the
checkpoint uploaded: with incremental checkpoints, only new SST files) and `state_size`,
and the longest synchronous part of any subtask (`/checkpoints/details/<id>/subtasks/<v>`).
Prints one line `RESULT {json}`; weir-state-bench (bench/src/bin/weir-state-bench.rs) runs it.

  target/tools/flink/venv/bin/python bench/flink/flink_state_job.py --keys 1000000 \
      --backend rocksdb --checkpoint-dir /tmp/fstate
"""
import argparse
import json
import os
import time
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_rest import get, log_to, rest_port, streaming_table_env  # noqa: E402


def status_mib(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return None


def java_child():
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            s = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        comm, rest = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
        if rest[1] == me and comm == "java":
            return int(entry)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--backend", choices=["rocksdb", "hashmap"], default="rocksdb")
    ap.add_argument("--string-keys", action="store_true", help="keys like k123456")
    ap.add_argument("--update-fraction", type=float, default=0.01)
    ap.add_argument("--interval-ms", type=int, default=5000)
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--memory-mb", type=int, default=256,
                    help="RocksDB managed memory per slot, MiB")
    ap.add_argument("--checkpoint-dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.checkpoint_dir, exist_ok=True)

    log_dir = log_to(a.checkpoint_dir)
    conf = {
        "parallelism.default": str(a.parallelism),
        "execution.checkpointing.interval": f"{a.interval_ms}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.num-retained": "1",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": "file://" + os.path.abspath(a.checkpoint_dir),
        "execution.checkpointing.incremental": "true" if a.backend == "rocksdb" else "false",
        "execution.checkpointing.checkpoints-after-tasks-finish": "true",
        "state.backend.type": a.backend,
        "state.backend.rocksdb.memory.managed": "true",
        # One slot per subtask, each with the same RocksDB memory as Weir's per subtask.
        "taskmanager.memory.managed.size": f"{a.memory_mb * a.parallelism}m",
        "taskmanager.numberOfTaskSlots": str(a.parallelism),
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        # Per-record updates, as Weir emits them: no mini-batches.
        "table.exec.mini-batch.enabled": "false",
    }
    t_env = streaming_table_env(conf)

    rate = a.update_fraction * a.keys / (a.interval_ms / 1000)
    t_env.execute_sql(f"""
CREATE TABLE load_keys (`key` BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.key.kind' = 'sequence', 'fields.key.start' = '0', 'fields.key.end' = '{a.keys - 1}')""")
    t_env.execute_sql(f"""
CREATE TABLE updates (`key` BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '{max(1, int(rate))}',
  'fields.key.min' = '0', 'fields.key.max' = '{a.keys - 1}')""")
    key = "CONCAT('k', CAST(`key` AS STRING))" if a.string_keys else "`key`"
    key_type = "STRING" if a.string_keys else "BIGINT"
    t_env.execute_sql(
        f"CREATE TABLE sink (`key` {key_type}, total BIGINT, cnt BIGINT) "
        "WITH ('connector' = 'blackhole')")
    started = time.time()
    result = t_env.execute_sql(f"""
INSERT INTO sink SELECT k, SUM(v), COUNT(*) FROM (
  SELECT {key} AS k, CAST(1 AS BIGINT) AS v FROM load_keys
  UNION ALL SELECT {key} AS k, CAST(1 AS BIGINT) AS v FROM updates) GROUP BY k""")
    job_id = str(result.get_job_client().get_job_id())
    jvm = java_child()
    port = rest_port(log_dir, "flink_state_job.py")

    def vertices():
        return get(port, f"/jobs/{job_id}")["vertices"]

    # The load is done when its source vertex has finished.
    deadline = time.time() + 3600
    while True:
        try:
            load = [v for v in vertices() if "load_keys" in v["name"]]
            if load and load[0]["status"] == "FINISHED":
                break
        except OSError:
            pass
        if time.time() > deadline:
            raise SystemExit("flink_state_job.py: the load did not finish within an hour")
        time.sleep(0.1)
    load_seconds = time.time() - started

    def completed():
        history = get(port, f"/jobs/{job_id}/checkpoints")["history"]
        return [c for c in history if c["status"] == "COMPLETED"]

    after_load = max((c["id"] for c in completed()), default=0) + 1
    deadline = time.time() + (a.checkpoints + 4) * a.interval_ms / 1000 + 600
    while True:
        done = [c for c in completed() if c["id"] > after_load]
        if len(done) >= a.checkpoints:
            break
        if time.time() > deadline:
            raise SystemExit(f"flink_state_job.py: only {len(done)} checkpoints after the load")
        time.sleep(0.1)
    done.sort(key=lambda c: c["id"])
    done = done[:a.checkpoints]
    aggregate = [v for v in vertices() if "GroupAggregate" in v["name"]]
    checkpoints = []
    for cp in done:
        sync_ms = 0
        async_ms = 0
        for v in aggregate:
            detail = get(port, f"/jobs/{job_id}/checkpoints/details/{cp['id']}/subtasks/{v['id']}")
            for s in detail.get("subtasks", []):
                sync_ms = max(sync_ms, s.get("checkpoint", {}).get("sync", 0))
                async_ms = max(async_ms, s.get("checkpoint", {}).get("async", 0))
        checkpoints.append({
            "id": cp["id"],
            "duration_ms": cp["end_to_end_duration"],
            "max_sync_ms": sync_ms,
            "max_async_ms": async_ms,
            "state_bytes": cp["state_size"],
            "uploaded_bytes": cp["checkpointed_size"],
        })
    peak = status_mib(jvm, "VmHWM") if jvm else None
    result.get_job_client().cancel().result()
    print("RESULT " + json.dumps({
        "backend": "flink-" + a.backend,
        "keys": a.keys,
        "string_keys": a.string_keys,
        "parallelism": a.parallelism,
        "load_seconds": load_seconds,
        "checkpoints": checkpoints,
        "peak_rss_bytes": int(peak * 1024 * 1024) if peak else 0,
        "recovery_ms": None,
    }), flush=True)


if __name__ == "__main__":
    main()
