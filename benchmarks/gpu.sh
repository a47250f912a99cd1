#!/usr/bin/env bash
# The device checks of the torch path, for a machine with a CUDA GPU (under 5 minutes once the
# package is installed; `pip install --no-build-isolation -e .` first on a fresh machine):
#   1. tests/test_serving.py::test_cuda_equals_cpu (skipped where there is no CUDA device);
#   2. the solve queued on the device with no host synchronisation: mentored.backends.torch.solve_point and π
#      under torch.cuda.set_sync_debug_mode("error"), and π equal to the C++ core's;
#   3. benchmarks/torch_lossless.py --device cuda: rejection_sample against a lossless sampler written
#      the way vLLM's works, same tensors, B·k = 64, V = 131072 (p50, synchronised), and
#      the torch solve on CUDA against the core on the host, 8 × 131072 float32.
# Never part of the test command: the suite does not depend on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device")'
timeout 120 python3 -P -m pytest tests/test_serving.py -q -k cuda -rs
timeout 120 python3 -P - <<'PY'
import numpy as np
import torch

import mentored
from mentored.backends import torch as torch_backend
from mentored.verify.speculative import solve_pi

g = torch.Generator().manual_seed(0)
R, V = 64, 131072
z = torch.randn(R, V, dtype=torch.float64, generator=g) * 2.5
p = torch.softmax(z, -1)
q = torch.softmax(z + torch.randn(R, V, dtype=torch.float64, generator=g), -1)
p[:, :100] = 0.0  # target zeros
p /= p.sum(-1, keepdim=True)
pc, qc = p.cuda(), q.cuda()
for div in ("kl", "tv", "js"):
    eps = torch.full((R,), 0.1, dtype=torch.float64, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation raises
    pt = torch_backend.solve_point(pc, qc, div, eps, "keep")
    pi = pt.pi(pc, qc)
    torch.cuda.set_sync_debug_mode(0)
    ref = solve_pi(p.numpy(), q.numpy(), mentored.divergence(div), np.full(R, 0.1), None, "keep")
    err = np.abs(pi.cpu().numpy() - ref).max()
    print(f"{div}: solve_point + π on CUDA with no host sync; max |π − π_core(keep)| = {err:.3g}")
PY
timeout 240 python3 -P benchmarks/torch_lossless.py --device cuda
