#!/usr/bin/env python3
"""One Apache Flink run of a Weir-vs-Flink workload, in pure Flink SQL.

PyFlink's TableEnvironment (streaming mode) starts a local MiniCluster inside its Java
gateway process (a child JVM of this Python process); the job is one INSERT statement, so no
Python runs in the hot path. At the end one line `RESULT {json}` gives the figures, measured
on the JVM from /proc (CPU time, peak RSS) and from Flink's own log (job running time,
checkpoints and their durations).

Called by `weir-vs-flink` (bench/src/bin/weir-vs-flink.rs); by hand:
  FLINK_LOG_DIR=/tmp/flog target/tools/flink/venv/bin/python bench/flink/flink_job.py \
      --workload keyed --input target/bench-data/kv --records 10000000 --parallelism 1 \
      --checkpoint-dir /tmp/fck
"""
import argparse
import glob
import json
import os
import re
import threading
import time

# The same computation as the Weir pipelines in bench/src/weir_jobs.rs.
KV_SOURCE = """
CREATE TABLE kv (`key` BIGINT, `value` BIGINT) WITH (
  'connector' = 'filesystem', 'path' = 'file://{input}', 'format' = 'csv')"""

KVS_SOURCE = """
CREATE TABLE kvs (`key` STRING, `value` BIGINT) WITH (
  'connector' = 'filesystem', 'path' = 'file://{input}', 'format' = 'csv')"""

# The Nexmark DDL of the Flink Nexmark suite (one table of all events, a view per kind),
# over JSON lines instead of the datagen connector. `dateTime` is a reserved word in Flink 2.
NEXMARK_SOURCE = """
CREATE TABLE events (
  event_type INT,
  person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING,
             state STRING, `dateTime` TIMESTAMP(3), extra STRING>,
  auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT,
              reserve BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT,
              category BIGINT, extra STRING>,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
          `dateTime` TIMESTAMP(3), extra STRING>
) WITH ('connector' = 'filesystem', 'path' = 'file://{input}', 'format' = 'json')"""
BID_VIEW = """
CREATE VIEW bid AS SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url,
  bid.`dateTime`, bid.extra FROM events WHERE event_type = 2"""


# The window and join queries read the same events with event time: `dateTime` of the
# event's part, with the Flink Nexmark suite's watermark 4 s behind (its ddl_gen.sql), and
# views whose `dateTime` is that time attribute (its ddl_views.sql).
NEXMARK_EVENT_TIME_SOURCE = """
CREATE TABLE events (
  event_type INT,
  person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING,
             state STRING, `dateTime` TIMESTAMP(3), extra STRING>,
  auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT,
              reserve BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT,
              category BIGINT, extra STRING>,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
          `dateTime` TIMESTAMP(3), extra STRING>,
  `dateTime` AS CASE WHEN event_type = 0 THEN person.`dateTime`
                     WHEN event_type = 1 THEN auction.`dateTime`
                     ELSE bid.`dateTime` END,
  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'file://{input}', 'format' = 'json')"""
EVENT_TIME_VIEWS = [
    """CREATE VIEW person AS SELECT person.id, person.name, person.emailAddress,
  person.creditCard, person.city, person.state, `dateTime`, person.extra
  FROM events WHERE event_type = 0""",
    """CREATE VIEW auction AS SELECT auction.id, auction.itemName, auction.description,
  auction.initialBid, auction.reserve, `dateTime`, auction.expires, auction.seller,
  auction.category, auction.extra FROM events WHERE event_type = 1""",
    """CREATE VIEW bid AS SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url,
  `dateTime`, bid.extra FROM events WHERE event_type = 2""",
]
WINDOWED = [NEXMARK_EVENT_TIME_SOURCE] + EVENT_TIME_VIEWS

