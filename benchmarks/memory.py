"""Peak resident memory of one verification call on big numpy batches, beyond its inputs and output.

    python -P benchmarks/memory.py                 # B·k = 4096, V = 152064 (Qwen's vocabulary), float32
    python -P benchmarks/memory.py --rows 256      # a quick look

Each case runs in a fresh process: the inputs are built, the kernel's high-water mark is reset
(/proc/self/clear_refs), the call runs once, and the peak (VmHWM) is read. "beyond" is the peak less
the resident size before the call and less the output, as a fraction of the inputs (draft_probs and
target_probs); the Python interpreter, numpy and mentored are in the resident size before the call.
Linux only. Reads the installed mentored (or PYTHONPATH's, to compare a checkout).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = r"""
import json, sys, time
import numpy as np
import mentored
from mentored.serving import rejection_sample, Verifier

how, T, V, k, div, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

def rows(seed):
    rng = np.random.default_rng(seed)
    out = np.empty((T, V), dtype=np.float32)
    for i in range(0, T, 64):  # in slices: no float64 copy of the whole batch
        x = rng.random((min(64, T - i), V), dtype=np.float32) ** 8
        out[i:i + 64] = x / x.sum(-1, dtype=np.float64, keepdims=True)
    return out

B = T // k
q, p = rows(1), rows(2)
rng = np.random.default_rng(3)
draft = rng.integers(0, V, T)
bonus = rng.integers(0, V, (B, 1))
u = rng.random((T, 2))
n = [k] * B
if how == "verifier":
    verifier = Verifier(V, divergence=div, budget=budget)
    call = lambda: verifier(draft, n, q, p, bonus, uniforms=u)
else:
    call = lambda: rejection_sample(draft, n, q, p, bonus, divergence=div, budget=budget, uniforms=u)
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current resident size
t0 = time.perf_counter()
out = call()
seconds = time.perf_counter() - t0
peak = status("VmHWM")
inputs = q.nbytes + p.nbytes
print(json.dumps(dict(how=how, inputs=inputs, output=np.asarray(out).nbytes, before=before, peak=peak, seconds=seconds,
                      file=mentored.__file__)))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096, help="B·k, the positions of the batch (default 4096)")
    ap.add_argument("--vocab", type=int, default=152064)
    ap.add_argument("--k", type=int, default=4, help="drafts per request")
    ap.add_argument("--divergence", default="kl")
    ap.add_argument("--budget", type=float, default=0.1)
    args = ap.parse_args(argv)
    print(f"B·k = {args.rows}, V = {args.vocab}, float32, {args.divergence} at budget {args.budget}; one call per fresh process")
    print("| call | inputs GB | output MB | resident before GB | peak GB | beyond inputs and output | seconds |")
    print("|---|---|---|---|---|---|---|")
    for how in ("rejection_sample", "verifier"):
        res = subprocess.run([sys.executable, "-P", "-c", CASE, how, str(args.rows), str(args.vocab), str(args.k), args.divergence,
                              str(args.budget)], capture_output=True, text=True)
        if res.returncode != 0:
            print(f"| {how} | failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode} |")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        beyond = (r["peak"] - r["before"] - r["output"]) / r["inputs"]
        print(f"| {how} | {r['inputs'] / 1e9:.2f} | {r['output'] / 1e6:.3f} | {r['before'] / 1e9:.2f} | {r['peak'] / 1e9:.2f} | "
              f"{100 * beyond:.1f} % | {r['seconds']:.2f} |")
    print(f"(mentored from {r['file']})" if "r" in locals() else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
