"""`python -m devcluster.podrunner --node NAME`: run the pods of one fake node until SIGTERM.

With `--provisioner-only` (the real node, whose kubelet runs the pods) only PersistentVolumes are provisioned.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from kubernetes import client, config

from devcluster.podrunner.provisioner import Provisioner, ensure_storage_class
from devcluster.podrunner.runner import Runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node")
    parser.add_argument("--provisioner-only", action="store_true")
    args = parser.parse_args()
    if not args.node and not args.provisioner_only:
        parser.error("--node is required (or --provisioner-only)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config.load_kube_config()
    root = Path(os.environ["DEVCLUSTER_DIR"])
    ensure_storage_class(client.StorageV1Api())
    provisioner = Provisioner(root / "volumes")
    provisioner.start()
    runner = None if args.provisioner_only else Runner(args.node, root)
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.info("signal %d: stopping every pod's program", signum)
        provisioner.stopping.set()
        if runner is not None:
            runner.shutdown()
        done.set()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if runner is not None:
        threading.Thread(target=runner.run, args=(root / "podrunner.ready",), daemon=True).start()
    done.wait()


if __name__ == "__main__":
    main()
