#!/usr/bin/env python3
"""L1 data misses per loop iteration from a callgrind profile with --cache-sim=yes,
--dump-instr=yes, --compress-pos=no and --compress-strings=no (scripts/profile-host.sh
CACHESIM=1): the misses of the profiled binary's own instructions (the stand-in
driver's are left out), and the instructions that miss most, with their inlined
call chains (addr2line; needs the binary's line tables).

    tools/cachemiss.py PROFILE BINARY ITERATIONS [TOP]
"""
import re
import subprocess
import sys


def main():
    profile, binary, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    events, misses = [], {}
    ob, after_call = None, False
    for line in open(profile):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("ob="):
            ob = line[3:].strip()
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
        else:
            m = re.match(r"^0x([0-9a-f]+) \d+((?: \d+)*)$", line.strip())
            if not m:
                continue
            if after_call:
                after_call = False
                continue
            if not ob or not ob.endswith(binary.split("/")[-1]):
                continue
            vals = dict(zip(events, map(int, m.group(2).split())))
            r, w = vals.get("D1mr", 0), vals.get("D1mw", 0)
            if r or w:
                a = int(m.group(1), 16)
                pr, pw = misses.get(a, (0, 0))
                misses[a] = (pr + r, pw + w)
    reads = sum(r for r, _ in misses.values()) / n
    writes = sum(w for _, w in misses.values()) / n
    print(f"L1 data misses per iteration: {reads:.1f} reads, {writes:.1f} writes")
    hot = sorted(misses.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]
    for a, (r, w) in hot:
        out = subprocess.run(
            ["addr2line", "-i", "-e", binary, hex(a)], capture_output=True, text=True
        ).stdout.split()
        chain = " <- ".join(p.split("/")[-1] for p in out[:4])
        print(f"  {r / n:5.2f} r {w / n:5.2f} w  {chain}")


if __name__ == "__main__":
    main()
