"""Watch the pods of one fake node and run each one's program like a kubelet would."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from devcluster import runtimes
from devcluster.podrunner import probes
from devcluster.podrunner.sandbox import DEFAULT_PATH, RUNTIME_MOUNT, ContainerSandbox, Mount, bwrap_command

log = logging.getLogger("pod-runner")

RESTART_BACKOFF = (10.0, 20.0, 40.0, 80.0, 160.0, 300.0)  # a kubelet's CrashLoopBackOff steps
STATUS_RETRY = (0.5, 5.0)  # a status write that failed is sent again after 0.5 s, doubling up to 5 s


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}_{meta['name']}_{meta['uid']}"


@dataclass
class PodWorker:
    """Runs one pod: starts its program, probes readiness, restarts on death, stops on deletion."""

    api: client.CoreV1Api
    pod: dict[str, Any]
    pods_dir: Path
    volume_dir: Path
    stop_event: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen[bytes] | None = None
    thread: threading.Thread | None = None
    ready: bool | None = None
    restarts: int = 0
    unhealthy_told: float = 0.0  # monotonic time of the last Unhealthy Event (at most one a probe period)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])

    @property
    def dir(self) -> Path:
        return self.pods_dir / pod_key(self.pod)

    @property
    def container(self) -> dict[str, Any]:
        return dict(self.pod["spec"]["containers"][0])

    @property
    def pod_ip(self) -> str:
        return str(self.pod["status"]["podIP"])

    # ---- status ------------------------------------------------------------------------------
    def _patch_status(self, ready: bool, state: dict[str, Any], message: str = "") -> None:
        if self.stop_event.is_set():
            return
        status = "True" if ready else "False"
        reason = None if ready else "ContainersNotReady"
        conditions = []
        for ctype in ("Ready", "ContainersReady"):
            cond: dict[str, Any] = {"type": ctype, "status": status, "lastTransitionTime": _now()}
            if reason:
                cond["reason"] = reason
                cond["message"] = message or "containers with unready status: [" + self.container["name"] + "]"
            conditions.append(cond)
        statuses = [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": ready,
                "started": "running" in state,
                "restartCount": self.restarts,
                "state": state,
            }
            for c in self.pod["spec"]["containers"]
        ]
        body = {"status": {"conditions": conditions, "containerStatuses": statuses}}
        # Until it lands, as a kubelet's status manager does: a write refused by an API server that is
        # restarting (503, connection refused) was dropped before, and a pod with no probe loop (pause)
        # then stayed ContainerCreating for good (the kube-apiserver restart test, 1 run in 6).
        delay = STATUS_RETRY[0]
        while not self.stop_event.is_set():
            try:
                self.api.patch_namespaced_pod_status(self.name, self.namespace, body, _request_timeout=10)
                self.ready = ready
                return
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 429 and exc.status < 500:
                    log.warning("status patch of %s/%s refused: %s", self.namespace, self.name, exc.reason)
                    return
                reason = exc.reason
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # refused, reset, timed out
                reason = str(exc)
            log.warning(
                "status patch of %s/%s failed: %s; retrying in %.1f s", self.namespace, self.name, reason, delay
            )
            self.stop_event.wait(delay)
            delay = min(delay * 2, STATUS_RETRY[1])

    # ---- filesystem --------------------------------------------------------------------------
    def _user(self) -> tuple[int | None, int | None, tuple[int, ...]]:
        pod_sc = self.pod["spec"].get("securityContext") or {}
        ctr_sc = self.container.get("securityContext") or {}
        uid = ctr_sc.get("runAsUser", pod_sc.get("runAsUser"))
        gid = ctr_sc.get("runAsGroup", pod_sc.get("runAsGroup"))
        groups = tuple(pod_sc.get("supplementalGroups") or ())
        if pod_sc.get("fsGroup") is not None:
            groups = (*groups, int(pod_sc["fsGroup"]))
        return uid, gid, groups

    def _volume_source(self, volume: dict[str, Any]) -> tuple[Path, bool]:
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = self.api.read_namespaced_persistent_volume_claim(claim, self.namespace)
            if not pvc.spec.volume_name:
                raise RuntimeError(f"PVC {claim} is not bound yet")
            path = self.volume_dir / pvc.spec.volume_name
            path.mkdir(parents=True, exist_ok=True)
            return path, bool(volume["persistentVolumeClaim"].get("readOnly"))
        path = self.dir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume or "secret" in volume:
            self._materialize(volume, path)
            return path, True
        if "projected" in volume:
            self._project_tokens(volume["projected"], path)
            return path, True
        if "emptyDir" not in volume:
            log.warning(
                "pod %s/%s volume %s: type not supported here, using an empty directory",
                self.namespace,
                self.name,
                name,
            )
        return path, False

    def _materialize(self, volume: dict[str, Any], path: Path) -> None:
        if "configMap" in volume:
            cm = self.api.read_namespaced_config_map(volume["configMap"]["name"], self.namespace)
            items = {k: v.encode() for k, v in (cm.data or {}).items()}
        else:
            secret = self.api.read_namespaced_secret(volume["secret"]["secretName"], self.namespace)
            items = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        for key, value in items.items():
            (path / key).write_bytes(value)

    def _project_tokens(self, projected: dict[str, Any], path: Path) -> None:
        """A projected volume's serviceAccountToken sources, as a kubelet writes them: a token the API server
        mints for the pod's ServiceAccount, bound to this pod (its name and UID are claims). Minted once, at
        the container's start: a kubelet also rotates it at 80% of its life, which no test here outlives."""
        meta = self.pod["metadata"]
        for source in projected.get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is None:
                log.warning("pod %s/%s: only serviceAccountToken sources are projected here", self.namespace, self.name)
                continue
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [token["audience"]] if token.get("audience") else [],
                    "expirationSeconds": int(token.get("expirationSeconds", 3600)),
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                },
            }
            account = self.pod["spec"].get("serviceAccountName") or "default"
            minted = self.api.create_namespaced_service_account_token(account, self.namespace, request)
            target = path / token["path"]
            target.write_text(minted.status.token)
            target.chmod(0o644)

    def _prepare(self, runtime: runtimes.Runtime) -> ContainerSandbox:
        uid, gid, groups = self._user()
        tmp, app = self.dir / "tmp", self.dir / "app"
        for d in (tmp, app):
            d.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        binds = [Mount(tmp, "/tmp"), Mount(app, "/app")]
        if runtime.kind == runtimes.PYTHON_RUNTIME:
            shutil.copyfile(runtimes.main_py(), app / "main.py")
            binds.append(Mount(runtimes.runtime_dir(), RUNTIME_MOUNT, read_only=True))
        if runtime.kind == runtimes.SANDBOXD:
            workspace = self.dir / "workspace"
            workspace.mkdir(exist_ok=True)
            binds.append(Mount(workspace, "/workspace"))
        if uid is not None:
            # As the upstream image does for /app: the runtime's own user owns its working directory.
            for p in [app, *app.rglob("*")]:
                os.chown(p, uid, gid if gid is not None else uid)
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        for vm in self.container.get("volumeMounts") or []:
            volume = volumes.get(vm["name"])
            if volume is None:
                continue
            source, read_only = self._volume_source(volume)
            fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
            if fs_group is not None and not read_only and ("persistentVolumeClaim" in volume or "emptyDir" in volume):
                # What a kubelet does for fsGroup: the volume belongs to the pod's group, setgid.
                os.chown(source, -1, int(fs_group))
                source.chmod(0o2775)
            binds.append(Mount(source, vm["mountPath"], read_only or bool(vm.get("readOnly"))))
        env = {"PATH": DEFAULT_PATH, "HOSTNAME": self.name, "HOME": "/root" if not uid else "/tmp"}
        env.update(self._env())
        return ContainerSandbox(
            hostname=self.name,
            root_binds=binds,
            env=env,
            workdir=self.container.get("workingDir") or ("/workspace" if runtime.kind == runtimes.SANDBOXD else "/app"),
            run_as_user=uid,
            run_as_group=gid,
            supplemental_groups=groups,
        )

    def _env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in self.container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item["value"])
                continue
            source = item.get("valueFrom") or {}
            field_path = (source.get("fieldRef") or {}).get("fieldPath")
            values = {
                "metadata.name": self.name,
                "metadata.namespace": self.namespace,
                "status.podIP": self.pod_ip,
                "spec.nodeName": self.pod["spec"].get("nodeName", ""),
            }
            if field_path in values:
                env[item["name"]] = values[field_path]
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.api.read_namespaced_secret(ref["name"], self.namespace)
                env[item["name"]] = base64.b64decode((secret.data or {}).get(ref["key"], "")).decode()
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                cm = self.api.read_namespaced_config_map(ref["name"], self.namespace)
                env[item["name"]] = (cm.data or {}).get(ref["key"], "")
        return env

    def _argv(self, runtime: runtimes.Runtime, port: int) -> list[str]:
        if runtime.kind == runtimes.PYTHON_RUNTIME:
            return [
                f"{RUNTIME_MOUNT}/venv/bin/python",
                "-m",
                "uvicorn",
                "main:app",
                "--host",
                self.pod_ip,
                "--port",
                str(port),
            ]
        from devcluster import build

        build.build(build.SANDBOXD)  # the first sandboxd pod builds it (once, into the shared cache)
        return [str(build.SANDBOXD.path("sandboxd")), "--listen-host", self.pod_ip, "--root-dir", "/workspace"]

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        """Run the pod; a failure to set it up (an API read while the API server restarts, a PVC not bound
        yet) is reported and tried again after a kubelet's back-off, not given up for good."""
        failures = 0
        while not self.stop_event.is_set():
            try:
                self._run_inner()
                return
            except Exception as exc:
                log.exception("pod %s/%s failed", self.namespace, self.name)
                self._stop_process()  # never two of its programs at once
                self._patch_status(
                    False,
                    {"waiting": {"reason": "CreateContainerError", "message": str(exc)[:500]}},
                    message=str(exc)[:500],
                )
                backoff = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
                failures += 1
                if self.stop_event.wait(backoff):
                    return

    def _stop_process(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def _run_inner(self) -> None:
        runtime = runtimes.for_image(self.container["image"])
        if runtime is None:
            # No program for this image (pause and the like): started and Ready at once.
            self._patch_status(True, {"running": {"startedAt": _now()}})
            return
        ports = [int(p["containerPort"]) for p in self.container.get("ports") or [] if p.get("containerPort")]
        port = ports[0] if ports else runtime.default_port
        while not self.stop_event.is_set():
            box = self._prepare(runtime)
            cmd = bwrap_command(box, self._argv(runtime, port))
            logfile = (self.dir / "log").open("ab")
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True
            )
            logfile.close()
            (self.dir / "pid").write_text(str(self.proc.pid))
            started = _now()
            log.info(
                "pod %s/%s: started %s on %s:%d (pid %d)",
                self.namespace,
                self.name,
                runtime.kind,
                self.pod_ip,
                port,
                self.proc.pid,
            )
            self._patch_status(False, {"running": {"startedAt": started}}, "readiness probe has not passed yet")
            spec = probes.from_container(self.container, self.pod_ip)
            if spec.kind == "ports" and not ports:
                spec = probes.ProbeSpec("ports", self.pod_ip, ports=(port,), period=1.0)
            self._probe_until_exit(spec, box, started)
            if self.stop_event.is_set():
                return
            code = self.proc.wait()
            log.warning("pod %s/%s: runtime exited with %s", self.namespace, self.name, code)
            restart_policy = self.pod["spec"].get("restartPolicy", "Always")
            terminated = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Error" if code else "Completed",
                    "startedAt": started,
                    "finishedAt": _now(),
                }
            }
            if restart_policy == "Never" or (restart_policy == "OnFailure" and code == 0):
                self._patch_status(False, terminated, f"container exited with code {code}")
                return
            backoff = RESTART_BACKOFF[min(self.restarts, len(RESTART_BACKOFF) - 1)]
            self._patch_status(
                False,
                {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff:.0f}s restarting failed container",
                    }
                },
                f"container exited with code {code}",
            )
            self.restarts += 1
            if self.stop_event.wait(backoff):
                return

    def _probe_until_exit(self, spec: probes.ProbeSpec, box: ContainerSandbox, started: str) -> None:
        """Probe fast until the first success (so Ready follows start-up closely), then every period."""
        assert self.proc is not None
        if spec.initial_delay and self.stop_event.wait(spec.initial_delay):
            return
        failures = 0

        def exec_in_pod(command: list[str], timeout: float) -> int:
            return subprocess.run(bwrap_command(box, command), timeout=timeout, capture_output=True).returncode

        while self.proc.poll() is None and not self.stop_event.is_set():
            ok = probes.run(spec, exec_in_pod)
            if ok:
                failures = 0
                if self.ready is not True:
                    self._patch_status(True, {"running": {"startedAt": started}})
            else:
                failures += 1
                self._tell_unhealthy(spec.period)
                if self.ready is True and failures >= spec.failure_threshold:
                    self._patch_status(False, {"running": {"startedAt": started}}, "readiness probe failed")
            interval = spec.period if self.ready else min(spec.period, 0.1)
            if self.stop_event.wait(interval):
                return

    def _tell_unhealthy(self, period: float) -> None:
        """A failed readiness probe as a kubelet tells it: a Warning Event `Unhealthy` on the pod (at most one a
        probe period; a kubelet's recorder aggregates them instead). What a test waits on to know probes ran."""
        now = time.monotonic()
        if now - self.unhealthy_told < period:
            return
        self.unhealthy_told = now
        meta = self.pod["metadata"]
        body = {
            "metadata": {"generateName": f"{self.name}.", "namespace": self.namespace},
            "involvedObject": {"kind": "Pod", "namespace": self.namespace, "name": self.name, "uid": meta["uid"]},
            "reason": "Unhealthy",
            "message": "Readiness probe failed",
            "type": "Warning",
            "source": {"component": "kubelet", "host": self.pod["spec"].get("nodeName", "")},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
            self.api.create_namespaced_event(self.namespace, body)

    def stop(self) -> None:
        """Stop the whole process group and wait until it is gone."""
        self.stop_event.set()
        self._stop_process()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=15)


