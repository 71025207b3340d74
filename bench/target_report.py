#!/usr/bin/python3
"""One thread on this CPU: attnkit's best SIMD target against the same binary forced to a lower
one, and both against OpenBLAS in the same processes — the figures a new kind of CPU owes
bench/RESULTS.md and the README's headline table (the lesson models' products, softmax and cross-entropy, whole training steps, and
optionally the lessons against PyTorch).

    /usr/bin/python3 bench/target_report.py [--build build/release] [--vs AVX2] [--rounds 3]
        [--min-time 0.1] [--gemm-filter REGEX] [--skip gemm softmax steps] [--pytorch]
        [--out report.md]

Each round runs every program once on the best target and once with ATTNKIT_SIMD_TARGET=--vs,
alternating, so both see the same minutes of this shared machine; a figure is the median over
rounds of each run's median of 5 repetitions, a ratio the median of the per-round ratios
(range in brackets). OpenBLAS runs on its own kernel pick (OPENBLAS_CORETYPE is removed from
the environment). --pytorch adds bench/compare_pytorch.py's lesson table (needs
python3-torch: ATTNKIT_SETUP_TORCH=1 tools/setup.sh).

The report is Markdown on stdout (and in --out): the CPU and targets, then one table per
program, then the checks the SIMD-target issue asks for, each marked met or not:
batched tiny products >= 2x OpenBLAS; every product the lessons run >= 1.0x OpenBLAS and >= the
lower target; softmax and cross-entropy >= the lower target; whole steps no slower on the best
target; every lesson model >= 10x PyTorch (with --pytorch).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gbench_json  # noqa: E402  (bench/gbench_json.py, beside this script)

# The lesson steps' products and the batched attention products (bench_gemm names).
GEMM_FILTER = r"(attnkit|openblas)/(step_(ns|dup|rev)_|batched128_.*1t)"
# Forwards without a bias: bench_gemm's reference rows. Every Linear of the lessons has a bias
# (the fwd_bias rows), so these are reported but not held to the lesson-product check.
NOT_A_LESSON_PRODUCT = re.compile(r"_fwd_nn_")
MODELS = "neighbor-sum,duplicates,reversal"


def fail(msg):
    gbench_json.fail("target_report", msg)


def cpu_summary():
    """(model name, "family F model M", the SIMD flags that decide the targets) of this CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "unknown", "", []
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    fam = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
    mod = re.search(r"^model\s*:\s*(\d+)", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    flags = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else "unknown",
            f"family {fam.group(1)} model {mod.group(1)}" if fam and mod else "",
            [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags])


def run_json(cmd, env):
    """(context, {name: median real_time ns}) of a Google Benchmark program's JSON run."""
    return gbench_json.run_json(cmd, env, "target_report")


def bench_env(target):
    """OpenBLAS on its own pick; ATTNKIT_SIMD_TARGET = target (None: the best one)."""
    return gbench_json.bench_env({"ATTNKIT_SIMD_TARGET": target or None})


def x2(v):
    """A ratio to 2 decimals, or 3 where 2 would round it onto a check's bound (0.996 is not
    "1.00", 1.996 not "2.00": the checks compare with 1 and 2)."""
    s = f"{v:.2f}"
    return f"{v:.3f}" if (s in ("1.00", "2.00") and v < float(s)) else s


def fmt_ratio(xs):
    m = statistics.median(xs)
    return f"**{x2(m)}×** ({x2(min(xs))}–{x2(max(xs))})" if len(xs) > 1 else f"**{x2(m)}×**"


def us(ns):
    return f"{ns / 1000:.2f}"


def speedup_table(res, best, lower, what):
    """Markdown rows of each benchmark's times on the two targets and the speed-up (the lower
    target's time / the best one's, per round), and the benchmarks whose median is under 1."""
    rows = [f"| {what} | {best} | {lower} | {best} vs {lower} (speed-up) |", "|---|---|---|---|"]
    slower = []
    for n in res[0][None]:
        up = [r[lower][n] / r[None][n] for r in res]
        if statistics.median(up) < 1.0:
            slower.append(f"{n} {x2(statistics.median(up))}×")
        rows.append(f"| `{n}` | {us(statistics.median(r[None][n] for r in res))} | "
                    f"{us(statistics.median(r[lower][n] for r in res))} | {fmt_ratio(up)} |")
    return rows + [""], slower


