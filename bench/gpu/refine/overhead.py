#!/usr/bin/env python3
"""The cost of refinement on the iterative runs of bench/gpu/refine/run.sh.

For each kernel of a run (one key: the kernel at the run's sizes), the runtime's settled line
gives the extra kernel time its tries cost over the settled shape (extra_us: every timed try's
time minus the settled shape's median, and the untimed first launch counted at the model's
first choice's median), and the choices cache file the settled shape's median time. Each
kernel of these programs is launched once per time step, so its total kernel time is
steps x settled time + extra. Prints, per kernel and per program, the extra time as a share
of the total.

Usage: overhead.py <OUT>/refine/overhead
"""
import glob
import os
import re
import sys

SETTLED = re.compile(
    r"^klaraptor: (\S+) (.*?) refine: settled on block=(\S+) grid=\S+ after launches=(\d+), "
    r"(\S+) of the model's first choice's time \(candidate=(\S+) extra_us=([0-9.]+)\)"
)


def choices(dirname):
    """(name, data) -> {shape: median_us} and the settled block, from the cache files."""
    out = {}
    for path in glob.glob(os.path.join(dirname, "*.choice")):
        fields = {}
        with open(path) as f:
            for line in f:
                if " = " in line and not line.startswith("#"):
                    k, v = line.rstrip("\n").split(" = ", 1)
                    fields[k] = v
        times = {}
        for item in fields.get("times_us", "").split():
            shape, us = item.rsplit(":", 1)
            times[shape] = float(us)
        block = fields["block"]
        if block == "program":
            block = fields.get("program_block", "")
        out[(fields["name"], fields["data"])] = (block, times)
    return out


def main():
    d = sys.argv[1]
    total_extra = total_all = 0.0
    for args_file in sorted(glob.glob(os.path.join(d, "*.args"))):
        prog = os.path.basename(args_file)[: -len(".args")]  # <small|large>-<program>
        args = open(args_file).read().split()
        steps = int(args[args.index("--steps") + 1])
        cache = choices(os.path.join(d, prog + ".choices"))
        p_extra = p_all = 0.0
        with open(os.path.join(d, prog + ".first.log")) as f:
            for line in f:
                m = SETTLED.match(line)
                if not m:
                    continue
                name, data, block, launches, ratio, cand, extra = m.groups()
                extra = float(extra)
                settled_block, times = cache[(name, data)]
                t = times[settled_block]
                total = steps * t + extra
                p_extra += extra
                p_all += total
                print(
                    f"{prog:9s} {name:14s} {data:18s} settled {block:9s} ({cand}, {launches} "
                    f"launches, {ratio} of the model's first) {t:9.2f} us x {steps} launches; "
                    f"extra {extra:9.1f} us = {100 * extra / total:.3f} % of {total / 1e3:.1f} ms"
                )
        if p_all:
            print(f"{prog:9s} program: extra {p_extra / 1e3:.3f} ms = "
                  f"{100 * p_extra / p_all:.3f} % of {p_all / 1e3:.1f} ms kernel time")
        total_extra += p_extra
        total_all += p_all
    if total_all:
        print(f"all: extra {total_extra / 1e3:.3f} ms = {100 * total_extra / total_all:.3f} % "
              f"of {total_all / 1e3:.1f} ms kernel time")


if __name__ == "__main__":
    main()
