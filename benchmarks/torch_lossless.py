"""The torch device path against a lossless rejection sampler written the way vLLM's works.

    python3 -P benchmarks/torch_lossless.py                 # CPU, about 1–2 minutes on a busy 2-core machine
    python3 -P benchmarks/torch_lossless.py --device cuda   # what benchmarks/gpu.sh runs
    python3 -P benchmarks/torch_lossless.py --quick         # fewer calls, smaller core comparison
    python3 -P benchmarks/torch_lossless.py --solve-only    # comparison 2 alone (CPU: also on one thread)

Two comparisons, each in one process on the same tensors, calls interleaved round-robin so that
every round sees one machine state (timings on a shared machine are noisy: read the ratios):

1. ``rejection_sample`` (mentored, torch input, validation off) against :func:`lossless_rejection_sample`
   at B·k = 64 (16 requests × 4 drafts), V = 131072, float32 probabilities, budget 0 and 0.1 (kl,
   tv); read the ratio mentored / lossless. On CPU tensors the rows are
   solved by the compiled core (``mentored.backends.CPU_SOLVER = "core"``, zero-copy); the line
   "torch sort" runs the device algorithm (``mentored.backends.torch``) on the CPU instead.
2. The torch solve against the C++ core (``mentored.solve`` on numpy arrays) on 8 × 131072 float32
   rows at budget 0.1 (kl): ``mentored.solve`` on the tensors (on CPU tensors the backend hands the
   rows to the core, on views of their memory), and the torch algorithm itself
   (``mentored.backends.torch._solve``, on a CPU what the device runs); read the ratio torch backend / core.
   On a CPU it is also run with torch and the core on one thread
   each, which a busy machine disturbs less (torch's parallel passes wait for their slowest thread).

:func:`lossless_rejection_sample` is this benchmark's own code, following the structure of vLLM v1's
``rejection_sample`` (vllm/v1/sample/rejection_sampler.py): one float32 uniform per drafted token,
one float32 exponential per request and vocabulary entry for the recovered tokens, which are
``argmax((p − q)₊ / e)`` at every position (the Gumbel-max trick), acceptance
``q_x > 0 and p_x / q_x ≥ u``, then the first rejection per request. vLLM fuses the per-token
parts in Triton kernels; here they are torch operations, as the mentored path is.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import mentored.backends

PLACEHOLDER = -1


def lossless_rejection_sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, generators=None):
    """Lossless speculative sampling in vLLM v1's layout (random requests), int32 [B, max_k + 1]."""
    device = target_probs.device
    B = len(num_draft_tokens)
    T, V = target_probs.shape
    K = max(num_draft_tokens) if B else 0
    n = torch.as_tensor(num_draft_tokens, device=device)
    starts = torch.cumsum(n, 0) - n
    req = torch.repeat_interleave(torch.arange(B, device=device), n)
    pos = torch.arange(T, device=device) - starts[req]
    u = torch.rand(T, dtype=torch.float32, device=device)
    e = torch.empty((B, V), dtype=torch.float32, device=device).exponential_()
    for b, gen in (generators or {}).items():
        if num_draft_tokens[b] > 0:
            e[b].exponential_(generator=gen)
    # recovered tokens at every position: argmax of (p − q)₊ / e, e one exponential row per request
    w = (target_probs - draft_probs).clamp_(min=0)
    w.div_(e[req])
    recovered = w.argmax(-1)
    x = draft_token_ids.to(torch.int64)
    px = target_probs.gather(1, x[:, None])[:, 0]
    qx = draft_probs.gather(1, x[:, None])[:, 0]
    accept = (qx > 0) & (px / qx >= u)
    acc = torch.ones((B, K), dtype=torch.bool, device=device)
    acc[req, pos] = accept
    rej = ~acc
    has_rej = rej.any(1)
    jstar = torch.where(has_rej, rej.to(torch.int8).argmax(1), n)
    out = torch.full((B, K + 1), PLACEHOLDER, dtype=torch.int32, device=device)
    drafts = torch.full((B, K), PLACEHOLDER, dtype=torch.int64, device=device)
    drafts[req, pos] = x
    cols = torch.arange(K, device=device)
    out[:, :K] = torch.where(cols < jstar[:, None], drafts, PLACEHOLDER).to(torch.int32)
    rec_pad = torch.zeros((B, K + 1), dtype=torch.int64, device=device)
    rec_pad[req, pos] = recovered
    tok = torch.where(has_rej, rec_pad.gather(1, jstar[:, None])[:, 0], bonus_token_ids.reshape(-1).to(torch.int64))
    out.scatter_(1, jstar[:, None], tok[:, None].to(torch.int32))
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_round_robin(fns, calls, device, warm=1):
    """{name: seconds per call (calls,)}, every round calling each function once."""
    for _ in range(warm):
        for f in fns.values():
            f()
    _sync(device)
    out = {k: [] for k in fns}
    for _ in range(calls):
        for k, f in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            f()
            _sync(device)
            out[k].append(time.perf_counter() - t0)
    return {k: np.array(v) for k, v in out.items()}