class Runner:
    def __init__(self, args):
        self.args = args

    def flags(self, min_time=None):
        """Google Benchmark's flags for every run: medians of 5 repetitions, as JSON."""
        return gbench_json.flags(min_time or self.args.min_time)

    def program(self, name):
        path = os.path.join(self.args.build, "bench", name)
        if not os.access(path, os.X_OK):
            fail(f"{path} not found: build first (cmake --preset release && cmake --build --preset release)")
        return path

    def rounds(self, cmd, targets):
        """[{target: medians}] for each round, the targets alternating within a round."""
        out = []
        for r in range(self.args.rounds):
            order = targets if r % 2 == 0 else list(reversed(targets))
            got = {}
            for t in order:
                got[t] = run_json(cmd, bench_env(t))[1]
            out.append(got)
            print(f"target_report: {os.path.basename(cmd[0])} round {r + 1}/{self.args.rounds} done",
                  file=sys.stderr)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--vs", default="AVX2", help="the lower target to force (ATTNKIT_SIMD_TARGET)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--gemm-filter", default=GEMM_FILTER)
    ap.add_argument("--skip", nargs="*", default=[], choices=["gemm", "softmax", "steps"])
    ap.add_argument("--pytorch", action="store_true", help="also run compare_pytorch.py")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.rounds < 1:
        fail("--rounds must be at least 1")
    if args.out:
        gbench_json.check_out_path("target_report", "--out", args.out)
    runner = Runner(args)
    lines = []
    checks = []  # (what, met, detail)

    model, family, flags = cpu_summary()
    # The best target: what a program reports with no ATTNKIT_SIMD_TARGET.
    best_ctx, _ = run_json([runner.program("bench_softmax"), "--benchmark_filter=BM_cross_entropy/2/0"]
                           + runner.flags(0.01), bench_env(None))
    best = best_ctx.get("attnkit_simd_target", "?")
    lower = args.vs.upper()
    targets = [None] if best.upper() == lower else [None, lower]
    lines.append(f"CPU: {model} ({family}; flags: {', '.join(flags) or 'none of avx2/avx512f'}); "
                 f"best SIMD target **{best}**" + (f", compared with the same binary forced to {lower}"
                                                   if len(targets) == 2 else "") +
                 f"; small products' A values: {best_ctx.get('attnkit_small_gemm', '?')}"
                 f"; AVX-512 core width: {best_ctx.get('attnkit_avx512_width', '?')}"
                 f"; 9/10-column products: {best_ctx.get('attnkit_ten_columns', '?')}"
                 f"; OpenBLAS kernels: {best_ctx.get('openblas_kernels', '?')}; one thread; "
                 f"{args.rounds} round(s), medians of 5 repetitions each.")
    lines.append("")

    if "gemm" not in args.skip:
        cmd = [runner.program("bench_gemm"), f"--benchmark_filter={args.gemm_filter}"] + runner.flags()
        res = runner.rounds(cmd, targets)
        names = [n[len("attnkit/"):] for n in res[0][None] if n.startswith("attnkit/")]
        lines.append(f"### Products (`bench_gemm --benchmark_filter='{args.gemm_filter}'`), µs")
        lines.append("")
        head = f"| product | attnkit {best} | OpenBLAS | {best} vs OpenBLAS |"
        sep = "|---|---|---|---|"
        if len(targets) == 2:
            head += f" attnkit {lower} | {best} vs {lower} |"
            sep += "---|---|"
        lines += [head, sep]
        lesson_low, below_lower, batched = [], [], []
        for n in names:
            lesson = not NOT_A_LESSON_PRODUCT.search(n)
            ours = [r[None]["attnkit/" + n] for r in res]
            # (OpenBLAS as timed in the best target's runs: the same processes as the ratio)
            blas = [r[None]["openblas/" + n] for r in res if "openblas/" + n in r[None]]
            ratio = [r[None]["openblas/" + n] / r[None]["attnkit/" + n] for r in res if "openblas/" + n in r[None]]
            row = f"| `{n}`{'' if lesson else ' (no bias: not a lesson product)'} | {us(statistics.median(ours))} |"
            if ratio:  # (a filter may select rows OpenBLAS has no twin of)
                m = statistics.median(ratio)
                row += f" {us(statistics.median(blas))} | {fmt_ratio(ratio)} |"
                if n.startswith("batched128_"):
                    batched.append((n, m))
                if lesson and m < 1.0:
                    lesson_low.append(f"{n} {x2(m)}×")
            else:
                row += " — | — |"
            if len(targets) == 2:
                theirs = [r[lower]["attnkit/" + n] for r in res]
                vs = [r[lower]["attnkit/" + n] / r[None]["attnkit/" + n] for r in res]
                row += f" {us(statistics.median(theirs))} | {fmt_ratio(vs)} |"
                if statistics.median(vs) < 1.0:
                    below_lower.append(f"{n} {x2(statistics.median(vs))}×")
            lines.append(row)
        lines.append("")
        low_batched = [f"{n} {x2(m)}×" for n, m in batched if m < 2.0]
        if batched:
            checks.append(("batched tiny products ≥ 2× OpenBLAS", not low_batched,
                           ", ".join(low_batched) or ", ".join(f"{n} {x2(m)}×" for n, m in batched)))
        checks.append(("every lesson product ≥ 1.0× OpenBLAS", not lesson_low, ", ".join(lesson_low) or "all"))
        if len(targets) == 2:
            checks.append((f"every product ≥ the {lower} build", not below_lower, ", ".join(below_lower) or "all"))

    if "softmax" not in args.skip and len(targets) == 2:
        cmd = [runner.program("bench_softmax"), "--benchmark_filter=attnkit|cross_entropy"] + runner.flags()
        table, slow = speedup_table(runner.rounds(cmd, targets), best, lower, "benchmark")
        lines += ["### Softmax and cross-entropy (`bench_softmax --benchmark_filter='attnkit|cross_entropy'`), µs",
                  ""] + table
        checks.append((f"softmax and cross-entropy ≥ the {lower} build", not slow, ", ".join(slow) or "all"))

    if "steps" not in args.skip and len(targets) == 2:
        cmd = [runner.program("bench_train_step"), f"--models={MODELS}", "--threads=1"] + runner.flags(
            max(args.min_time, 0.3))
        table, slower = speedup_table(runner.rounds(cmd, targets), best, lower, "step")
        lines += [f"### Whole training steps (`bench_train_step --models={MODELS} --threads=1`), µs", ""] + table
        checks.append((f"no lesson step slower on {best} than on {lower}", not slower, ", ".join(slower) or "none slower"))

    if args.pytorch:
        with tempfile.TemporaryDirectory(prefix="target_report.") as tmp:
            table = os.path.join(tmp, "pytorch.json")
            cmd = ["/usr/bin/python3", os.path.join(HERE, "compare_pytorch.py"), "--attnkit-bench",
                   runner.program("bench_train_step"), "--models", *MODELS.split(","), "--threads", "1",
                   "--seconds", "2", "--windows", "5", "--rounds", str(args.rounds), "--json", table]
            proc = subprocess.run(cmd, env=bench_env(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            rows = []
            if proc.returncode == 0 and os.path.isfile(table):
                with open(table) as f:
                    rows = [r for r in json.load(f)["rows"] if r["threads"] == 1 and r["precision"] == "f32"]
        lines.append("### Training against PyTorch (`bench/compare_pytorch.py`, one thread)")
        lines.append("")
        lines += ["    " + l for l in proc.stdout.rstrip().splitlines()]
        lines.append("")
        what = "every lesson model ≥ 10× PyTorch"
        if proc.returncode != 0 or not rows:
            checks.append((what, False, f"compare_pytorch.py exited {proc.returncode}" +
                           ("" if proc.returncode else " without a table")))
        else:
            cells = [(r["model"], r["ratio"]) for r in rows]
            low = [f"{m} {x:.2f}×" if x is not None else f"{m} n/a" for m, x in cells if x is None or x < 10.0]
            checks.append((what, not low, ", ".join(low) or ", ".join(f"{m} {x:.2f}×" for m, x in cells)))

    lines.append("### Checks")
    lines.append("")
    if len(targets) == 1:
        lines.append(f"- (the best target is {best} itself: no comparison with a lower target, and no "
                     f"softmax or step tables)")
    for what, met, detail in checks:
        lines.append(f"- {'met' if met else 'NOT met'}: {what} — {detail}")
    gbench_json.emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
