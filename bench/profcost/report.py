#!/usr/bin/env python3
"""What profiling a kernel costs (issue 39), from the accuracy study's profile phase.

    bench/profcost/report.py <device.sh OUT of PHASE=profile>... > report.md

Each OUT is what bench/accuracy/device.sh PHASE=profile wrote (with KLARAPTOR_COLLECT_TIMING=1
in its environment, so that each request's collector line is in the runs' stderr.txt). A
program's cost is the sum of its recipe runs' walls (process start, CUDA and CUPTI set-up, the
program's own work, every shape timed and profiled): per kernel, that sum over the kernels
the runs profiled (they share the runs); per shape, over the samples they wrote. The summary
gives the medians over kernels as `median per shape: X ms` and `median per kernel: Y s`, then
where the time went, from the collector's timing lines.
"""
import glob
import json
import os
import statistics as st
import sys


def summary_rows(out):
    rows = {}
    for f in sorted(glob.glob(os.path.join(out, "profile", "summary-*.tsv"))):
        for line in open(f):
            w = line.rstrip("\n").split("\t")
            if len(w) < 3 or w[0] == "id":
                continue
            try:
                rows[w[0]] = (w[1], float(w[2]))
            except ValueError:
                continue
    return rows


def timing_lines(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        if not line.startswith("klaraptor-collect: timing "):
            continue
        kv = {}
        for w in line.split()[3:]:
            if "=" in w:
                k, v = w.split("=", 1)
                try:
                    kv[k] = float(v)
                except ValueError:
                    pass
        out.append(kv)
    return out


def main(outs):
    programs = {}
    for out in outs:
        suite = os.path.basename(os.path.normpath(out))
        for job, (rc, wall) in summary_rows(out).items():
            prog, run = job.split("/", 1)
            d = os.path.join(out, "profile", prog, run)
            p = programs.setdefault((suite, prog), {"wall": 0.0, "runs": 0, "bad": 0,
                                                    "samples": {}, "timing": []})
            p["wall"] += wall
            p["runs"] += 1
            if rc not in ("0", "1"):
                p["bad"] += 1
            for f in glob.glob(os.path.join(d, "records", "*.jsonl")):
                n = 0
                for line in open(f, errors="replace"):
                    try:
                        s = json.loads(line)
                    except ValueError:
                        continue
                    if s.get("program") is True or "error" in s:
                        continue
                    n += 1
                k = os.path.basename(f)
                p["samples"][k] = p["samples"].get(k, 0) + n
            p["timing"] += timing_lines(os.path.join(d, "stderr.txt"))
    per_kernel, per_shape, rows = [], [], []
    totals = {}
    for (suite, prog), p in sorted(programs.items()):
        kernels = sum(1 for n in p["samples"].values() if n > 0)
        samples = sum(p["samples"].values())
        if kernels == 0 or samples == 0:
            rows.append(f"| {suite} | {prog} | {p['runs']} | {p['wall']:.2f} | 0 | 0 | – | – |")
            continue
        k_s = p["wall"] / kernels
        s_ms = 1000 * p["wall"] / samples
        for _ in range(kernels):
            per_kernel.append(k_s)
            per_shape.append(s_ms)
        for t in p["timing"]:
            for k, v in t.items():
                totals[k] = totals.get(k, 0.0) + v
        totals["wall_ms"] = totals.get("wall_ms", 0.0) + 1000 * p["wall"]
        rows.append(f"| {suite} | {prog} | {p['runs']} | {p['wall']:.2f} | {kernels} | {samples} | "
                    f"{k_s:.2f} | {s_ms:.1f} |")
    print("## Summary\n")
    print(f"Over {len(per_kernel)} kernels of {len(programs)} programs:\n")
    print(f"- median per shape: {st.median(per_shape):.1f} ms")
    print(f"- median per kernel: {st.median(per_kernel):.2f} s")
    print(f"- per kernel: min {min(per_kernel):.2f} s, max {max(per_kernel):.2f} s; "
          f"per shape: min {min(per_shape):.1f} ms, max {max(per_shape):.1f} ms\n")
    w = totals.get("wall_ms", 0.0)
    if w > 0 and totals.get("total_ms"):
        parts = [
            ("outside the collector's requests (process, CUDA, the program's own work, what of "
             "the collector's start that did not hide)", w - totals["total_ms"]),
            ("context set-up (device check, counter availability, metric table, config)", totals.get("context_setup_ms", 0)),
            ("timing the shapes", totals.get("timing_ms", 0)),
            ("profiler sessions' set-up", totals.get("session_setup_ms", 0)),
            ("passes: CUPTI start", totals.get("pass_start_ms", 0)),
            ("passes: ranges (push, launch, pop)", totals.get("pass_ranges_ms", 0)),
            ("passes: synchronisations and L2 flushes", totals.get("pass_sync_ms", 0) + totals.get("pass_flush_ms", 0)),
            ("passes: CUPTI stop", totals.get("pass_stop_ms", 0)),
            ("decode, evaluation, writing", totals.get("decode_ms", 0) + totals.get("evaluate_ms", 0) + totals.get("write_ms", 0)),
        ]
        print("Where the time went, summed over every run (collector timing lines):\n")
        print("| part | s | share |")
        print("| --- | ---: | ---: |")
        for name, ms in parts:
            print(f"| {name} | {ms / 1000:.1f} | {100 * ms / w:.0f} % |")
        print(f"| all runs' walls | {w / 1000:.1f} | 100 % |")
        print(f"\nThe collector's start (libcupti loaded, the profiler initialised) took "
              f"{totals.get('collector_init_ms', 0) / 1000:.1f} s in all; since 3a02632 a thread of "
              f"the profiling runtime does it as the program starts, so that part of it overlaps "
              f"the first row.")
        print(f"\nProfiler passes: {totals.get('passes', 0):.0f} over {totals.get('sessions', 0):.0f} sessions.\n")
    print("## Per program\n")
    print("| suite | program | recipe runs | wall s | kernels | samples | s per kernel | ms per shape |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
