#!/usr/bin/env python3
"""The cost of refinement on the iterative runs of bench/gpu/refine/run.sh.

Each configuration (a program at some sizes) ran several times with one choices cache, until
a run ended with every key settled. For each run and each kernel of it (one key: the kernel
at the run's sizes) the runtime's log says what the tries of that run cost:

- `not settled at exit ... extra_us=X of Y`: X is the kernel time the run's timed tries took
  beyond the shape the key launches, Y the key's kernel time in the run (that shape's time
  times the run's launches, plus X);
- `settled on ... after launches=N ... extra_us=X`: X is the run's tries beyond the settled
  shape (and the run's untimed first launch at the model's first choice); the key's kernel
  time in the run is steps x the settled shape's time (from the cache file) + X;
- `from the choices cache`: nothing was tried.

Prints per kernel and run, per run, and over all runs the extra time as a share of the kernel
time.

Usage: overhead.py <OUT>/refine/overhead
"""
import glob
import os
import re
import sys

SETTLED = re.compile(
    r"^klaraptor: (\S+) (.*?) refine: settled on block=(\S+) grid=\S+ after launches=(\d+), "
    r"(\S+) of the model's first choice's time \(candidate=(\S+) extra_us=(-?[0-9.]+)\)"
)
UNSETTLED = re.compile(
    r"^klaraptor: (\S+) (.*?) refine: not settled at exit after launches=(\d+): launching "
    r"block=(\S+) grid=\S+ \(candidate=([^,]+), (\d+) of (\d+) candidates timed, "
    r"extra_us=(-?[0-9.]+) of ([0-9.]+)\)"
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


def run_number(path):
    return int(re.search(r"\.run(\d+)\.log$", path).group(1))


def main():
    d = sys.argv[1]
    all_extra = all_total = 0.0
    worst_run = 0.0
    for args_file in sorted(glob.glob(os.path.join(d, "*.args"))):
        prog = os.path.basename(args_file)[: -len(".args")]  # <small|large>-<program>
        args = open(args_file).read().split()
        steps = int(args[args.index("--steps") + 1])
        cache = choices(os.path.join(d, prog + ".choices"))
        logs = sorted(glob.glob(os.path.join(d, prog + ".run*.log")), key=run_number)
        for log in logs:
            i = run_number(log)
            r_extra = r_total = 0.0
            with open(log) as f:
                for line in f:
                    m = SETTLED.match(line)
                    if m:
                        name, data, block, launches, ratio, cand, extra = m.groups()
                        extra = float(extra)
                        settled_block, times = cache[(name, data)]
                        total = steps * times[settled_block] + extra
                        what = f"settled {block} ({cand}) after {launches} launches in all"
                    else:
                        m = UNSETTLED.match(line)
                        if not m:
                            continue
                        name, data, launches, block, cand, timed, n, extra, total = m.groups()
                        extra, total = float(extra), float(total)
                        what = (f"not settled after {launches} launches: {timed} of {n} shapes "
                                f"timed, launching {block} ({cand})")
                    r_extra += extra
                    r_total += total
                    # A key that timed nothing in the run reports no kernel time (0 of 0).
                    share = f"{100 * extra / total:6.3f} %" if total else "     - %"
                    print(f"{prog:15s} run{i:<2d} {name:14s} {data:18s} extra {extra:8.1f} us = "
                          f"{share} of {total / 1e3:7.2f} ms; {what}")
            if r_total:
                share = 100 * r_extra / r_total
                worst_run = max(worst_run, share)
                print(f"{prog:15s} run{i:<2d} all kernels: extra {r_extra / 1e3:.3f} ms = "
                      f"{share:.3f} % of {r_total / 1e3:.1f} ms kernel time")
            all_extra += r_extra
            all_total += r_total
    if all_total:
        print(f"all runs: extra {all_extra / 1e3:.3f} ms = {100 * all_extra / all_total:.3f} % "
              f"of {all_total / 1e3:.1f} ms kernel time; the costliest run "
              f"{worst_run:.3f} %")


if __name__ == "__main__":
    main()
