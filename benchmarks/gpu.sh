#!/usr/bin/env bash
# The device checks of mentored.serving, for a machine with a CUDA GPU (under 5 minutes):
#   1. tests/test_serving.py::test_cuda_equals_cpu (skipped where there is no CUDA device);
#   2. the latency of rejection_sample on CUDA against CPU torch, on the same rows, at B·k = 64,
#      V = 131072 (p50 over 20 calls, after 3 warm-up calls, synchronised).
# Never part of the test command: the suite does not depend on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -P -m pytest tests/test_serving.py -q -k cuda -rs
python3 -P - <<'PY'
import time

import numpy as np
import torch

from mentored.serving import rejection_sample

if not torch.cuda.is_available():
    raise SystemExit("no CUDA device")
rng = np.random.default_rng(0)
B, k, V = 16, 4, 131072
T = B * k
z = torch.randn(T, V, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2.5
p = torch.softmax(z, -1).float()
q = torch.softmax(z + torch.randn(T, V, dtype=torch.float64), -1).float()
draft = torch.multinomial(q, 1)[:, 0]
bonus = torch.randint(0, V, (B, 1))
n = [k] * B
for dev in ("cpu", "cuda"):
    args = [x.to(dev) for x in (draft,)] + [n] + [x.to(dev) for x in (q, p, bonus)]
    for budget in (0.0, 0.1):
        for _ in range(3):
            rejection_sample(*args, budget=budget, validate=False)
        ts = []
        for _ in range(20 if dev == "cuda" else 3):
            if dev == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            rejection_sample(*args, budget=budget, validate=False)
            if dev == "cuda":
                torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        print(f"{dev:5s} budget={budget:<4} p50 {np.median(ts) * 1e3:9.2f} ms")
PY
