"""Benchmark the pod transport against the real upstream python runtime (a local process).

Prints one table of medians and ratios:
- `execute("true")` through PodSandbox vs a raw httpx POST of `sh -c true` (the
  full cost of the in-pod wrapper: capture file, output encoding), and vs a raw
  POST of the same wrapped command (the client library's own overhead). At the
  default timeout (300 s, the runtime's own limit) no watchdog runs; a timeout
  below the limit adds the in-pod `timeout` watchdog (its own row);
- 10 MiB upload and download through PodSandbox vs the runtime's bare endpoints;
- grep for a literal over 1,000 files: PodSandbox (one python3 run) vs deepagents'
  stock BaseSandbox.grep (GNU grep through the same execute).

Run: `.venv/bin/python benchmarks/bench_transport.py [--iterations 25] [--execute-iterations 300]`
(the execute rows are the ones most sensitive to machine load). Measurements
are interleaved (benchmarks.common.interleaved_ms) so machine load drifts hit every variant alike.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

import httpx
from deepagents.backends.sandbox import BaseSandbox

from benchmarks.common import interleaved_ms
from langchain_k8s_client import commands
from langchain_k8s_client.pod_sandbox import DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, PodSandbox
from testkit.runtime_harness import runtime_process

TEN_MIB = 10 * 1024 * 1024
WATCHDOG_TIMEOUT = 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument(
        "--execute-iterations", type=int, default=None, help="rounds of the execute rows (default: --iterations)"
    )
    args = parser.parse_args()
    n = max(20, args.iterations)
    n_exec = max(20, args.execute_iterations or n)

    with tempfile.TemporaryDirectory(prefix="lkc-bench-") as tmp, runtime_process(Path(tmp), "bench-pod") as server:
        work = Path(tmp) / "work"
        work.mkdir()
        raw = httpx.Client(trust_env=False, timeout=120)
        sandbox = PodSandbox(server.endpoint(), sandbox_id="bench")
        info = sandbox.check_identity()

        def post(command: str) -> None:
            response = raw.post(f"{server.url}/execute", json={"command": command})
            assert response.json()["exit_code"] == 0

        wrapped_true = commands.build_user_command(
            "true",
            timeout=DEFAULT_COMMAND_TIMEOUT,
            max_output=DEFAULT_MAX_OUTPUT,
            staging_dir=info.staging_dir,
            cwd="",
            runner=info.runner_for(DEFAULT_COMMAND_TIMEOUT),
            has_base64=info.has_base64,
        )
        exec_ms = interleaved_ms(
            {
                "raw": lambda: post("sh -c true"),
                "raw_wrapped": lambda: post(wrapped_true),
                "sandbox": lambda: sandbox.execute("true"),
                "sandbox_watchdog": lambda: sandbox.execute("true", timeout=WATCHDOG_TIMEOUT),
                "sandbox_echo": lambda: sandbox.execute("echo hi"),
            },
            n_exec,
        )

        blob = os.urandom(TEN_MIB)
        target = f"{work}/blob.bin"
        served = server.base_dir / "served.bin"
        served.write_bytes(blob)

        def sandbox_upload() -> None:
            assert sandbox.upload_files([(target, blob)])[0].error is None

        def sandbox_download() -> None:
            assert sandbox.download_files([target])[0].content == blob

        def raw_upload() -> None:
            files = {"file": ("raw-upload.bin", blob, "application/octet-stream")}
            assert raw.post(f"{server.url}/upload", files=files).status_code == 200

        def raw_download() -> None:
            assert raw.get(f"{server.url}/download/served.bin").content == blob

        transfer_ms = interleaved_ms(
            {
                "sandbox_upload": sandbox_upload,
                "raw_upload": raw_upload,
                "sandbox_download": sandbox_download,
                "raw_download": raw_download,
            },
            n,
        )

        tree = work / "tree"
        for i in range(1000):
            sub = tree / f"d{i % 20:02d}"
            sub.mkdir(parents=True, exist_ok=True)
            lines = [f"line {j} of file {i}" for j in range(40)]
            if i % 10 == 0:
                lines[7] = f"TODO: needle {i}"
            (sub / f"f{i:04d}.py").write_text("\n".join(lines) + "\n")

        def ours() -> None:
            assert len(sandbox.grep("needle", str(tree)).matches or []) == 100

        def stock() -> None:
            assert len(BaseSandbox.grep(sandbox, "needle", str(tree)).matches or []) == 100

        grep_ms = interleaved_ms({"ours": ours, "stock": stock}, n)
        sandbox.close()
        raw.close()

    rows = [
        ('execute("true") via PodSandbox', exec_ms["sandbox"], ""),
        (
            "raw POST /execute `sh -c true`",
            exec_ms["raw"],
            f"PodSandbox / raw = {exec_ms['sandbox'] / exec_ms['raw']:.2f} (in-pod wrapper included)",
        ),
        (
            "raw POST of the same wrapped command",
            exec_ms["raw_wrapped"],
            f"PodSandbox / raw wrapped = {exec_ms['sandbox'] / exec_ms['raw_wrapped']:.2f} (client overhead)",
        ),
        (
            f'execute("true", timeout={WATCHDOG_TIMEOUT}) (watchdog)',
            exec_ms["sandbox_watchdog"],
            f"/ raw = {exec_ms['sandbox_watchdog'] / exec_ms['raw']:.2f} (in-pod `timeout` below the runtime limit)",
        ),
        (
            'execute("echo hi") via PodSandbox',
            exec_ms["sandbox_echo"],
            f"/ raw = {exec_ms['sandbox_echo'] / exec_ms['raw']:.2f} (output: head | base64 in the pod)",
        ),
        ("upload 10 MiB via PodSandbox", transfer_ms["sandbox_upload"], ""),
        (
            "raw POST /upload 10 MiB (runtime only)",
            transfer_ms["raw_upload"],
            f"PodSandbox / raw = {transfer_ms['sandbox_upload'] / transfer_ms['raw_upload']:.2f}",
        ),
        ("download 10 MiB via PodSandbox", transfer_ms["sandbox_download"], ""),
        (
            "raw GET /download 10 MiB (runtime only)",
            transfer_ms["raw_download"],
            f"PodSandbox / raw = {transfer_ms['sandbox_download'] / transfer_ms['raw_download']:.2f}",
        ),
        ("grep over 1,000 files via PodSandbox", grep_ms["ours"], ""),
        (
            "grep via stock BaseSandbox.grep",
            grep_ms["stock"],
            f"PodSandbox / stock = {grep_ms['ours'] / grep_ms['stock']:.2f}",
        ),
    ]
    print(
        f"runtime: {shlex.quote(str(server.base_dir))}, runner={info.runner}, runtime limit={info.exec_limit} s"
        f" (default timeout {DEFAULT_COMMAND_TIMEOUT} s: watchdog {info.runner_for(DEFAULT_COMMAND_TIMEOUT)}),"
        f" {n} iterations ({n_exec} for execute), medians"
    )
    print(f"{'operation':<42} {'median ms':>10}  ratio")
    for name, value, note in rows:
        print(f"{name:<42} {value:>10.2f}  {note}")


if __name__ == "__main__":
    main()
