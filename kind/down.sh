#!/usr/bin/env bash
# Delete the kind cluster that kind/up.sh created (and everything in it).
set -euo pipefail

CLUSTER_NAME=${CLUSTER_NAME:-agentsession}

command -v kind >/dev/null 2>&1 || { echo "down.sh: kind is not installed" >&2; exit 1; }
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  kind delete cluster --name "$CLUSTER_NAME"
else
  echo "down.sh: no kind cluster named $CLUSTER_NAME: nothing to do" >&2
fi
