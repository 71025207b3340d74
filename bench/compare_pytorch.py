#!/usr/bin/python3
"""Training steps/s of the lesson models: PyTorch against attnkit, side by side.

    /usr/bin/python3 bench/compare_pytorch.py [--threads 1 2] [--models neighbor-sum ...]
        [--seconds 3] [--windows 5] [--large-seconds 8] [--large-windows 3] [--batch N]
        [--rounds R] [--attnkit-bench PATH]

PyTorch: the same architectures as models/lessons.cc (tok[+pos] Embedding D=32, multi-head
attention with separate q, k, v, o Linear(D, D)+bias, out = head(h + attn(h))), Adam with the
lesson's lr, cross-entropy averaged over all positions, random token batches (with the task's
targets) pre-generated and cycled. Steps/s = median over --windows timed windows after
warm-up; --seconds is the total timed time per (model, threads) measurement.

"reversal-large" is the compute-bound configuration (not run by default): V = 64,
T = 128, D = 256, tok+pos Embedding, 2 pre-LayerNorm blocks h = h + attn(LN(h)),
h = h + MLP(LN(h)) with MLP Linear(256, 1024)-ReLU-Linear(1024, 256), 4 heads, head
LayerNorm + Linear(256, 64), target = the reversed sequence, batch 32, Adam lr 1e-3. PyTorch
runs it at about 1 step/s, so it is measured with --large-seconds over --large-windows
windows (each window at least one step).

Each thread count runs in its own child process whose environment pins the thread pools
before torch is imported: OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = n, OMP_WAIT_POLICY=PASSIVE;
the child also calls torch.set_num_threads(n) and openblas_set_num_threads(n) (ctypes, on the
libopenblas torch loaded) and checks both took effect.

attnkit: runs the built bench_train_step with --benchmark_format=json, repetitions =
--windows, min_time = seconds / windows, and takes the median steps/s.

--rounds R repeats each (model, threads) pair R times, PyTorch and attnkit alternating, and
reports the median of the per-round ratios with their range: on this shared machine
PyTorch's steps/s drift by 30% and more from one minute to the next (neighbor-sum at one
thread: 145 to 234 steps/s within ten minutes), so one round's ratio can mislead.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LESSONS = {
    # task: vocab, classes, T, D, heads, positions, head kind, hidden, batch, lr
    "neighbor-sum": dict(vocab=10, classes=10, T=10, D=32, heads=2, pos=True, head="mlp",
                         hidden=128, batch=64, lr=0.01),
    "duplicates": dict(vocab=12, classes=2, T=10, D=32, heads=1, pos=False, head="mlp",
                       hidden=64, batch=64, lr=0.003),
    "reversal": dict(vocab=10, classes=10, T=8, D=32, heads=1, pos=True, head="ln",
                     hidden=0, batch=32, lr=0.003),
    # models/lessons.cc lesson_config("reversal-large")
    "reversal-large": dict(vocab=64, classes=64, T=128, D=256, heads=4, pos=True, head="ln",
                           hidden=0, batch=32, lr=0.001, layers=2, pre_norm=True,
                           block_mlp=1024),
}
DEFAULT_MODELS = ["neighbor-sum", "duplicates", "reversal"]
LARGE = {"reversal-large"}


def sized(c, task, seq_len, vocab):
    """The lesson's configuration at another T and V, as `attnkit train --seq-len --vocab`
    sizes it (models/lessons.cc resize_task: the classes follow V, duplicates keeps 2)."""
    c = dict(c)
    if seq_len:
        c["T"] = seq_len
    if vocab:
        c["vocab"] = vocab
        c["classes"] = 2 if task == "duplicates" else vocab
    return c


def timing(args, task):
    """(seconds, windows) of one measurement of task."""
    if task in LARGE:
        return args.large_seconds, args.large_windows
    return args.seconds, args.windows


def die(msg):
    print("compare_pytorch: " + msg, file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------- PyTorch side

def torch_worker(args):
    """Runs in a child with the thread environment set; prints one JSON line of results."""
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        die("PyTorch is not importable by %s (%s); install python3-torch" % (sys.executable, e))
    import ctypes
    import numpy as np

    n = args.worker_threads
    torch.set_num_threads(n)
    blas = None
    with open("/proc/self/maps") as f:
        for line in f:
            if "openblas" in line.lower() and ".so" in line:
                blas = line.split()[-1]
                break
    blas_threads = None
    blas_core = None
    if blas:
        lib = ctypes.CDLL(blas)
        corename = getattr(lib, "openblas_get_corename", None)
        if corename is not None:
            corename.restype = ctypes.c_char_p
            blas_core = corename().decode()
        for prefix in ("", "scipy_"):
            setter = getattr(lib, prefix + "openblas_set_num_threads", None)
            getter = getattr(lib, prefix + "openblas_get_num_threads", None)
            if setter is not None:
                setter(ctypes.c_int(n))
                blas_threads = getter() if getter is not None else None
                break
    if torch.get_num_threads() != n:
        die("torch.get_num_threads() = %d, wanted %d" % (torch.get_num_threads(), n))
    if blas_threads is not None and blas_threads != n:
        die("openblas_get_num_threads() = %d, wanted %d" % (blas_threads, n))

    from torch_lessons import Lesson, targets

    results = {}
    rng = np.random.default_rng(12345)
    torch.manual_seed(0)
    if args.infer:
        # Inference: sequences/s of model(x) under torch.inference_mode() per batch size.
        for task in args.models:
            c = sized(LESSONS[task], task, args.seq_len, args.vocab)
            model = Lesson(c).eval()
            seconds, windows = timing(args, task)
            for batch in args.infer_batches:
                if task in LARGE and batch > 500:
                    continue
                x = torch.from_numpy(rng.integers(0, c["vocab"], size=(batch, c["T"])).astype(np.int64))
                with torch.inference_mode():
                    t_end = time.perf_counter() + max(0.2, 0.2 * seconds)
                    warm = 0
                    while time.perf_counter() < t_end or warm < 2:
                        model(x)
                        warm += 1
                    rates = []
                    for _ in range(windows):
                        calls, t0 = 0, time.perf_counter()
                        while True:
                            model(x)
                            calls += 1
                            dt = time.perf_counter() - t0
                            if dt >= seconds / windows:
                                break
                        rates.append(calls * batch / dt)
                results["%s/batch:%d" % (task, batch)] = dict(median=statistics.median(rates), batch=batch)
        print(json.dumps(dict(threads=n, torch_threads=torch.get_num_threads(), openblas=blas,
                              openblas_threads=blas_threads, openblas_core=blas_core,
                              torch_version=torch.__version__, results=results)))
        return
    for task in args.models:
        c = sized(LESSONS[task], task, args.seq_len, args.vocab)
        batch = args.batch or c["batch"]
        model = Lesson(c)
        opt = torch.optim.Adam(model.parameters(), lr=c["lr"])
        data = []
        for _ in range(4):
            x = rng.integers(0, c["vocab"], size=(batch, c["T"]))
            data.append((torch.from_numpy(x.astype(np.int64)),
                         torch.from_numpy(targets(task, x, c["vocab"]).astype(np.int64))))
        state = {"i": 0}

        def step():
            x, y = data[state["i"] % len(data)]
            state["i"] += 1
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, c["classes"]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        seconds, windows = timing(args, task)
        t_end = time.perf_counter() + max(0.3, 0.2 * seconds)  # warm-up (at least 2 steps)
        warm = 0
        while time.perf_counter() < t_end or warm < 2:
            step()
            warm += 1
        window = seconds / windows
        rates = []
        for _ in range(windows):
            steps = 0
            t0 = time.perf_counter()
            while True:
                step()
                steps += 1
                dt = time.perf_counter() - t0
                if dt >= window:
                    break
            rates.append(steps / dt)
        results[task] = dict(median=statistics.median(rates), windows=rates,
                             loss=float(step().item()), batch=batch)
    print(json.dumps(dict(threads=n, torch_threads=torch.get_num_threads(),
                          openblas=blas, openblas_threads=blas_threads, openblas_core=blas_core,
                          torch_version=torch.__version__, results=results)))


def openblas_kernels_line(info):
    """Which OpenBLAS kernels PyTorch's products ran on: OPENBLAS_CORETYPE in the environment
    overrides OpenBLAS's own pick for the CPU (a Haswell override leaves an AVX-512 CPU on
    AVX2 kernels), so the figures name it."""
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return "PyTorch's OpenBLAS kernels: %s (%s)" % (
        info.get("openblas_core") or "unknown",
        "forced by OPENBLAS_CORETYPE=%s in the environment" % forced if forced
        else "OpenBLAS's own choice for this CPU")


def run_torch(args, threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-threads", str(threads),
           "--models", *args.models, "--seconds", str(args.seconds),
           "--windows", str(args.windows), "--large-seconds", str(args.large_seconds),
           "--large-windows", str(args.large_windows)]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    if args.infer:
        cmd += ["--infer", "--infer-batches", *map(str, args.infer_batches)]
    if args.seq_len:
        cmd += ["--seq-len", str(args.seq_len)]
    if args.vocab:
        cmd += ["--vocab", str(args.vocab)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- attnkit side

def find_bench(path):
    candidates = [path] if path else [
        os.path.join(ROOT, "build/release/bench/bench_train_step"),
        os.path.join(ROOT, "build/perf/bench/bench_train_step"),
        os.path.join(ROOT, "build-bench/bench/bench_train_step"),
    ]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    die("attnkit benchmark binary not found (looked at: %s). Build it with\n"
        "  cmake -S %s -B %s/build-bench -DCMAKE_BUILD_TYPE=Release && "
        "cmake --build %s/build-bench --target bench_train_step -j2\n"
        "or pass --attnkit-bench PATH" % (", ".join(candidates), ROOT, ROOT, ROOT))


def run_attnkit(args, binary, threads):
    seconds, windows = timing(args, args.models[0])  # called with one model at a time
    cmd = [binary, "--models=" + ",".join(args.models), "--threads=%d" % threads,
           "--benchmark_format=json", "--benchmark_repetitions=%d" % windows,
           "--benchmark_min_time=%g" % (seconds / windows),
           "--benchmark_report_aggregates_only=true"]
    if args.batch:
        cmd.append("--batch=%d" % args.batch)
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die("%s failed with exit code %d" % (binary, p.returncode))
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        task = b["run_name"].split("/")[1]
        out[task] = b.get("steps/s", b.get("items_per_second"))
    return out


def run_attnkit_infer(args, binary, threads, task):
    seconds, windows = timing(args, task)
    cmd = [binary, "--models=" + task, "--threads=%d" % threads,
           "--batches=" + ",".join(map(str, args.infer_batches)),
           "--benchmark_format=json", "--benchmark_repetitions=%d" % windows,
           "--benchmark_min_time=%g" % (seconds / windows / max(1, len(args.infer_batches))),
           "--benchmark_report_aggregates_only=true"]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        die("%s failed with exit code %d" % (binary, p.returncode))
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = b["run_name"].split("/")
        out["%s/%s" % (parts[1], parts[2])] = b["seqs/s"]
    return out


def infer_main(args):
    binary = find_bench(args.attnkit_bench).replace("bench_train_step", "bench_infer")
    if not os.path.isfile(binary):
        die("bench_infer not found beside bench_train_step (%s)" % binary)
    rows, info = [], None
    for n in args.threads:
        for task in args.models:
            one = argparse.Namespace(**dict(vars(args), models=[task]))
            pts, aks = {}, {}
            for _ in range(max(1, args.rounds)):
                t = run_torch(one, n)
                info = t
                a = run_attnkit_infer(one, binary, n, task)
                for key, r in t["results"].items():
                    pts.setdefault(key, []).append(r["median"])
                    aks.setdefault(key, []).append(a.get(key))
            for key in pts:
                ratios = [ak / pt for ak, pt in zip(aks[key], pts[key]) if ak]
                rows.append((task, n, int(key.split(":")[1]), statistics.median(pts[key]),
                             statistics.median([x for x in aks[key] if x]), ratios))
    print("PyTorch %s (openblas %s) under torch.inference_mode(), attnkit %s" %
          (info["torch_version"], info["openblas"], binary))
    print(openblas_kernels_line(info))
    hdr = "%-14s %7s %6s %14s %14s %12s %12s %8s" % ("model", "threads", "batch", "PyTorch seq/s",
                                                    "attnkit seq/s", "PyTorch us", "attnkit us", "ratio")
    print(hdr)
    print("-" * len(hdr))
    for task, n, batch, pt, ak, ratios in rows:
        print("%-14s %7d %6d %14.0f %14.0f %12.1f %12.1f %7.2fx" % (
            task, n, batch, pt, ak, 1e6 * batch / pt, 1e6 * batch / ak, statistics.median(ratios)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=list(LESSONS))
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="timed seconds per (model, threads) measurement, split in windows")
    ap.add_argument("--windows", type=int, default=5, help="timed windows; the median is kept")
    ap.add_argument("--large-seconds", type=float, default=8.0,
                    help="timed seconds per measurement of reversal-large (~1 step/s in PyTorch)")
    ap.add_argument("--large-windows", type=int, default=3,
                    help="timed windows of reversal-large")
    ap.add_argument("--batch", type=int, default=0, help="override the lessons' batch sizes")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each (model, threads) this many times, PyTorch and attnkit "
                         "alternating; the table shows the medians and the range of the "
                         "per-round ratios (PyTorch's speed here drifts by 30%% and more "
                         "between minutes)")
    ap.add_argument("--attnkit-bench", default=None, help="path of bench_train_step")
    ap.add_argument("--infer", action="store_true",
                    help="inference instead of training: sequences/s of the forward under "
                         "torch.inference_mode() against bench_infer, per batch size")
    ap.add_argument("--infer-batches", type=int, nargs="+", default=[1, 500, 10000])
    ap.add_argument("--seq-len", type=int, default=0, help=argparse.SUPPRESS)  # bench/token_cost.py
    ap.add_argument("--vocab", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_threads:
        torch_worker(args)
        return

    try:
        import torch  # noqa: F401  (only checked here; measured in children)
    except ImportError as e:
        die("PyTorch is not importable by %s (%s); install python3-torch "
            "or run with /usr/bin/python3" % (sys.executable, e))
    if args.infer:
        infer_main(args)
        return
    binary = find_bench(args.attnkit_bench)

    rows = []
    info = None
    # One model at a time, PyTorch then attnkit back to back, so that both see about the
    # same load on a shared machine.
    for n in args.threads:
        for task in args.models:
            one = argparse.Namespace(**dict(vars(args), models=[task]))
            pts, aks = [], []
            for _ in range(max(1, args.rounds)):
                t = run_torch(one, n)
                info = t
                a = run_attnkit(one, binary, n)
                pts.append(t["results"][task]["median"])
                aks.append(a.get(task))
            ratios = [ak / pt for ak, pt in zip(aks, pts) if ak]
            rows.append((task, n, t["results"][task]["batch"], statistics.median(pts),
                         statistics.median(aks) if all(aks) else None, ratios))

    print("PyTorch %s (openblas %s), attnkit %s" % (info["torch_version"], info["openblas"],
                                                     binary))
    print(openblas_kernels_line(info))
    print("median of %d windows, %.3g s per measurement" % (args.windows, args.seconds) +
          (" (reversal-large: %d windows, %.3g s)" % (args.large_windows, args.large_seconds)
           if LARGE & set(args.models) else ""))
    if args.rounds > 1:
        print("%d rounds, PyTorch and attnkit alternating; steps/s are medians over rounds, "
              "ratio = median of the per-round ratios (range: lowest-highest)" % args.rounds)
    hdr = "%-14s %7s %5s %15s %15s %8s" % ("model", "threads", "batch", "PyTorch steps/s",
                                          "attnkit steps/s", "ratio")
    if args.rounds > 1:
        hdr += "  %13s" % "range"
    print(hdr)
    print("-" * len(hdr))
    for task, n, batch, pt, ak, ratios in rows:
        ratio = "%.2fx" % statistics.median(ratios) if ratios else "n/a"
        fmt = "%-14s %7d %5d %15.2f %15.2f %8s" if pt < 10 else "%-14s %7d %5d %15.1f %15.1f %8s"
        line = fmt % (task, n, batch, pt, ak or float("nan"), ratio)
        if args.rounds > 1 and ratios:
            line += "  %5.2fx-%5.2fx" % (min(ratios), max(ratios))
        print(line)


if __name__ == "__main__":
    main()
