#!/usr/bin/python3
"""CTest: bench/compare_pytorch.py --json, training and --infer, on tiny settings.

    compare_pytorch_json.py BENCH_TRAIN_STEP

Checks what programs rely on (bench/target_report.py reads it): one row per model with
positive steps/s (sequences/s with --infer), the ratio the median of the per-round ratios and
the ratio of the medians' order of magnitude, the file written whole. A --json path in a folder
that does not exist is refused before anything runs (exit 2, message naming it, no file).
Exits 77 (CTest: skipped) where /usr/bin/python3 cannot import torch (python3-torch is
optional: ATTNKIT_SETUP_TORCH=1 tools/setup.sh).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "bench", "compare_pytorch.py")
PYTHON = "/usr/bin/python3"


def fail(msg):
    print("compare_pytorch_json: FAILED: " + msg)
    sys.exit(1)


def run(args):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    return subprocess.run([PYTHON, SCRIPT] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env)


def check_rows(doc, mode, models, per_s):
    if doc.get("mode") != mode:
        fail("mode %r, expected %r" % (doc.get("mode"), mode))
    for key in ("torch_version", "openblas", "attnkit", "windows", "seconds", "large_windows",
                "large_seconds", "rounds"):
        if key not in doc:
            fail("no %r in the %s JSON" % (key, mode))
    rows = doc["rows"]
    if sorted({r["model"] for r in rows}) != sorted(models):
        fail("%s rows for %s, expected %s" % (mode, [r["model"] for r in rows], models))
    for r in rows:
        if r["threads"] != 1 or r["batch"] <= 0:
            fail("row %s: threads/batch" % r)
        pt, ak = r["pytorch_" + per_s], r["attnkit_" + per_s]
        if pt is None or ak is None or not (pt > 0 and ak > 0):
            fail("row %s: steps/s not positive" % r)
        if (r["ratio"] is None or len(r["ratios"]) != doc["rounds"]
                or abs(r["ratio"] - statistics.median(r["ratios"])) > 1e-12):
            fail("row %s: ratio is not the median of %d per-round ratios" % (r, doc["rounds"]))
        if not 0.1 < r["ratio"] / (ak / pt) < 10:
            fail("row %s: ratio far from attnkit/PyTorch" % r)


def main():
    bench = sys.argv[1]
    if not os.access(PYTHON, os.X_OK):
        print("compare_pytorch_json: no %s: skipped" % PYTHON)
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="compare_pytorch_json.") as tmp:
        bad = os.path.join(tmp, "no-such-folder", "out.json")
        p = run(["--json", bad, "--attnkit-bench", bench])
        if p.returncode != 2 or "no-such-folder" not in p.stderr or os.path.exists(bad):
            fail("bad --json path: exit %d, stderr %r" % (p.returncode, p.stderr))
        for flags, said in ((["--windows", "0"], "--windows must be at least 1"),
                            (["--threads", "0"], "--threads must be at least 1"),
                            (["--seconds", "0"], "--seconds must be > 0")):
            p = run(flags + ["--attnkit-bench", bench])
            if p.returncode != 2 or said not in p.stderr:
                fail("%s: exit %d, stderr %r" % (" ".join(flags), p.returncode, p.stderr))

        if not os.access(PYTHON, os.X_OK) or subprocess.run(
                [PYTHON, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            print("compare_pytorch_json: %s cannot import torch: skipped" % PYTHON)
            sys.exit(77)

        out = os.path.join(tmp, "train.json")
        p = run(["--attnkit-bench", bench, "--models", "duplicates", "reversal", "--threads", "1",
                 "--seconds", "0.2", "--windows", "1", "--rounds", "2", "--json", out])
        if p.returncode != 0:
            fail("training run exited %d: %s" % (p.returncode, p.stderr))
        with open(out) as f:
            doc = json.load(f)
        check_rows(doc, "train", ["duplicates", "reversal"], "steps_per_s")
        if any(r["precision"] != "f32" for r in doc["rows"]):
            fail("training rows not f32")
        if doc.get("pytorch_malloc") != "tuned" or "PyTorch's malloc: freed memory kept" not in p.stdout:
            fail("the default PyTorch malloc setting is not named 'tuned' in the JSON and the header: %r"
                 % doc.get("pytorch_malloc"))
        if [n for n in os.listdir(tmp) if ".tmp." in n]:
            fail("a temporary file was left beside the JSON")

        out = os.path.join(tmp, "infer.json")
        p = run(["--attnkit-bench", bench, "--infer", "--infer-batches", "1", "50", "--models",
                 "duplicates", "--threads", "1", "--seconds", "0.2", "--windows", "2", "--json", out])
        if p.returncode != 0:
            fail("--infer run exited %d: %s" % (p.returncode, p.stderr))
        with open(out) as f:
            doc = json.load(f)
        check_rows(doc, "infer", ["duplicates"], "seqs_per_s")
        if sorted(r["batch"] for r in doc["rows"]) != [1, 50]:
            fail("--infer rows for batches %s" % [r["batch"] for r in doc["rows"]])
    print("compare_pytorch_json: passed")


if __name__ == "__main__":
    main()
