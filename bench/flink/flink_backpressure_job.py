#!/usr/bin/env python3
"""Flink's side of weir-backpressure-bench: a keyed SUM/COUNT whose output goes through a
throttled stage (a Java scalar function, bench/flink/java/weir/bench/Throttle.java, chained
after the aggregation), fed by a datagen source far faster than the throttle, so that the
exchange into the aggregation stays full — checkpoints under backpressure, aligned or
unaligned (`execution.checkpointing.unaligned.enabled`).

Runs for --seconds, then reads the completed checkpoints from Flink's REST API (their
end-to-end duration, `persisted_data`, `is_unaligned`, the longest alignment) and the
records the aggregation took in (`read-records` of its vertex). Prints one line
`RESULT {json}`.

  target/tools/flink/venv/bin/python bench/flink/flink_backpressure_job.py --unaligned \
      --jar target/backpressure-bench/throttle.jar --dir /tmp/fbp
"""
import argparse
import json
import os
import time
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flink_rest import get, log_to, rest_port, streaming_table_env  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unaligned", action="store_true")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=2000,
                    help="rows per second per subtask through the throttle")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--jar", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)

    log_dir = log_to(a.dir)
    conf = {
        "parallelism.default": str(a.parallelism),
        "execution.checkpointing.interval": f"{a.interval_ms}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.timeout": "10min",
        "execution.checkpointing.unaligned.enabled": "true" if a.unaligned else "false",
        "execution.checkpointing.aligned-checkpoint-timeout": "0ms",
        "execution.checkpointing.num-retained": "1",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": "file://" + os.path.abspath(os.path.join(a.dir, "chk")),
        "state.backend.type": "hashmap",
        "taskmanager.numberOfTaskSlots": str(a.parallelism),
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "table.exec.mini-batch.enabled": "false",
        "metrics.fetcher.update-interval": "200ms",
        "pipeline.jars": "file://" + os.path.abspath(a.jar),
    }
    t_env = streaming_table_env(conf)
    t_env.create_java_temporary_function("throttle", "weir.bench.Throttle")
    t_env.execute_sql(f"""
CREATE TABLE src (`key` BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.key.min' = '0', 'fields.key.max' = '{a.keys - 1}')""")
    t_env.execute_sql(
        "CREATE TABLE sink (`key` BIGINT, total BIGINT, cnt BIGINT) WITH ('connector' = 'blackhole')")
    # The blackhole sink needs no retractions, so the aggregation emits one row (+U) per row
    # it takes in: the throttle paces its input, as Weir's does.
    result = t_env.execute_sql(f"""
INSERT INTO sink SELECT throttle(k, {a.rate}), s, n FROM (
  SELECT `key` AS k, SUM(CAST(1 AS BIGINT)) AS s, COUNT(*) AS n FROM src GROUP BY `key`)""")
    job_id = str(result.get_job_client().get_job_id())
    port = rest_port(log_dir, "flink_backpressure_job.py")
    started = time.time()
    time.sleep(a.seconds)
    elapsed = time.time() - started
    vertices = get(port, f"/jobs/{job_id}")["vertices"]
    aggregate = [v for v in vertices if "GroupAggregate" in v["name"]]

    def records_in_now():
        total = 0
        for v in aggregate:
            m = get(port, f"/jobs/{job_id}/vertices/{v['id']}/subtasks/metrics"
                          "?get=numRecordsIn&agg=sum")
            total += sum(int(x.get("sum", 0)) for x in m)
        return total

    # The REST metrics are fetched from the TaskManager every `metrics.fetcher.update-interval`.
    records_in = 0
    for _ in range(20):
        records_in = records_in_now()
        if records_in:
            break
        time.sleep(0.25)
    history = get(port, f"/jobs/{job_id}/checkpoints")["history"]
    checkpoints = []
    for cp in sorted((c for c in history if c["status"] == "COMPLETED"), key=lambda c: c["id"]):
        checkpoints.append({
            "id": cp["id"],
            "duration_ms": cp["end_to_end_duration"],
            "persisted_bytes": cp.get("persisted_data", 0),
            "unaligned": cp.get("checkpoint_type") == "UNALIGNED_CHECKPOINT",
            "trigger_ms": cp["trigger_timestamp"],
        })
    result.get_job_client().cancel().result()
    print("RESULT " + json.dumps({
        "engine": "flink-" + ("unaligned" if a.unaligned else "aligned"),
        "seconds": elapsed,
        "started_ms": int(started * 1000),
        "records_in": records_in,
        "checkpoints": checkpoints,
    }), flush=True)


if __name__ == "__main__":
    main()
