#!/usr/bin/env python3
"""Generates the clicks data set of the event-time example (clicks_per_minute): four CSV
files of `time_ms,user,page`, 1 500 rows each, one click per 100 ms of event time; file k
covers [150k s, 150(k+1) s), so a reader that reads its files one after the other sees event
time advance (as Flink's file source, Weir's reads a subtask's files in turn, and a later
file's records must not be older than an earlier one's watermark). Within a file,
timestamps are out of order by up to 4 s. Deterministic: rerunning rewrites the same files."""
import random

PAGES = ["/home", "/cart", "/search", "/item", "/help"]
for part in range(4):
    rng = random.Random(1000 + part)
    rows = []
    for i in range(1500):
        t = part * 150_000 + i * 100 - rng.randrange(4000)
        rows.append(f"{max(t, part * 150_000)},u{rng.randrange(50)},{rng.choice(PAGES)}")
    with open(f"clicks-{part}.csv", "w") as f:
        f.write("time_ms,user,page\n")
        f.write("\n".join(rows) + "\n")
