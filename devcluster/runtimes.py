"""The real programs a sandbox pod runs, picked by container image, and what they need on disk.

- python-runtime-sandbox images: the upstream FastAPI runtime (`examples/python-runtime-sandbox/main.py`
  of the agent-sandbox module) under uvicorn, in a virtualenv with the versions the upstream image pins.
- sandboxd images: the sandboxd binary built from the same module.
- anything else (pause, ...): no process; the container counts as started at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster import build, versions

PYTHON_RUNTIME = "python-runtime"
SANDBOXD = "sandboxd"
# The versions upstream's runtime image pins (examples/python-runtime-sandbox/requirements.txt).
_RUNTIME_PACKAGES = ("fastapi==0.138.0", "uvicorn==0.49.0", "python-multipart==0.0.32")
# System python, not the developer's (often under /root, unreadable to a pod running as uid 1000).
_SYSTEM_PYTHON = Path("/usr/bin/python3")


@dataclass(frozen=True)
class Runtime:
    kind: str  # PYTHON_RUNTIME | SANDBOXD
    default_port: int


def for_image(image: str) -> Runtime | None:
    name = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    if "python-runtime-sandbox" in name:
        return Runtime(PYTHON_RUNTIME, 8888)
    if "sandboxd" in name:
        return Runtime(SANDBOXD, 8080)
    return None


def runtime_dir() -> Path:
    return build.cache_root() / "runtime" / f"python-runtime-{versions.AGENT_SANDBOX}"


def venv_dir() -> Path:
    return runtime_dir() / "venv"


def main_py() -> Path:
    return runtime_dir() / "main.py"


def prepare(out: Any = sys.stderr) -> None:
    """Create the python runtime's virtualenv and fetch its main.py, once per agent-sandbox version."""
    stamp = runtime_dir() / ".complete"
    if stamp.exists():
        return
    print("[devcluster] preparing the python sandbox runtime (first time only) ...", file=out, flush=True)
    shutil.rmtree(runtime_dir(), ignore_errors=True)
    runtime_dir().mkdir(parents=True)
    python = str(_SYSTEM_PYTHON if _SYSTEM_PYTHON.exists() else sys.executable)
    subprocess.run([python, "-m", "venv", str(venv_dir())], check=True)
    subprocess.run([str(venv_dir() / "bin" / "pip"), "install", "-q", *_RUNTIME_PACKAGES], check=True)
    source = build.module_dir("sigs.k8s.io/agent-sandbox", versions.AGENT_SANDBOX)
    shutil.copyfile(source / "examples" / "python-runtime-sandbox" / "main.py", main_py())
    # Readable by a pod running as any user.
    for path in [build.cache_root(), build.cache_root() / "runtime", runtime_dir(), *runtime_dir().rglob("*")]:
        path.chmod(path.stat().st_mode | 0o005 | (0o001 if path.is_dir() else 0))
    stamp.write_text("ok")


_POD_START_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: devcluster-pod-start
spec:
  # Pending -> Running with a pod IP from the node's 127.x CIDR; NOT Ready: readiness belongs to the
  # pod runner, which marks a pod Ready only once its runtime answers (like a kubelet's readiness probe).
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          waiting:
            reason: ContainerCreating
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""


def kwok_stages() -> str:
    """kwok's own node stages (read from its module, not copied here) plus our pod start stage.

    Pod deletion is not a kwok stage: the pod runner stops the pod's processes first and only then
    removes the Pod, so a pod IP is never handed out again while an old runtime could still answer.
    """
    kwok = build.module_dir("sigs.k8s.io/kwok", versions.KWOK) / "kustomize" / "stage" / "node"
    docs = [
        (kwok / "fast" / "node-initialize.yaml").read_text(),
        (kwok / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml").read_text(),
        _POD_START_STAGE,
    ]
    # Validate that what we hand kwok parses, so a bad stage fails here with a clear message.
    for doc in docs:
        yaml.safe_load(doc)
    return "\n---\n".join(doc.strip() for doc in docs) + "\n"


def kill_leftovers(pods_dir: Path) -> None:
    """Kill the process group recorded for every pod (used when the runner could not clean up)."""
    if not pods_dir.is_dir():
        return
    for pidfile in pods_dir.glob("*/pid"):
        try:
            pgid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
