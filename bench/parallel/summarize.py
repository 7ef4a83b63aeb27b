#!/usr/bin/env python3
"""Turns the results of bench/parallel/device.sh into the issue-25 comparison.

    bench/parallel/summarize.py <results dir> <out.json> [--klaraptor PATH]

<results dir> is the unpacked results/ of results.tar.xz (serial/ and parallel/, each with the
profile database, every link's output and the manifests). Per kernel it writes: the usable
samples of each build (samples with counters), the samples that failed in the parallel
build for the collector's or the GPU's reasons, the median over the samples both builds
measured of the time ratio parallel / serial, and whether the model's choice (klaraptor
explain) is the same in both builds at the three study sizes of bench/accuracy/sizes.toml (where
it is not: how much slower each build's model predicts the other's choice).
It prints a table and writes the JSON the issue asks for, with the wall times and the GPU.
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The markers of a collector/GPU failure (profiler/src/record.rs, failure_cause): a sample
# whose error has one of these is the collector's, unless it is a fault of the kernel.
KERNEL_FAULT = ("the CUDA context is unusable", "an error in the kernel", "the kernel failed")
COLLECTOR = ("CUptiResult", "CUPTI", "the profiler failed", "not profiled", "not measured",
             "the collector", "no usable time", "cudaErrorDevicesUnavailable",
             "cudaErrorSystemNotReady", "cudaErrorInsufficientDriver", "cudaErrorNoDevice",
             "busy")


def collector_failure(err):
    if any(m in err for m in KERNEL_FAULT):
        return False
    return any(m in err for m in COLLECTOR)


def entries(db):
    """mangled -> (entry dict, path) of every entry file of a database."""
    out = {}
    for f in sorted(db.rglob("*.toml")):
        if f.name == "README.txt":
            continue
        try:
            e = tomllib.loads(f.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if "kernel" in e:
            out[e["kernel"]["mangled"]] = (e, f)
    return out


def sample_times(e):
    return {(tuple(s["sizes"]), tuple(s["block"])): s["counters"]["time_ms"]
            for s in e.get("samples", []) if s.get("counters")}


def study_sizes(program, data):
    """The kernel's data values at the program's study sizes: the program's arguments
    (named by its Usage line) mapped to the kernel's data parameters."""
    src = (ROOT / "samples/polybench" / program / f"{program}.cu").read_text()
    usage = re.search(r"// Usage: \S+ (.*)", src).group(1)
    names = re.findall(r"\[([A-Z][A-Z0-9_]*)", usage)
    jobs = tomllib.loads((ROOT / "bench/accuracy/sizes.toml").read_text())["job"]
    out = []
    for j in jobs:
        if j["program"] != program:
            continue
        args = [int(a) for a in j["args"].split() if a.isdigit()]
        values = dict(zip(names, args))
        if all(d in values for d in data):
            out.append([values[d] for d in data])
    return out[:3]


def ranking(klaraptor, models, kernel, sizes):
    """The model's ranking at `sizes` (klaraptor explain): [(block, predicted us)], best first."""
    r = subprocess.run([klaraptor, "explain", "--size", ",".join(map(str, sizes)),
                        str(models), kernel], capture_output=True, text=True)
    rows = re.findall(r"^[* ]\s+\d+\s+(\S+)\s+\S+\s+([0-9.]+)", r.stdout, re.M)
    if not rows:
        raise SystemExit(f"klaraptor explain {models} {kernel} {sizes}: {r.stderr or r.stdout}")
    return [(b, float(t)) for b, t in rows]


def compare(klaraptor, ser_models, par_models, kernel, sizes):
    """Both builds' choices at `sizes`, and where they differ, how much slower the other
    build's choice is by each build's own model (predicted time ratio)."""
    rs = ranking(klaraptor, ser_models, kernel, sizes)
    rp = ranking(klaraptor, par_models, kernel, sizes)
    out = {"sizes": sizes, "serial": rs[0][0], "parallel": rp[0][0]}
    if rs[0][0] != rp[0][0]:
        out["serial_model_ratio"] = round(dict(rs)[rp[0][0]] / rs[0][1], 4)
        out["parallel_model_ratio"] = round(dict(rp)[rs[0][0]] / rp[0][1], 4)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--klaraptor", default=str(ROOT / "target/release/klaraptor"))
    a = ap.parse_args()
    ser, par = entries(a.results / "serial/db"), entries(a.results / "parallel/db")
    rows = []
    for mangled in sorted(set(ser) | set(par)):
        es, fs = ser.get(mangled, (None, None))
        ep, fp = par.get(mangled, (None, None))
        e = es or ep
        name, data = e["kernel"]["name"], e["kernel"]["data"]
        ts, tp = (sample_times(es) if es else {}), (sample_times(ep) if ep else {})
        failed = sum(1 for s in (ep or {}).get("samples", [])
                     if s.get("error") and collector_failure(s["error"]))
        ratios = [tp[k] / ts[k] for k in ts.keys() & tp.keys() if ts[k] > 0]
        # The program whose link profiled the kernel: the manifests directory that has it.
        program = next((d.name[:-len(".klaraptor")]
                        for d in sorted((a.results / "serial/models").glob("*.klaraptor"))
                        if any(json.loads(m.read_text()).get("mangled") == mangled
                               for m in d.glob("*.json"))), None)
        choices = []
        if program:
            for sizes in study_sizes(program, data):
                choices.append(compare(a.klaraptor,
                                       a.results / "serial/models" / f"{program}.klaraptor",
                                       a.results / "parallel/models" / f"{program}.klaraptor",
                                       mangled, sizes))
        rows.append({
            "kernel": name,
            "mangled": mangled,
            "program": program,
            "serial_samples": len(ts),
            "parallel_samples": len(tp),
            "failed_parallel": failed,
            "time_ratio_median": round(statistics.median(ratios), 4) if ratios else None,
            "time_ratio_p10_p90": [round(x, 4) for x in statistics.quantiles(ratios, n=10)[::8]] if len(ratios) > 10 else None,
            "choices": choices,
            "choices_equal": bool(choices) and all(c["serial"] == c["parallel"] for c in choices),
        })
    wall = {m: float((a.results / m / "wall_s").read_text()) for m in ("serial", "parallel")}
    gpu = (a.results / "gpu.txt").read_text().splitlines()
    doc = {"gpu": gpu[0], "date": gpu[1] if len(gpu) > 1 else None,
           "wall_s": wall, "kernels": rows}
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{gpu[0]}  serial {wall['serial']:.1f} s, parallel {wall['parallel']:.1f} s")
    print(f"{'kernel':<14} {'serial':>6} {'par.':>6} {'failed':>6} {'ratio':>7}  choices equal")
    for r in rows:
        ratio = "-" if r["time_ratio_median"] is None else f"{r['time_ratio_median']:.3f}"
        print(f"{r['kernel']:<14} {r['serial_samples']:>6} {r['parallel_samples']:>6} "
              f"{r['failed_parallel']:>6} {ratio:>7}  {r['choices_equal']} "
              + " ".join(f"{c['serial']}/{c['parallel']}" for c in r["choices"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
