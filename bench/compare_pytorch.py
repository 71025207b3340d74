#!/usr/bin/python3
"""Training steps/s of the lesson models: PyTorch against attnkit, side by side.

    /usr/bin/python3 bench/compare_pytorch.py [--threads 1 2] [--models neighbor-sum ...]
        [--seconds 3] [--windows 5] [--large-seconds 8] [--large-windows 3] [--batch N]
        [--rounds R] [--precision f32|bf16|both] [--attnkit-bench PATH] [--json PATH]
        [--pytorch-malloc tuned|default]

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

--precision f32 (the default) trains in float32. bf16 is mixed precision: PyTorch runs the
same model and step with the forward and the loss under torch.autocast("cpu",
dtype=torch.bfloat16) (products in bfloat16 on oneDNN, which uses AMX where the CPU has it;
backward and Adam outside autocast, parameters float32), attnkit runs bench_train_step
--precision=bf16 (f32 passes no flag, so older binaries still work; one without the flag
fails the bf16 rows, which then show n/a, with its stderr printed). --precision both
measures f32 and bf16 in every round (PyTorch f32 and bf16 in one child, then attnkit f32
and bf16, the precisions' order swapped every other round) and adds a table of the bf16/f32
speed-ups of each, every ratio taken within one round. The header then names PyTorch's
oneDNN and ATen CPU capability.

--pytorch-malloc tuned (the default) runs PyTorch's children with glibc malloc told to keep
freed memory (MALLOC_MMAP_THRESHOLD_ = MALLOC_TRIM_THRESHOLD_ = 4 GiB, unless the environment
sets them): with glibc's defaults each large activation is an mmap and munmap, so PyTorch
spends much of a step in page faults (neighbor-sum inference at batch 500 on the Zen 5: 14 000
sequences/s against 140 000 tuned; PyTorch's own tuning guide suggests a caching allocator such
as jemalloc for the same reason). attnkit allocates nothing per step, so it is unaffected.
--pytorch-malloc default measures PyTorch as glibc leaves it. The header names the setting.

--json PATH also writes the table for programs (bench/target_report.py reads it): an object
with "mode" ("train" or "infer"), "torch_version", "openblas", "attnkit" (the benchmark
binary's path), "windows", "seconds", "large_windows", "large_seconds", "rounds",
"pytorch_malloc" and "rows", one object per printed row: "model", "threads",
"batch", ("precision" when training), PyTorch's and attnkit's steps/s (training:
"pytorch_steps_per_s", "attnkit_steps_per_s") or sequences/s (--infer: "pytorch_seqs_per_s",
"attnkit_seqs_per_s"), "ratio" (the median of "ratios", the per-round ratios; null when
attnkit could not run) and with --precision both "speedups" (the bf16/f32 table). The file is
written whole or not at all (a temporary file renamed over PATH); a PATH whose folder does
not exist or cannot be written is refused before anything is measured.
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
sys.path.insert(0, HERE)
import gbench_json  # noqa: E402  (bench/gbench_json.py, beside this script)

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
PRECISIONS = {"f32": ["f32"], "bf16": ["bf16"], "both": ["f32", "bf16"]}
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


def check_json_path(path):
    """Refuses, before any measurement, a --json PATH that could not be written."""
    gbench_json.check_out_path("compare_pytorch", "--json", path)


def write_json(path, doc):
    """doc to path whole or not at all (bench/gbench_json.py's write_whole)."""
    try:
        gbench_json.write_whole(path, json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        die("--json %s: %s" % (path, e))


def json_head(mode, args, info, binary):
    return dict(mode=mode, torch_version=info["torch_version"], openblas=info["openblas"],
                attnkit=binary, windows=args.windows, seconds=args.seconds,
                large_windows=args.large_windows, large_seconds=args.large_seconds,
                rounds=max(1, args.rounds), pytorch_malloc=args.pytorch_malloc)


# ----------------------------------------------------------------------------- PyTorch side

def torch_worker(args):
    """Runs in a child with the thread environment set; prints one JSON line of results."""
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        die("PyTorch is not importable by %s (%s); install python3-torch" % (sys.executable, e))
    import copy
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

    from torch_lessons import Lesson, targets, train_step

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
    # Each precision in the order asked (the parent alternates it between rounds) trains its
    # own copy of the same initial model, on the same batches.
    by_precision = {p: {} for p in args.worker_precisions}
    for task in args.models:
        c = sized(LESSONS[task], task, args.seq_len, args.vocab)
        batch = args.batch or c["batch"]
        model0 = Lesson(c)
        data = []
        for _ in range(4):
            x = rng.integers(0, c["vocab"], size=(batch, c["T"]))
            data.append((torch.from_numpy(x.astype(np.int64)),
                         torch.from_numpy(targets(task, x, c["vocab"]).astype(np.int64))))
        for precision in args.worker_precisions:
            model = copy.deepcopy(model0)
            opt = torch.optim.Adam(model.parameters(), lr=c["lr"])
            step = train_step(model, opt, c["classes"], data, precision)

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
            by_precision[precision][task] = dict(median=statistics.median(rates), windows=rates,
                                                 loss=float(step().item()), batch=batch)
    # "results" is the float32 measurement, as bench/token_cost.py reads it.
    print(json.dumps(dict(threads=n, torch_threads=torch.get_num_threads(),
                          openblas=blas, openblas_threads=blas_threads, openblas_core=blas_core,
                          torch_version=torch.__version__, mkldnn=torch.backends.mkldnn.is_available(),
                          cpu_capability=cpu_capability(torch), onednn=onednn_version(torch),
                          results=by_precision.get("f32", {}), by_precision=by_precision)))


def cpu_capability(torch):
    """ATen's CPU kernel level (DEFAULT, AVX2, AVX512, ...): torch.backends.cpu's
    get_cpu_capability() from PyTorch 2.0, else the "CPU capability usage" line of
    torch.__config__.show() (PyTorch 1.x)."""
    try:
        import torch.backends.cpu as cpu
        return cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        pass
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return None


def onednn_version(torch):
    """oneDNN's version as torch.__config__.show() names it ("Intel(R) MKL-DNN v2.6.3")."""
    for line in torch.__config__.show().splitlines():
        if "MKL-DNN" in line or "oneDNN" in line:
            words = [w for w in line.split() if w.startswith("v") and w[1:2].isdigit()]
            if words:
                return words[0]
    return None


def openblas_kernels_line(info):
    """Which OpenBLAS kernels PyTorch's products ran on: OPENBLAS_CORETYPE in the environment
    overrides OpenBLAS's own pick for the CPU (a Haswell override leaves an AVX-512 CPU on
    AVX2 kernels), so the figures name it."""
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return "PyTorch's OpenBLAS kernels: %s (%s)" % (
        info.get("openblas_core") or "unknown",
        "forced by OPENBLAS_CORETYPE=%s in the environment" % forced if forced
        else "OpenBLAS's own choice for this CPU")


def onednn_line(info):
    """Whether PyTorch's bfloat16 products can run on oneDNN, and ATen's kernel level."""
    return "PyTorch's oneDNN (mkldnn)%s: %s; ATen CPU capability: %s" % (
        " " + info["onednn"] if info.get("onednn") else "",
        "available" if info.get("mkldnn") else "NOT available (torch.backends.mkldnn.is_available() "
        "is False)", info.get("cpu_capability") or "unknown")


# glibc malloc settings that keep freed memory for reuse (see --pytorch-malloc).
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def torch_env(threads, malloc="tuned"):
    """The environment of a PyTorch child: thread pools pinned to `threads`, and with malloc
    "tuned" TUNED_MALLOC where the environment does not set those variables itself."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    if malloc == "tuned":
        for name, value in TUNED_MALLOC.items():
            env.setdefault(name, value)
    return env


def malloc_line(malloc):
    """How PyTorch's children ran glibc malloc, for the tables' headers."""
    set_here = ", ".join("%s=%s" % (n, os.environ[n]) for n in TUNED_MALLOC if n in os.environ)
    if malloc == "tuned":
        return "PyTorch's malloc: freed memory kept (%s)" % ", ".join(
            "%s=%s" % (n, os.environ.get(n, v)) for n, v in TUNED_MALLOC.items())
    return "PyTorch's malloc: glibc's defaults" + (" (environment: %s)" % set_here if set_here else "")


def run_torch(args, threads, precisions=("f32",)):
    """One child measuring args.models at `threads`, each in each of precisions, in that
    order."""
    env = torch_env(threads, args.pytorch_malloc)
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
    if list(precisions) != ["f32"]:
        cmd += ["--worker-precisions", *precisions]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- attnkit side

def is_median(b, windows):
    """Whether Google Benchmark JSON entry b is the median of `windows` repetitions: with one
    repetition there are no aggregates, the one run is its own median."""
    if windows > 1:
        return b.get("aggregate_name") == "median"
    return b.get("run_type", "iteration") == "iteration"


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


ATTNKIT_FAILED = {}  # precision -> why bench_train_step could not run it


def run_attnkit(args, binary, threads, precision="f32"):
    """{task: median steps/s} of bench_train_step in `precision`: f32 passes no precision flag
    (binaries older than --precision keep working), bf16 passes --precision=bf16. A failed f32
    run stops the script; a failed bf16 run is reported once (with the bench's stderr) and
    gives {} from then on, so that the PyTorch figures still print."""
    if precision in ATTNKIT_FAILED:
        return {}
    seconds, windows = timing(args, args.models[0])  # called with one model at a time
    cmd = [binary, "--models=" + ",".join(args.models), "--threads=%d" % threads,
           "--benchmark_format=json", "--benchmark_repetitions=%d" % windows,
           "--benchmark_min_time=%g" % (seconds / windows),
           "--benchmark_report_aggregates_only=true"]
    if args.batch:
        cmd.append("--batch=%d" % args.batch)
    if precision != "f32":
        cmd.append("--precision=" + precision)
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        msg = "%s failed with exit code %d\n  command: %s\n  its stderr:\n%s" % (
            binary, p.returncode, " ".join(cmd),
            "\n".join("    " + line for line in p.stderr.rstrip().splitlines()) or "    (empty)")
        if precision != "f32" and "--precision" in p.stderr:
            msg += ("\n  (this bench_train_step seems to predate --precision=%s: rebuild it, "
                    "or run with --precision f32)" % precision)
        if precision == "f32":
            die(msg)
        print("compare_pytorch: " + msg + "\ncompare_pytorch: attnkit %s left out (n/a below)"
              % precision, file=sys.stderr)
        ATTNKIT_FAILED[precision] = msg
        return {}
    sys.stderr.write(p.stderr)  # as when it went straight to the terminal
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if not is_median(b, windows):
            continue
        parts = b["run_name"].split("/")
        # BM_TrainStep/<task>/threads:N/batch:B[/...]; the task is the part that is one asked.
        task = next((x for x in parts[1:] if x in args.models), parts[1])
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
        if not is_median(b, windows):
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
                present = [x for x in aks[key] if x]
                rows.append((task, n, int(key.split(":")[1]), statistics.median(pts[key]),
                             statistics.median(present) if present else None, ratios))
    print("PyTorch %s (openblas %s) under torch.inference_mode(), attnkit %s" %
          (info["torch_version"], info["openblas"], binary))
    print(openblas_kernels_line(info))
    print(malloc_line(args.pytorch_malloc))
    hdr = "%-14s %7s %6s %14s %14s %12s %12s %8s" % ("model", "threads", "batch", "PyTorch seq/s",
                                                    "attnkit seq/s", "PyTorch us", "attnkit us", "ratio")
    print(hdr)
    print("-" * len(hdr))
    for task, n, batch, pt, ak, ratios in rows:
        if ak is None:  # bench_infer gave no figure for this batch
            print("%-14s %7d %6d %14.0f %14s %12.1f %12s %8s" % (task, n, batch, pt, "n/a", 1e6 * batch / pt,
                                                                 "n/a", "n/a"))
            continue
        print("%-14s %7d %6d %14.0f %14.0f %12.1f %12.1f %7.2fx" % (
            task, n, batch, pt, ak, 1e6 * batch / pt, 1e6 * batch / ak, statistics.median(ratios)))
    if args.json:
        doc = json_head("infer", args, info, binary)
        doc["rows"] = [dict(model=task, threads=n, batch=batch, pytorch_seqs_per_s=pt,
                            attnkit_seqs_per_s=ak, ratio=statistics.median(ratios) if ratios else None,
                            ratios=ratios) for task, n, batch, pt, ak, ratios in rows]
        write_json(args.json, doc)


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
    ap.add_argument("--precision", choices=list(PRECISIONS), default="f32",
                    help="training in float32 (default), bfloat16 mixed precision (PyTorch: "
                         "torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss; "
                         "attnkit: bench_train_step --precision=bf16), or both, alternating "
                         "within each round, with the bf16/f32 speed-ups")
    ap.add_argument("--infer", action="store_true",
                    help="inference instead of training: sequences/s of the forward under "
                         "torch.inference_mode() against bench_infer, per batch size")
    ap.add_argument("--infer-batches", type=int, nargs="+", default=[1, 500, 10000])
    ap.add_argument("--pytorch-malloc", choices=["tuned", "default"], default="tuned",
                    help="PyTorch's children with glibc malloc keeping freed memory (tuned, the "
                         "default: no mmap/munmap page faults per step) or as glibc leaves it")
    ap.add_argument("--json", metavar="PATH", default=None,
                    help="also write the table as JSON to PATH (whole or not at all)")
    ap.add_argument("--seq-len", type=int, default=0, help=argparse.SUPPRESS)  # bench/token_cost.py
    ap.add_argument("--vocab", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-precisions", nargs="+", default=["f32"], choices=["f32", "bf16"],
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_threads:
        torch_worker(args)
        return
    for name in ("seconds", "large_seconds"):
        if not getattr(args, name) > 0:
            ap.error("--%s must be > 0, got %s" % (name.replace("_", "-"), getattr(args, name)))
    for name in ("windows", "large_windows", "rounds"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1, got %d" % (name.replace("_", "-"), getattr(args, name)))
    for flag, values in (("--threads", args.threads), ("--infer-batches", args.infer_batches)):
        if any(v < 1 for v in values):
            ap.error("%s must be at least 1, got %s" % (flag, " ".join(map(str, values))))
    if args.batch < 0:
        ap.error("--batch must be at least 1 (0: the lessons' batch sizes), got %d" % args.batch)

    if args.json:
        check_json_path(args.json)
    try:
        import torch  # noqa: F401  (only checked here; measured in children)
    except ImportError as e:
        die("PyTorch is not importable by %s (%s); install python3-torch "
            "or run with /usr/bin/python3" % (sys.executable, e))
    if args.infer:
        if args.precision != "f32":
            die("--precision %s is for training; --infer measures float32 only" % args.precision)
        infer_main(args)
        return
    binary = find_bench(args.attnkit_bench)

    precisions = PRECISIONS[args.precision]
    rows = []
    speedups = []  # with --precision both: bf16/f32 of PyTorch and of attnkit, per round
    info = None
    # One model at a time, PyTorch then attnkit back to back, so that both see about the
    # same load on a shared machine. With both precisions, each round measures PyTorch f32 and
    # bf16 (one child), then attnkit f32 and bf16, the precisions' order swapped every other
    # round so that neither always runs first.
    for n in args.threads:
        for task in args.models:
            one = argparse.Namespace(**dict(vars(args), models=[task]))
            pts = {p: [] for p in precisions}
            aks = {p: [] for p in precisions}
            for r in range(max(1, args.rounds)):
                order = precisions if r % 2 == 0 else precisions[::-1]
                t = run_torch(one, n, order)
                info = t
                for p in order:
                    a = run_attnkit(one, binary, n, p)
                    pts[p].append(t["by_precision"][p][task]["median"])
                    aks[p].append(a.get(task))
            batch = t["by_precision"][precisions[0]][task]["batch"]
            for p in precisions:
                ratios = [ak / pt for ak, pt in zip(aks[p], pts[p]) if ak]
                rows.append((task, n, batch, p, statistics.median(pts[p]),
                             statistics.median(aks[p]) if all(aks[p]) else None, ratios))
            if len(precisions) == 2:
                speedups.append((task, n, batch,
                                 [b / f for f, b in zip(pts["f32"], pts["bf16"])],
                                 [b / f for f, b in zip(aks["f32"], aks["bf16"]) if f and b]))

    mixed = precisions != ["f32"]
    print("PyTorch %s (openblas %s), attnkit %s" % (info["torch_version"], info["openblas"],
                                                     binary))
    print(openblas_kernels_line(info))
    print(malloc_line(args.pytorch_malloc))
    if mixed:
        print(onednn_line(info))
        print("bf16: PyTorch under torch.autocast('cpu', dtype=torch.bfloat16) for forward and "
              "loss (backward, Adam and parameters float32); attnkit bench_train_step "
              "--precision=bf16")
    print("median of %d windows, %.3g s per measurement" % (args.windows, args.seconds) +
          (" (reversal-large: %d windows, %.3g s)" % (args.large_windows, args.large_seconds)
           if LARGE & set(args.models) else ""))
    if args.rounds > 1:
        print("%d rounds, PyTorch and attnkit alternating%s; steps/s are medians over rounds, "
              "ratio = median of the per-round ratios (range: lowest-highest)" % (
                  args.rounds, " (f32 and bf16 in turn, the order swapped every round)"
                  if len(precisions) == 2 else ""))
    hdr = "%-14s %7s %5s %15s %15s %8s" % ("model", "threads", "batch", "PyTorch steps/s",
                                          "attnkit steps/s", "ratio")
    if mixed:
        hdr = "%-14s %7s %5s %9s %15s %15s %8s" % ("model", "threads", "batch", "precision",
                                                  "PyTorch steps/s", "attnkit steps/s", "ratio")
    if args.rounds > 1:
        hdr += "  %13s" % "range"
    print(hdr)
    print("-" * len(hdr))
    for task, n, batch, p, pt, ak, ratios in rows:
        ratio = "%.2fx" % statistics.median(ratios) if ratios else "n/a"
        num = "%15.2f %15.2f %8s" if pt < 10 else "%15.1f %15.1f %8s"
        if mixed:
            line = ("%-14s %7d %5d %9s " + num) % (task, n, batch, p, pt, ak or float("nan"), ratio)
        else:
            line = ("%-14s %7d %5d " + num) % (task, n, batch, pt, ak or float("nan"), ratio)
        if args.rounds > 1 and ratios:
            line += "  %5.2fx-%5.2fx" % (min(ratios), max(ratios))
        print(line)
    if speedups:
        print()
        print("bf16 / f32 steps/s, each ratio within one round%s" %
              (" (median, range)" if args.rounds > 1 else ""))
        hdr = "%-14s %7s %5s %22s %22s" % ("model", "threads", "batch", "PyTorch bf16/f32",
                                           "attnkit bf16/f32")
        print(hdr)
        print("-" * len(hdr))

        def cell(r):
            if not r:
                return "n/a"
            if args.rounds > 1:
                return "%.2fx (%.2fx-%.2fx)" % (statistics.median(r), min(r), max(r))
            return "%.2fx" % r[0]

        for task, n, batch, pt, ak in speedups:
            print("%-14s %7d %5d %22s %22s" % (task, n, batch, cell(pt), cell(ak)))
    if args.json:
        doc = json_head("train", args, info, binary)
        doc["rows"] = [dict(model=task, threads=n, batch=batch, precision=p, pytorch_steps_per_s=pt,
                            attnkit_steps_per_s=ak, ratio=statistics.median(ratios) if ratios else None,
                            ratios=ratios) for task, n, batch, p, pt, ak, ratios in rows]
        if speedups:
            doc["speedups"] = [dict(model=task, threads=n, batch=batch, pytorch_bf16_over_f32=pt,
                                    attnkit_bf16_over_f32=ak) for task, n, batch, pt, ak in speedups]
        write_json(args.json, doc)


if __name__ == "__main__":
    main()
