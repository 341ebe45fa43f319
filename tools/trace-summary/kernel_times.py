#!/usr/bin/env python3
"""Per-name totals of a sluice trace's device spans (pid 2, "sluice streams (device,
sampled)"): where a step's device time goes, for example the Go trainer's
(`SLUICE_TRACE=t.json SLUICE_TRACE_DEVICE=1 ./trainer -epochs 1`).

    python3 tools/trace-summary/kernel_times.py t.json [TOP]
"""
import collections
import json
import sys

PID_DEVICE = 2


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with open(sys.argv[1]) as f:
        text = f.read().rstrip()
    # A trace cut short (a crash) may lack its closing bracket.
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    events = json.loads(text)
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    total = collections.Counter()
    count = collections.Counter()
    for e in events:
        if e.get("pid") == PID_DEVICE and e.get("ph") == "X":
            total[e["name"]] += e.get("dur", 0.0)
            count[e["name"]] += 1
    if not total:
        print("no device spans (was SLUICE_TRACE_DEVICE=1 set?)")
        return 1
    all_us = sum(total.values())
    print(f"| op | spans | total µs | mean µs | share |")
    print(f"|---|---:|---:|---:|---:|")
    for name, us in total.most_common(top):
        print(f"| {name} | {count[name]} | {us:.0f} | {us / count[name]:.2f} | {us / all_us:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
