#!/usr/bin/python3
"""Training cost per token as T grows: `attnkit train TASK --seq-len T` against PyTorch.

    /usr/bin/python3 bench/token_cost.py [--task reversal] [--seq-lens 16 32 ... 1024]
        [--batch 32] [--threads 1] [--rounds 3] [--attnkit PATH]

attnkit: the command-line trainer itself, `attnkit train TASK --seq-len T --epochs 1
--train-size batch*steps --no-pictures`, timed by its own metrics.json (train_seconds: the
training steps only, not data generation, evaluation or saving); steps = max(3, 4096 / T),
so every run has at least 3 steps and short sequences several hundred.
PyTorch: bench/compare_pytorch.py's model of the same task at the same T and V (its worker,
one thread pool pinned to --threads, glibc malloc as its --pytorch-malloc says), median of
timed windows.
Cost per token = seconds per step / (batch * T). Rounds alternate attnkit and PyTorch; the
table shows medians over rounds and the median of the per-round ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare_pytorch import malloc_line, torch_env  # noqa: E402  PyTorch's child environment


def attnkit_cost(binary, task, T, batch, threads):
    steps = max(3, 4096 // T)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        cmd = [binary, "train", task, "--seq-len", str(T), "--epochs", "1", "--batch-size", str(batch),
               "--train-size", str(batch * steps), "--val-size", "8", "--threads", str(threads),
               "--no-pictures", "--quiet", "--out", out]
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        subprocess.run(cmd, check=True, env=env)
        with open(os.path.join(out, "metrics.json")) as f:
            m = json.load(f)
    return m["train_seconds"] / m["steps_this_run"] / (batch * T)


def torch_cost(task, T, batch, threads, malloc):
    env = torch_env(threads, malloc)
    seconds = 2.0 if T <= 256 else 6.0
    cmd = [sys.executable, os.path.join(HERE, "compare_pytorch.py"), "--worker-threads", str(threads),
           "--models", task, "--seq-len", str(T), "--batch", str(batch), "--seconds", str(seconds),
           "--windows", "3", "--large-seconds", str(seconds), "--large-windows", "3"]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return 1.0 / r["results"][task]["median"] / (batch * T), r["torch_version"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="reversal")
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--attnkit", default=os.path.join(ROOT, "build/release/tools/attnkit"))
    ap.add_argument("--pytorch-malloc", choices=["tuned", "default"], default="tuned",
                    help="as compare_pytorch.py's: glibc malloc keeping freed memory (default) or not")
    args = ap.parse_args()
    if not os.access(args.attnkit, os.X_OK):
        sys.exit("token_cost: %s is not built (tools/test.sh release builds it)" % args.attnkit)
    print("%s, batch %d, %d thread(s), %d rounds; µs per token of a training step" %
          (args.task, args.batch, args.threads, args.rounds))
    print(malloc_line(args.pytorch_malloc))
    print("%6s %12s %12s %8s" % ("T", "attnkit µs", "PyTorch µs", "ratio"))
    version = None
    for T in args.seq_lens:
        ak, pt, ratios = [], [], []
        for _ in range(args.rounds):
            a = attnkit_cost(args.attnkit, args.task, T, args.batch, args.threads)
            p, version = torch_cost(args.task, T, args.batch, args.threads, args.pytorch_malloc)
            ak.append(a), pt.append(p), ratios.append(p / a)
        print("%6d %12.2f %12.2f %7.2fx" % (T, statistics.median(ak) * 1e6, statistics.median(pt) * 1e6,
                                          statistics.median(ratios)), flush=True)
    print("PyTorch", version)


if __name__ == "__main__":
    main()
