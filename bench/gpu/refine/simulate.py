#!/usr/bin/env python3
"""Replays the runtime's refinement (runtime-shim/src/klaraptor_rt.c: rf_new's candidates,
rf_walk's neighbour walk, rf_choice's incumbent rule) over committed exhaustive sweeps, with
the sweep's times as the oracle (no noise, no batching): for each kernel x size, which shapes
each candidate rule tries and where it settles.

Input: the JSON lines of `KL_REPLAY_RANKS=<file> cargo run --release --example replay -- ...`
(one per case: the rational program's ranking, its profiled best, the program's own shape,
the sweep's time of every shape). Halves from bench/accuracy/split.toml.

  python3 bench/gpu/refine/simulate.py --suite polybench=<ranks.jsonl>... \
      --suite idioms=<ranks.jsonl> [--rules top3,span] [--cases]

Per rule, suite, GPU and half: geometric mean and minimum of optimum / settled, and the
shapes tried (candidates and walk steps: each costs a few timed launches in the runtime).
"""
import argparse
import json
import math
import tomllib
from collections import defaultdict
from pathlib import Path

PLATEAU, FLAT, GAIN, STEPS, INCUMBENT = 1.03, 1, 0.99, 4, 1.03


def threads(b):
    return b[0] * b[1] * b[2]


def far_apart(a, b, ratio):
    """Two shapes a spanning rule counts as different: thread counts, or some block axis,
    `ratio` times apart or more."""
    def apart(x, y):
        return max(x, y) >= ratio * min(x, y)
    return apart(threads(a), threads(b)) or any(apart(a[i], b[i]) for i in range(3))


def cands_top(case, k):
    """The current rule: the model's first k shapes."""
    return case["ranked"][:k]


def cands_span(case, k, ask, ratio):
    """The spanning rule: of the model's first `ask` shapes, its first, then in rank order
    each shape far apart (`ratio`) from every one taken, until k are taken."""
    taken = []
    for b in case["ranked"][:ask]:
        if all(far_apart(b, t, ratio) for t in taken):
            taken.append(b)
        if len(taken) == k:
            break
    return taken


def simulate(case, model_cands, walk=True):
    t = {tuple(map(int, key.split("x"))): v for key, v in case["times_ms"].items()}
    listed = {tuple(b) for b in case["ranked"]}
    cands = []  # [shape, program flag]

    def add(b, program=False):
        b = tuple(b)
        if b not in t:
            return False
        for c in cands:
            if c[0] == b:
                # the program's own shape among the model's: that candidate is the program's
                # too (tried first, the incumbent rule), as the runtime's rf_add does
                c[1] = c[1] or program
                return False
        cands.append([b, program])
        return True

    for b in model_cands:
        add(b)
    if case.get("profiled"):
        add(case["profiled"])
    add(case["program_shape"], True)
    if len(cands) < 2:
        best = cands[0][0] if cands else None
        return best, len(cands), [c[0] for c in cands]
    initial = len(cands)

    def best_idx():
        return min(range(len(cands)), key=lambda i: t[cands[i][0]])

    if walk:
        dim = case["dim"]
        ndir = 2 * dim + (2 if dim >= 2 else 0)
        d, frm, steps, flat = 0, best_idx(), 0, 0
        while d < ndir:
            b = list(cands[frm][0])
            ok = steps < STEPS
            if d < 2 * dim:
                axis, up = d // 2, d % 2
                if up:
                    b[axis] *= 2
                else:
                    ok = ok and b[axis] >= 2
                    b[axis] //= 2
            else:
                grow, shrink = (0, 1) if d == 2 * dim else (1, 0)
                ok = ok and b[shrink] >= 2 and b[shrink] % 2 == 0
                b[grow] *= 2
                b[shrink] //= 2
            b = tuple(b)
            ok = ok and b in listed and b in t
            idx = next((i for i, c in enumerate(cands) if c[0] == b), -1) if ok else -1
            if ok and idx < 0:
                add(b)
                idx = len(cands) - 1
            if idx >= 0:
                others = min(t[c[0]] for i, c in enumerate(cands) if i != idx)
                if t[b] <= PLATEAU * others:
                    gains = t[b] < GAIN * others
                    if gains or flat < FLAT:
                        flat = 0 if gains else flat + 1
                        frm, steps = idx, steps + 1
                        continue
            d, frm, steps, flat = d + 1, best_idx(), 0, 0
    bi = best_idx()
    for i, c in enumerate(cands):
        if c[1] and i != bi and t[cands[bi][0]] * INCUMBENT > t[c[0]]:
            bi = i
    return cands[bi][0], len(cands), [c[0] for c in cands][:initial]


def log_dist(a, b):
    """How far apart two shapes are: the sum over the block axes of |log2 a_i - log2 b_i|
    (1024 and 992 threads: 0.05; 32x8 and 64x4: 2)."""
    return sum(abs(math.log2(a[i]) - math.log2(b[i])) for i in range(3))


