#!/usr/bin/python3
"""Data-parallel training across processes: attnkit over MPI against PyTorch DDP (gloo).

    /usr/bin/python3 bench/compare_ddp.py [--model reversal-large] [--steps 24] [--rounds 3]
        [--attnkit build/release/tools/attnkit] [--mpirun mpirun]

Per round, one after another on the same machine (global batch = the lesson's, 32):
  attnkit  1 process × 1 thread      attnkit train MODEL
  attnkit  1 process × 2 threads     attnkit train MODEL --threads 2
  attnkit  2 ranks × 1 thread        mpirun -np 2 --bind-to core attnkit train MODEL
  PyTorch  1 process × 1 thread      the same model (bench/torch_lessons.py), Adam
  PyTorch  2 processes × 1 thread    DistributedDataParallel, backend gloo, 16 rows per rank

attnkit's steps/s come from its metrics.json (train_seconds over the steps, the first step,
which first touches the arena, included); its time in the gradient sums and the bytes each
rank sent per step from metrics.json's "communication". PyTorch's: wall time of --steps steps
after 2 warm-up steps, on rank 0, between barriers. Reports medians over the rounds and the
ratios of the medians.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare_pytorch  # noqa: E402
from compare_pytorch import LESSONS  # noqa: E402  the models' sizes and training settings


def die(msg):
    print("compare_ddp: " + msg, file=sys.stderr)
    sys.exit(2)


def torch_env(threads):
    return compare_pytorch.torch_env(threads)  # pools pinned, malloc keeping freed memory


def torch_worker(args):
    """One PyTorch process: --world 1 trains alone, --world 2 is one rank of a DDP job."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch_lessons import Lesson, targets

    torch.set_num_threads(1)
    c = LESSONS[args.model]
    world, rank = args.world, args.rank
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, world_size=world, rank=rank)
    torch.manual_seed(0)
    model = Lesson(c)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=c["lr"])
    rng = np.random.default_rng(100 + rank)
    rows = c["batch"] // world
    data = []
    for _ in range(4):
        x = rng.integers(0, c["vocab"], size=(rows, c["T"]))
        data.append((torch.from_numpy(x.astype(np.int64)), torch.from_numpy(targets(args.model, x, c["vocab"]).astype(np.int64))))

    def step(i):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, c["classes"]), y.reshape(-1))
        loss.backward()
        opt.step()

    for i in range(2):
        step(i)
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    if world > 1:
        dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps(dict(steps_per_second=args.steps / dt, torch=torch.__version__)))
    if world > 1:
        dist.destroy_process_group()


def run_torch(args, world):
    port = 29500 + (os.getpid() % 1000)
    cmd = lambda r: [sys.executable, os.path.abspath(__file__), "--worker", "--world", str(world), "--rank", str(r),
                     "--port", str(port), "--model", args.model, "--steps", str(args.steps)]
    procs = [subprocess.Popen(cmd(r), env=torch_env(1), stdout=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        die("a PyTorch process failed")
    return json.loads(outs[0].strip().splitlines()[-1])["steps_per_second"]


def run_attnkit(args, ranks, threads):
    out = tempfile.mkdtemp(prefix="compare_ddp-")
    try:
        c = LESSONS[args.model]
        cmd = [args.attnkit, "train", args.model, "--epochs", "1", "--train-size", str(c["batch"] * args.steps),
               "--val-size", "32", "--threads", str(threads), "--no-pictures", "--quiet", "--out", out + "/run"]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        if ranks > 1:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            cmd = [args.mpirun, "-np", str(ranks), "--bind-to", "core"] + cmd
        subprocess.run(cmd, env=env, check=True)
        with open(out + "/run/metrics.json") as f:
            return json.load(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="reversal-large", choices=sorted(LESSONS))
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--attnkit", default=os.path.join(ROOT, "build/release/tools/attnkit"))
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--no-torch", action="store_true", help="attnkit only")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=29500, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return torch_worker(args)
    if not os.path.exists(args.attnkit):
        die("no attnkit program at %s (build it: cmake --preset release && cmake --build --preset release)" % args.attnkit)
    if shutil.which(args.mpirun) is None:
        die("no %s (Open MPI: tools/setup.sh installs openmpi-bin)" % args.mpirun)
    rows = {k: [] for k in ("ak 1x1", "ak 1x2", "ak 2x1", "pt 1x1", "pt 2x1")}
    comm, sent = [], []
    for r in range(args.rounds):
        rows["ak 1x1"].append(run_attnkit(args, 1, 1)["steps_per_second"])
        rows["ak 1x2"].append(run_attnkit(args, 1, 2)["steps_per_second"])
        m = run_attnkit(args, 2, 1)
        rows["ak 2x1"].append(m["steps_per_second"])
        comm.append(m["communication"]["seconds_summing"] / m["steps_this_run"])
        sent.append(m["communication"]["bytes_sent_per_step"])
        if not args.no_torch:
            rows["pt 1x1"].append(run_torch(args, 1))
            rows["pt 2x1"].append(run_torch(args, 2))
        print("round %d: %s" % (r + 1, "  ".join("%s %.3f" % (k, v[-1]) for k, v in rows.items() if v)), flush=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    names = {"ak 1x1": "attnkit 1 process x 1 thread", "ak 1x2": "attnkit 1 process x 2 threads",
             "ak 2x1": "attnkit 2 ranks x 1 thread (MPI)", "pt 1x1": "PyTorch 1 process x 1 thread",
             "pt 2x1": "PyTorch DDP gloo 2 x 1 thread"}
    print("\n%s, global batch %d, medians of %d rounds, steps/s" % (args.model, LESSONS[args.model]["batch"], args.rounds))
    for k, v in med.items():
        print("  %-36s %8.3f" % (names[k], v))
    print("  attnkit 2 ranks / 1 process x 1 thread: %.2fx" % (med["ak 2x1"] / med["ak 1x1"]))
    print("  attnkit 2 ranks / 1 process x 2 threads: %.2fx" % (med["ak 2x1"] / med["ak 1x2"]))
    if "pt 2x1" in med:
        print("  attnkit 2 ranks / PyTorch DDP 2 processes: %.2fx" % (med["ak 2x1"] / med["pt 2x1"]))
        print("  PyTorch DDP / PyTorch 1 process: %.2fx" % (med["pt 2x1"] / med["pt 1x1"]))
    print("  attnkit gradient sum: %.0f bytes sent per rank per step, %.2f ms per step in the sums (rank 0, "
          "waiting for the other rank included)" % (statistics.median(sent), 1e3 * statistics.median(comm)))


if __name__ == "__main__":
    main()
