"""Reads cuobjdump -sass output: each kernel's instruction count (and, with
--ptxas, its registers), or one kernel's listing."""
import re
import sys


def kernels(path):
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if cur is not None and m:
            cur.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def registers(path):
    regs, cur = {}, None
    for line in open(path):
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs[cur] = int(m.group(1))
    return regs


def main(argv):
    ks = kernels(argv[1])
    if len(argv) > 2 and argv[2] != "--ptxas":
        for addr, text in ks[argv[2]]:
            print(f"{addr:05x} {text}")
        return
    regs = registers(argv[3]) if len(argv) > 3 else {}
    print(f"{'kernel':40s} {'instructions':>12s} {'registers':>9s}")
    for name in sorted(ks):
        print(f"{name:40s} {len(ks[name]):12d} {regs.get(name, ''):>9}")


if __name__ == "__main__":
    main(sys.argv)