def batch(B, k, V, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B * k, V, dtype=torch.float64, generator=g) * 2.5
    p = torch.softmax(z, -1).float()
    q = torch.softmax(z + torch.randn(B * k, V, dtype=torch.float64, generator=g), -1).float()
    draft = torch.multinomial(q, 1, generator=g)[:, 0]
    bonus = torch.randint(0, V, (B, 1), generator=g)
    return [x.to(device) for x in (draft, q, p, bonus)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--solve-only", action="store_true", help="comparison 2 alone")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    from mentored.backends import torch as torch_backend
    from mentored.verify.serving import rejection_sample

    B, k, V = 16, 4, 131072
    calls = args.calls or (3 if args.quick else 5) * (10 if device.type == "cuda" else 1)
    draft, q, p, bonus = batch(B, k, V, device)
    n = [k] * B
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}; B·k = {B * k}, V = {V}, float32; {calls} calls")
    from mentored.verify import serving

    def torch_algorithm(**kw):
        # the device algorithm itself, also where the rows are CPU tensors (mentored.backends.CPU_SOLVER)
        old, mentored.backends.CPU_SOLVER = mentored.backends.CPU_SOLVER, "torch"
        try:
            return rejection_sample(draft, n, q, p, bonus, validate=False, **kw)
        finally:
            mentored.backends.CPU_SOLVER = old

    if args.solve_only:
        return _solve_vs_core(p, q, device, calls, V)
    fns = {
        "lossless (vLLM-style)": lambda: lossless_rejection_sample(draft, n, q, p, bonus),
        "mentored budget=0": lambda: rejection_sample(draft, n, q, p, bonus, budget=0.0, validate=False),
        "mentored kl 0.1": lambda: rejection_sample(draft, n, q, p, bonus, divergence="kl", budget=0.1, validate=False),
        "mentored tv 0.1": lambda: rejection_sample(draft, n, q, p, bonus, divergence="tv", budget=0.1, validate=False),
    }
    if device.type == "cpu":
        fns["mentored kl 0.1, torch sort"] = lambda: torch_algorithm(divergence="kl", budget=0.1)
    t = time_round_robin(fns, calls, device)
    base = np.median(t["lossless (vLLM-style)"])
    for name, v in t.items():
        print(f"  {name:24s} p50 {np.median(v) * 1e3:9.2f} ms   min {v.min() * 1e3:9.2f} ms   ratio to lossless (p50) {np.median(v) / base:5.2f}x")

    _solve_vs_core(p, q, device, calls, V)


def _solve_vs_core(p, q, device, calls, V):
    """2. the torch solves against the C++ core, same rows (float32), kl 0.1; the ratio of medians."""
    import mentored
    from mentored.backends import torch as torch_backend

    R = 8
    p8 = p[:R].contiguous()
    q8 = q[:R].contiguous()
    p8n, q8n = p8.cpu().numpy(), q8.cpu().numpy()
    settings = [(None, torch.get_num_threads())] + ([(1, 1)] if device.type == "cpu" else [])
    for core_threads, torch_threads in settings:
        old = torch.get_num_threads()
        torch.set_num_threads(torch_threads)
        try:
            fns = {
                "core mentored.solve (CPU)": lambda: mentored.solve(p8n, q8n, divergence="kl", budget=0.1, threads=core_threads),
                f"mentored.solve on tensors ({device.type})": lambda: mentored.solve(
                    p8, q8, divergence="kl", budget=0.1, threads=core_threads
                ).pi,
                f"the torch algorithm ({device.type})": lambda: torch_backend._solve(p8, q8, divergence="kl", budget=0.1),
            }
            t = time_round_robin(fns, max(calls, 7), device)
        finally:
            torch.set_num_threads(old)
        core = np.median(t["core mentored.solve (CPU)"])
        print(f"solve on {R} × {V} float32, kl 0.1; core threads {core_threads or 'default'}, torch threads {torch_threads}")
        for name, v in t.items():
            print(f"  {name:32s} p50 {np.median(v) * 1e3:9.2f} ms   ratio to core {np.median(v) / core:7.2f}x")
    a = torch_backend._solve(p8.double(), q8.double(), divergence="kl", budget=0.1).cpu().numpy()
    b = mentored.solve(p8n.astype(np.float64), q8n.astype(np.float64), divergence="kl", budget=0.1).pi
    print(f"  float64 rows: max |π_torch − π_core| = {np.abs(a - b).max():.3g}")


if __name__ == "__main__":
    main()