# Each workload: its sources, its sink's columns, and its query, in the Flink Nexmark
# suite's SQL (nexmark-flink/src/main/resources/queries/q*.sql). The sink is a blackhole
# for the timed runs and JSON files for the value check.
WORKLOADS = {
    "stateless": ([KV_SOURCE], "`key` BIGINT, scaled BIGINT",
                  "SELECT `key`, `value` * 10 FROM kv WHERE MOD(`value`, 2) = 0"),
    "keyed": ([KV_SOURCE], "`key` BIGINT, total BIGINT, cnt BIGINT",
              "SELECT `key`, SUM(`value`), COUNT(*) FROM kv GROUP BY `key`"),
    "keyed_strings": ([KVS_SOURCE], "`key` STRING, total BIGINT, cnt BIGINT",
                      "SELECT `key`, SUM(`value`), COUNT(*) FROM kvs GROUP BY `key`"),
    "q0": ([NEXMARK_SOURCE, BID_VIEW],
           "auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra STRING",
           "SELECT auction, bidder, price, `dateTime`, extra FROM bid"),
    "q1": ([NEXMARK_SOURCE, BID_VIEW],
           "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), `dateTime` TIMESTAMP(3), extra STRING",
           "SELECT auction, bidder, 0.908 * price, `dateTime`, extra FROM bid"),
    "q2": ([NEXMARK_SOURCE, BID_VIEW], "auction BIGINT, price BIGINT",
           "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
    "q3": (WINDOWED, "name STRING, city STRING, state STRING, id BIGINT", """
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"""),
    "q4": (WINDOWED, "id BIGINT, `final` BIGINT", """
SELECT Q.category, AVG(Q.`final`)
FROM (
  SELECT MAX(B.price) AS `final`, A.category
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
  GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""),
    "q5": (WINDOWED, "auction BIGINT, num BIGINT", """
SELECT AuctionBids.auction, AuctionBids.num
FROM (
  SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
  SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn"""),
    # The suite's q6 with its ties broken (the earliest of the highest bids wins an auction;
    # a seller's auctions whose winning bids share a time are taken by id), so that its
    # result is one. Streaming SQL refuses it (the OVER window orders by a plain column):
    # only the batch value check runs it.
    "q6": (WINDOWED, "seller BIGINT, avg_price BIGINT", """
SELECT Q.seller, AVG(Q.price) OVER
    (PARTITION BY Q.seller ORDER BY Q.`dateTime`, Q.id ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY id, seller ORDER BY price DESC, `dateTime`) AS rownum
  FROM (
    SELECT A.id, A.seller, B.price, B.`dateTime`
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires)
) AS Q
WHERE Q.rownum <= 1"""),
    "q7": (WINDOWED,
           "auction BIGINT, price BIGINT, bidder BIGINT, `dateTime` TIMESTAMP(3), extra STRING", """
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime` - INTERVAL '10' SECOND AND B1.`dateTime`"""),
    "q8": (WINDOWED, "id BIGINT, name STRING, stime TIMESTAMP(3)", """
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"""),
    "q11": (WINDOWED,
            "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)", """
SELECT B.bidder, COUNT(*) AS bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) AS starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) AS endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)"""),
    "q12": (WINDOWED + ["CREATE VIEW B AS SELECT *, PROCTIME() AS p_time FROM bid"],
            "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)", """
SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end"""),
}

# What the batch value check computes where it differs from the query: batch SQL has no
# session group windows, so q11's sessions are cut where a bidder's bids are 10 s or more
# apart (where Flink's streaming session windows stop merging); q12's windows are processing
# time, so only each bidder's total over all windows can be checked.
VERIFY_QUERIES = {
    "q11": ("bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)", """
SELECT bidder, COUNT(*) AS bid_count, MIN(`dateTime`) AS starttime,
    MAX(`dateTime`) + INTERVAL '10' SECOND AS endtime
FROM (
  SELECT bidder, `dateTime`,
      SUM(starts) OVER (PARTITION BY bidder ORDER BY `dateTime` ROWS UNBOUNDED PRECEDING) AS session
  FROM (
    SELECT bidder, `dateTime`,
        CASE WHEN LAG(`dateTime`) OVER (PARTITION BY bidder ORDER BY `dateTime`)
                  > `dateTime` - INTERVAL '10' SECOND THEN 0 ELSE 1 END AS starts
    FROM bid))
GROUP BY bidder, session"""),
    "q12": ("bidder BIGINT, bid_count BIGINT",
            "SELECT bidder, COUNT(*) AS bid_count FROM bid GROUP BY bidder"),
}
VALUE_CHECKED = {"q3", "q4", "q5", "q6", "q7", "q8", "q11", "q12"}


def source_ddl(a):
    """The workload's source statements: over the JSON files, or over the in-memory
    generator (`--generator-sql`, written by weir-vs-flink from src/nexmark/generator.rs)."""
    sources = WORKLOADS[a.workload][0]
    if a.generator_sql:
        generated = json.load(open(a.generator_sql))
        # The workload's own views (q12's proctime view) follow the generator's.
        return generated + [s for s in sources if s not in WINDOWED + [NEXMARK_SOURCE, BID_VIEW]]
    return [ddl.format(input=os.path.abspath(a.input)) for ddl in sources]


def java_child():
    """The gateway JVM: the java child of this Python process."""
    me = str(os.getpid())
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            s = open(st).read()
        except OSError:
            continue
        comm, rest = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
        if rest[1] == me and comm == "java":
            return int(st.split("/")[2])
    raise SystemExit("flink_job.py: no java child process found (did the gateway start?)")


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read()
    f = f[f.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def status_mib(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return None


def watch_running(log_dir, jvm, found, stop):
    """Samples the JVM's CPU time as soon as Flink's log says the job is RUNNING."""
    running = re.compile(r"ExecutionGraph .* switched from state CREATED to RUNNING")
    while not stop.is_set():
        for path in glob.glob(os.path.join(log_dir, "flink-*-python-*.log")):
            with open(path) as log:
                if running.search(log.read()):
                    found["cpu"] = cpu_seconds(jvm)
                    return
        time.sleep(0.02)


def log_time(text, pattern):
    m = re.search(r"^(\S+ \S+) .*" + pattern, text, re.M)
    if not m:
        return None
    stamp = m.group(1)
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000


def verify(a):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("parallelism.default", str(a.parallelism))
    t_env.get_config().set("table.local-time-zone", "UTC")
    for ddl in source_ddl(a):
        t_env.execute_sql(ddl)
    _, columns, select = WORKLOADS[a.workload]
    if a.output:
        # The rows themselves, as JSON lines, for weir-vs-flink to compare with Weir's.
        if a.workload not in VALUE_CHECKED:
            raise SystemExit(f"flink_job.py: {a.workload}'s values are not checked, only counted")
        columns, select = VERIFY_QUERIES.get(a.workload, (columns, select))
        t_env.execute_sql(f"CREATE TABLE verify_out ({columns}) WITH ('connector' = 'filesystem', "
                          f"'path' = 'file://{os.path.abspath(a.output)}', 'format' = 'json')")
        t_env.execute_sql(f"INSERT INTO verify_out {select}").wait()
        print("VERIFY " + json.dumps({"workload": a.workload, "output": a.output}), flush=True)
        return
    if a.workload in ("keyed", "keyed_strings"):
        table = "kv" if a.workload == "keyed" else "kvs"
        count = f"SELECT SUM(cnt) FROM (SELECT `key`, COUNT(*) AS cnt FROM {table} GROUP BY `key`)"
    else:
        count = f"SELECT COUNT(*) FROM ({select})"
    with t_env.execute_sql(count).collect() as rows:
        records_out = next(iter(rows))[0]
    print("VERIFY " + json.dumps({"workload": a.workload, "records_out": records_out}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--input", help="directory of input files")
    ap.add_argument("--generator-sql", help="instead of --input: a JSON list of the statements "
                    "that generate the Nexmark views in memory")
    ap.add_argument("--output", help="with --verify: write the rows as JSON files here")
    ap.add_argument("--records", type=int, required=True, help="input records, for records/s")
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--interval", default="1s", help="checkpoint interval")
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--verify", action="store_true",
                    help="instead of timing: count in batch mode the rows the query emits "
                         "(for keyed, the updates: one per input row) and print VERIFY {json}")
    a = ap.parse_args()
    if not (a.input or a.generator_sql):
        ap.error("one of --input and --generator-sql is needed")
    if a.verify:
        return verify(a)
    os.makedirs(a.checkpoint_dir, exist_ok=True)

    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = {
        "parallelism.default": str(a.parallelism),
        "execution.checkpointing.interval": a.interval,
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "state.backend.type": "hashmap",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": "file://" + os.path.abspath(a.checkpoint_dir),
        # The default since 1.15, set so the final checkpoint after the input ends is taken.
        "execution.checkpointing.checkpoints-after-tasks-finish": "true",
        # TIMESTAMP(3) from epoch milliseconds in the generator's SQL, and nothing else.
        "table.local-time-zone": "UTC",
    }
    conf.update(kv.split("=", 1) for kv in a.conf)
    c = Configuration()
    for k, v in conf.items():
        c.set_string(k, v)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(c).build())
    for k, v in conf.items():
        t_env.get_config().set(k, v)

    jvm = java_child()
    cpu0 = cpu_seconds(jvm)
    log_dir = os.environ.get("FLINK_LOG_DIR") or os.path.join(
        os.path.dirname(__import__("pyflink").__file__), "log")
    # The JVM's CPU time when the job starts RUNNING, so that SQL planning, code generation
    # and deployment can be told apart from running the job.
    at_running = {}
    stop = threading.Event()
    threading.Thread(target=watch_running, args=(log_dir, jvm, at_running, stop),
                     daemon=True).start()
    _, columns, select = WORKLOADS[a.workload]
    for ddl in source_ddl(a):
        t_env.execute_sql(ddl)
    t_env.execute_sql(f"CREATE TABLE sink ({columns}) WITH ('connector' = 'blackhole')")
    t1 = time.time()
    t_env.execute_sql(f"INSERT INTO sink {select}").wait()  # returns when the bounded job has FINISHED
    t2 = time.time()
    cpu1 = cpu_seconds(jvm)
    stop.set()
    logs = sorted(glob.glob(os.path.join(log_dir, "flink-*-python-*.log")), key=os.path.getmtime)
    text = open(logs[-1]).read() if logs else ""
    durations = [int(d) for d in re.findall(
        r"Completed checkpoint \d+ for job \S+ \(\d+ bytes, checkpointDuration=(\d+) ms", text)]
    # Running time: the ExecutionGraph's RUNNING to FINISHED, without JVM start, planning
    # and deployment, which the job wall time includes.
    run0 = log_time(text, r"ExecutionGraph .* switched from state CREATED to RUNNING")
    run1 = log_time(text, r"ExecutionGraph .* switched from state RUNNING to FINISHED")
    running = (run1 - run0) if run0 and run1 else None
    print("RESULT " + json.dumps({
        "workload": a.workload,
        "parallelism": a.parallelism,
        "records": a.records,
        "job_wall_seconds": t2 - t1,
        "running_seconds": running,
        "cpu_seconds": cpu1 - at_running.get("cpu", cpu0),
        # False when the RUNNING line was not seen in time: CPU then includes planning.
        "cpu_from_running": "cpu" in at_running,
        "cpu_seconds_with_planning": cpu1 - cpu0,
        "peak_rss_mib": status_mib(jvm, "VmHWM"),
        "checkpoints_completed": len(durations),
        "checkpoint_mean_ms": sum(durations) / len(durations) if durations else None,
        "flink_log": logs[-1] if logs else None,
    }), flush=True)


if __name__ == "__main__":
    main()
