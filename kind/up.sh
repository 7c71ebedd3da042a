#!/usr/bin/env bash
# Bring up agentsession on a local kind cluster: the cluster, agent-sandbox (release manifest), the
# operator (built from operator/Dockerfile and loaded into kind), then the samples in a namespace that
# enforces Pod Security "restricted".
#
# Needs: docker, kind, kubectl, and internet access (agent-sandbox's release manifest, images).
# Idempotent: re-running reuses the cluster and re-applies everything.
#
# Environment:
#   CLUSTER_NAME           kind cluster name                      (agentsession)
#   AGENT_SANDBOX_VERSION  agent-sandbox release                  (v1.0.3)
#   IMAGE                  operator image, with a tag             (ghcr.io/agentsession/operator:0.1.0)
#   SAMPLES_NAMESPACE      where config/samples/ go               (agentsession-demo)
#   KIND_NODE_IMAGE        kindest/node image to use              (kind's default)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

CLUSTER_NAME=${CLUSTER_NAME:-agentsession}
AGENT_SANDBOX_VERSION=${AGENT_SANDBOX_VERSION:-v1.0.3}
IMAGE=${IMAGE:-ghcr.io/agentsession/operator:0.1.0}
SAMPLES_NAMESPACE=${SAMPLES_NAMESPACE:-agentsession-demo}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
AGENT_SANDBOX_MANIFEST="https://github.com/kubernetes-sigs/agent-sandbox/releases/download/${AGENT_SANDBOX_VERSION}/sandbox-with-extensions.yaml"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'up.sh: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done
[[ "$IMAGE" == *:* && "${IMAGE##*:}" != */* ]] || die "IMAGE must carry a tag (name:tag), got: $IMAGE"

context="kind-${CLUSTER_NAME}"
k() { kubectl --context "$context" "$@"; }

# 1. The cluster.
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  say "kind cluster $CLUSTER_NAME exists: reusing it"
else
  say "creating kind cluster $CLUSTER_NAME"
  args=(create cluster --name "$CLUSTER_NAME" --config "$here/cluster.yaml" --wait 180s)
  [[ -n "$KIND_NODE_IMAGE" ]] && args+=(--image "$KIND_NODE_IMAGE")
  kind "${args[@]}"
fi

# 2. agent-sandbox, with extensions (claims, templates, warm pools). Server-side: its CRDs are large.
say "installing agent-sandbox $AGENT_SANDBOX_VERSION"
k apply --server-side --force-conflicts -f "$AGENT_SANDBOX_MANIFEST"
k wait --for=condition=Established --timeout=120s \
  crd/sandboxes.agents.x-k8s.io \
  crd/sandboxclaims.extensions.agents.x-k8s.io \
  crd/sandboxtemplates.extensions.agents.x-k8s.io \
  crd/sandboxwarmpools.extensions.agents.x-k8s.io
k -n agent-sandbox-system wait --for=condition=Available --timeout=300s deployment --all

# 3. The operator image, built here and side-loaded (no registry needed). The context is the repository
#    root; its .dockerignore lets in only api/ and operator/ (never .cluster/, the dev cluster's keys).
say "building $IMAGE"
docker build -f "$root/operator/Dockerfile" -t "$IMAGE" "$root"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

# 4. config/, with the image swapped in by a throwaway overlay (config/ itself stays untouched).
overlay=$(mktemp -d "$root/kind/.overlay.XXXXXX")
trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../config
images:
- name: ghcr.io/agentsession/operator
  newName: ${IMAGE%:*}
  newTag: ${IMAGE##*:}
YAML
say "installing the operator (config/)"
k apply --server-side --force-conflicts -k "$overlay"
k wait --for=condition=Established --timeout=60s \
  crd/agentsessions.agentsession.dev crd/agentsessionpolicies.agentsession.dev
# The image tag may be unchanged while its content is new: restart to pick up a rebuilt image.
k -n agentsession-system rollout restart deployment/agentsession-operator
k -n agentsession-system rollout status deployment/agentsession-operator --timeout=180s

# 5. The samples, in a namespace where sandbox pods must pass Pod Security "restricted".
say "applying config/samples/ in namespace $SAMPLES_NAMESPACE"
k create namespace "$SAMPLES_NAMESPACE" --dry-run=client -o yaml | k apply -f -
k label namespace "$SAMPLES_NAMESPACE" --overwrite \
  pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/enforce-version=latest
if k get runtimeclass gvisor >/dev/null 2>&1; then
  k -n "$SAMPLES_NAMESPACE" apply -f "$root/config/samples/"
else
  # kind has no gVisor: the hardened template on runc (without its runtimeClassName line, docs/gvisor.md).
  say "no RuntimeClass gvisor here: the sample template runs on runc"
  for f in "$root"/config/samples/*.yaml; do
    sed '/^ *runtimeClassName: gvisor$/d' "$f" | k -n "$SAMPLES_NAMESPACE" apply -f -
  done
fi

say "done. Try: kubectl --context $context -n $SAMPLES_NAMESPACE get agentsessions,sandboxclaims,pods"
