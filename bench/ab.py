#!/usr/bin/python3
"""A against B, rounds alternating: two builds of a benchmark program (the old code against
the new), or one program under two environments (ATTNKIT_SMALL_GEMM=split against broadcast,
ATTNKIT_SIMD_TARGET=AVX2 against the best) — how to see a few percent on a machine whose speed
drifts by tens of percent from one minute to the next.

    /usr/bin/python3 bench/ab.py --a OLD/bench/bench_gemm [--b NEW/bench/bench_gemm]
        [--a-env NAME=VALUE ...] [--b-env NAME=VALUE ...] [--filter REGEX] [--rounds 12]
        [--min-time 0.05] [--statistic median|min] [--out ab.md]

Each round runs A and B once each (A first in odd rounds, B first in even ones), every run a
median of 5 repetitions of the benchmarks --filter selects (keep it short: a run of a few
seconds, so that both sides of a round see the same minute). Without --b, B is A's program.
OPENBLAS_CORETYPE is removed from both environments (OpenBLAS on its own pick, as
target_report.py). Prints Markdown: per benchmark the medians over rounds of A's and B's
times and B's time / A's (the median of the per-round ratios, their range): under 1, B is
faster.

--statistic min takes each run's fastest repetition instead, and prints the fastest over all
rounds of A and of B and their ratio (the per-round ratios' range beside it). On a machine
whose slow phases only add time (a VM sharing its host), the minimum is the steadier figure:
on the Zen 5 VM in session 49 OpenBLAS's own rows, the same code on both sides, moved 0.86–1.04×
between A and B in medians of 4 rounds, and within ±1.5% in minima of 6.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gbench_json  # noqa: E402  (bench/gbench_json.py, beside this script)


def fail(msg):
    gbench_json.fail("ab", msg)


def environment(pairs, what):
    overrides = {}
    for p in pairs:
        name, eq, value = p.partition("=")
        if not eq or not name:
            fail(f"{what} {p!r}: expected NAME=VALUE")
        overrides[name] = value
    return gbench_json.bench_env(overrides)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="A's benchmark program")
    ap.add_argument("--b", help="B's benchmark program (default: A's)")
    ap.add_argument("--a-env", nargs="*", default=[], metavar="NAME=VALUE")
    ap.add_argument("--b-env", nargs="*", default=[], metavar="NAME=VALUE")
    ap.add_argument("--filter", default=".", help="--benchmark_filter for both")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--statistic", choices=("median", "min"), default="median",
                    help="each run's median of its 5 repetitions (default), or their minimum")
    ap.add_argument("--out", help="also write the table to this file (whole or not at all)")
    args = ap.parse_args()
    if args.rounds < 1:
        fail("--rounds must be at least 1")
    if args.out:
        gbench_json.check_out_path("ab", "--out", args.out)
    programs = {"A": args.a, "B": args.b or args.a}
    for side, path in programs.items():
        if not os.access(path, os.X_OK):
            fail(f"{side}'s program {path} is not an executable file")
    envs = {"A": environment(args.a_env, "--a-env"), "B": environment(args.b_env, "--b-env")}
    if programs["A"] == programs["B"] and args.a_env == args.b_env:
        fail("A and B are the same program in the same environment: give --b or an --a-env/--b-env")

    rounds = []
    for r in range(args.rounds):
        got = {}
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            cmd = [programs[side], f"--benchmark_filter={args.filter}"] + gbench_json.flags(args.min_time,
                                                                                          args.statistic)
            got[side] = gbench_json.run_json(cmd, envs[side], "ab", args.statistic)[1]
        rounds.append(got)
        print(f"ab: round {r + 1}/{args.rounds} done", file=sys.stderr)

    def describe(side, env_pairs):
        return f"`{programs[side]}`" + (" with " + " ".join(f"`{p}`" for p in env_pairs) if env_pairs else "")

    lines = [f"A: {describe('A', args.a_env)}; B: {describe('B', args.b_env)}; "
             f"{args.rounds} rounds alternating, each run the {args.statistic} of 5 repetitions; "
             f"filter `{args.filter}`.", "",
             (f"| benchmark | A µs | B µs | B / A time (median; range) |" if args.statistic == "median" else
              f"| benchmark | A µs (fastest) | B µs (fastest) | B / A time (fastest; per-round range) |"),
             "|---|---|---|---|"]
    names = [n for n in rounds[0]["A"] if all(n in r["A"] and n in r["B"] for r in rounds)]
    if not names:
        fail("A and B have no benchmark in common (different programs, or a filter one of them lacks)")
    seen = set().union(*(set(r["A"]) | set(r["B"]) for r in rounds))
    missing = sorted(seen - set(names))
    for n in names:
        ratio = [r["B"][n] / r["A"][n] for r in rounds]
        over_rounds = statistics.median if args.statistic == "median" else min
        a = over_rounds(r["A"][n] for r in rounds) / 1000
        b = over_rounds(r["B"][n] for r in rounds) / 1000
        rng = f" ({min(ratio):.3f}–{max(ratio):.3f})" if len(ratio) > 1 else ""
        headline = statistics.median(ratio) if args.statistic == "median" else b / a
        lines.append(f"| `{n}` | {a:.3f} | {b:.3f} | **{headline:.3f}**{rng} |")
    if missing:
        lines += ["", "Not in every run of both (left out): " + ", ".join(f"`{n}`" for n in missing)]
    gbench_json.emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