class Runner:
    def __init__(self, node: str, root: Path) -> None:
        self.node = node
        self.pods_dir = root / "pods"
        self.volume_dir = root / "volumes"
        self.api = client.CoreV1Api()
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def handle(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            self._finish_deletion(pod)
            return
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            return
        with self.lock:
            if uid in self.workers:
                return
            worker = PodWorker(self.api, pod, self.pods_dir, self.volume_dir)
            self.workers[uid] = worker
        worker.dir.mkdir(parents=True, exist_ok=True)
        worker.start()

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.pop(uid, None)
        if worker is not None:
            worker.stop()
        # The program is gone: only now may the Pod (and with it its IP) go away.
        try:
            self.api.delete_namespaced_pod(
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)),
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("deleting pod %s failed: %s", pod["metadata"]["name"], exc.reason)
        shutil.rmtree(self.pods_dir / pod_key(pod), ignore_errors=True)

    def forget(self, pod: dict[str, Any]) -> None:
        """A pod vanished without our deletion (force-deleted): stop its program all the same."""
        with self.lock:
            worker = self.workers.pop(pod["metadata"]["uid"], None)
        if worker is not None:
            worker.stop()
            shutil.rmtree(worker.dir, ignore_errors=True)

    def run(self, ready_file: Path) -> None:
        selector = f"spec.nodeName={self.node}"
        serializer = client.ApiClient()
        first = True
        while not self.stopping.is_set():
            try:
                listing = self.api.list_pod_for_all_namespaces(field_selector=selector)
            except Exception as exc:  # the API server is restarting: a kubelet keeps trying, so do we
                log.warning("pod list failed: %s; retrying", exc)
                time.sleep(1)
                continue
            seen = set()
            for item in listing.items:
                pod = serializer.sanitize_for_serialization(item)
                seen.add(pod["metadata"]["uid"])
                self.handle(pod)
            with self.lock:
                gone = [w.pod for uid, w in self.workers.items() if uid not in seen]
            for pod in gone:
                self.forget(pod)
            if first:
                ready_file.write_text("ok")
                first = False
            try:
                stream = watch.Watch().stream(
                    self.api.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                    _request_timeout=330,
                )
                for event in stream:
                    if self.stopping.is_set():
                        return
                    if event["type"] == "BOOKMARK":
                        continue
                    pod = serializer.sanitize_for_serialization(event["object"])
                    if event["type"] == "DELETED":
                        self.forget(pod)
                    else:
                        self.handle(pod)
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("pod watch failed: %s; relisting", exc.reason)
                    time.sleep(1)
            except Exception as exc:
                if self.stopping.is_set():
                    return
                log.warning("pod watch broke: %s; relisting", exc)
                time.sleep(1)

    def shutdown(self) -> None:
        self.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
            self.workers.clear()
        for worker in workers:
            worker.stop()