def cands_ties(case, k, ask, window):
    """The model's first shape, then among the shapes of its first `ask` predicted within
    `window` of its best prediction (ties, for a model of a few per cent of error) the one
    farthest from those taken, while it is at least 2x apart in some axis (distance >= 1);
    then the rest in rank order, skipping shapes less than 2x apart from every one taken."""
    ranked, pred = case["ranked"][:ask], case["predicted_us"][:ask]
    best = min(pred)
    taken = [ranked[0]]
    ties = [b for b, p in zip(ranked, pred) if p <= (1 + window) * best]
    while len(taken) < k:
        far = max(ties, key=lambda b: min(log_dist(b, t) for t in taken))
        if min(log_dist(far, t) for t in taken) < 1:
            break
        taken.append(far)
    for b in ranked:
        if len(taken) == k:
            break
        if b not in taken and min(log_dist(b, t) for t in taken) >= 1:
            taken.append(b)
    for b in ranked:
        if len(taken) == k:
            break
        if b not in taken:
            taken.append(b)
    return taken


RULES = {
    "ties32w02": lambda c: cands_ties(c, 3, 32, 0.02),
    "ties32w05": lambda c: cands_ties(c, 3, 32, 0.05),
    "ties32w10": lambda c: cands_ties(c, 3, 32, 0.10),
    "ties32w20": lambda c: cands_ties(c, 3, 32, 0.20),
    "ties16w05": lambda c: cands_ties(c, 3, 16, 0.05),
    "ties16w10": lambda c: cands_ties(c, 3, 16, 0.10),
    "top3": lambda c: cands_top(c, 3),
    "span16x2": lambda c: cands_span(c, 3, 16, 2),
    "span32x2": lambda c: cands_span(c, 3, 32, 2),
    "span16x4": lambda c: cands_span(c, 3, 16, 4),
    "span32x4": lambda c: cands_span(c, 3, 32, 4),
    "span64x4": lambda c: cands_span(c, 3, 64, 4),
    "span32x8": lambda c: cands_span(c, 3, 32, 8),
    "span32x3": lambda c: cands_span(c, 3, 32, 3),
    "span24x4": lambda c: cands_span(c, 3, 24, 4),
    "span32x4k4": lambda c: cands_span(c, 4, 32, 4),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", action="append", required=True, help="<suite>=<jsonl>")
    ap.add_argument("--split", default=str(Path(__file__).resolve().parents[2] / "accuracy/split.toml"))
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--no-walk", action="store_true")
    ap.add_argument("--cases", action="store_true", help="list the cases below 0.95 per rule")
    a = ap.parse_args()
    split = tomllib.loads(Path(a.split).read_text())
    rules = a.rules.split(",")
    groups = defaultdict(lambda: defaultdict(list))  # (suite, gpu, half) -> rule -> [(ratio, n)]
    low = defaultdict(list)
    for spec in a.suite:
        suite, path = spec.split("=", 1)
        for line in Path(path).read_text().splitlines():
            case = json.loads(line)
            half = "tuning" if case["program"] in split[suite]["tuning"] else "test"
            opt = min(case["times_ms"].values())
            for r in rules:
                shape, n, first = simulate(case, RULES[r](case), walk=not a.no_walk)
                key = "x".join(map(str, shape))
                ratio = opt / case["times_ms"][key]
                groups[(suite, case["device"], half)][r].append((ratio, n))
                if ratio < 0.95:
                    low[r].append((ratio, case["device"], case["program"], case["kernel"],
                                   case["size"], first, shape))
    print(f"{'suite':10} {'gpu':22} {'half':6} {'cases':>5}  " +
          "  ".join(f"{r:>22}" for r in rules))
    for g in sorted(groups):
        row = groups[g]
        n = len(row[rules[0]])
        cells = []
        for r in rules:
            v = row[r]
            geo = math.exp(sum(math.log(x) for x, _ in v) / len(v))
            cells.append(f"{geo:.4f} {min(x for x, _ in v):.3f} {sum(k for _, k in v) / len(v):5.2f}")
        print(f"{g[0]:10} {g[1]:22} {g[2]:6} {n:5}  " + "  ".join(f"{c:>22}" for c in cells))
    for half in ("tuning", "test"):
        cells = []
        for r in rules:
            v = [x for g in groups if g[2] == half for x in groups[g][r]]
            geo = math.exp(sum(math.log(x) for x, _ in v) / len(v))
            cells.append(f"{geo:.4f} {min(x for x, _ in v):.3f} {sum(k for _, k in v) / len(v):5.2f}")
        print(f"{'all':10} {'all':22} {half:6} {len(v):5}  " + "  ".join(f"{c:>22}" for c in cells))
    print("cells: geomean of optimum/settled, minimum, shapes tried per case (mean)")
    if a.cases:
        for r in rules:
            print(f"\n{r}: cases below 0.95")
            for x in sorted(low[r]):
                print(f"  {x[0]:.3f} {x[1]} {x[2]} {x[3]} {x[4]} first={x[5]} settled={x[6]}")


if __name__ == "__main__":
    main()
