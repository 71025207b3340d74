"""Running a Google Benchmark program for its medians, and writing a report file whole: shared
by bench/target_report.py, bench/ab.py and bench/compare_pytorch.py."""
import json
import os
import subprocess
import sys


def fail(who, msg):
    print(f"{who}: {msg}", file=sys.stderr)
    sys.exit(2)


def run_json(cmd, env, who, statistic="median"):
    """Runs a Google Benchmark program with JSON output (its flags must ask for repetitions and
    --benchmark_format=json: flags(min_time, statistic)): (context, {name: real_time ns}), the
    median of the repetitions or, with statistic="min", their minimum; name without
    "/real_time". Exits 2 with `who`'s name on a failed run or one with no such figures."""
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail(who, f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    if not proc.stdout.strip():
        fail(who, f"{' '.join(cmd)} ran no benchmark (does the filter match anything?)")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        fail(who, f"{cmd[0]} did not print JSON ({e})")
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    figures = {}
    for b in data.get("benchmarks", []):
        if statistic == "min":
            if b.get("run_type") != "iteration" or "error_occurred" in b:
                continue
            name = b.get("run_name", b["name"])
        elif b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median":
            name = b["run_name"] if "run_name" in b else b["name"].rsplit("_median", 1)[0]
        else:
            continue
        if name.endswith("/real_time"):
            name = name[: -len("/real_time")]
        t = b["real_time"] * scale[b.get("time_unit", "ns")]
        figures[name] = min(t, figures.get(name, t))
    if not figures:
        fail(who, f"{' '.join(cmd)} reported no {statistic} times (does the filter match anything?)")
    return data.get("context", {}), figures


def flags(min_time, statistic="median"):
    """The flags every run takes: 5 repetitions, as JSON; only their median reported, or with
    statistic="min" every repetition (run_json takes the minimum)."""
    return [f"--benchmark_min_time={min_time}", "--benchmark_repetitions=5",
            f"--benchmark_report_aggregates_only={'false' if statistic == 'min' else 'true'}",
            "--benchmark_format=json"]


def write_whole(path, text):
    """text to path whole or not at all: a temporary file beside it (named for this process),
    then renamed over it; the temporary file is removed if anything fails."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_out_path(who, flag, path):
    """Exits 2 naming `flag` when path could not be written (a folder, a missing or read-only
    folder): called before anything is measured, so a long run is not lost at its end."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        fail(who, f"{flag} {path}: is a folder, not a file")
    if not os.path.isdir(folder):
        fail(who, f"{flag} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        fail(who, f"{flag} {path}: folder {folder} is not writable")


def bench_env(overrides=None):
    """This process's environment for a benchmark run: OPENBLAS_CORETYPE removed (OpenBLAS on
    its own pick for the CPU), then overrides (name: value, or None to remove the name)."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    for name, value in (overrides or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def emit(report, out):
    """The report to stdout, and whole to the file out when given."""
    sys.stdout.write(report)
    if out:
        write_whole(out, report)
