#!/usr/bin/env bash
# Build the CPU image here, with no Docker engine and no Docker Hub, and check its SageMaker metadata.
#
#   bash deploy/sagemaker/build-local.sh        # leaves localhost/speakwire:cpu in buildah's vfs storage
#
# The base is Debian bookworm made locally with mmdebstrap (python3 + venv), imported into buildah, and
# Dockerfile.cpu is built on it with BASE_IMAGE (the same file CodeBuild or `docker build` use with
# python:3.11-slim). buildah runs RUN steps with chroot isolation and the host's network; pip inside
# needs the host's CA bundle. deploy/sagemaker/run-local.sh runs the result as SageMaker would, and
# tests/deploy/test_local_image.py passes the hosting contract against it.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/speakwire:cpu}
BASE=localhost/speakwire-base:bookworm
CACHE=${SPEAKWIRE_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/speakwire-build}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
buildah() { command buildah --storage-driver vfs "$@"; }

if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "build-local.sh: needs buildah and mmdebstrap (apt-get install buildah mmdebstrap) and root" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah mmdebstrap >/dev/null
fi

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  mkdir -p "$CACHE"
  if [ ! -s "$CACHE/bookworm.tar" ]; then
    echo "== base: Debian bookworm (minbase + python3, python3-venv) with mmdebstrap"
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates bookworm \
      "$CACHE/bookworm.tar.partial"
    mv "$CACHE/bookworm.tar.partial" "$CACHE/bookworm.tar"
  fi
  container=$(buildah from scratch)
  buildah add --quiet "$container" "$CACHE/bookworm.tar" / >/dev/null
  buildah commit --quiet --rm "$container" "$BASE" >/dev/null
fi

echo "== $IMAGE from deploy/sagemaker/Dockerfile.cpu on $BASE"
buildah bud --quiet --isolation chroot --network host -v "$CA_BUNDLE:$CA_BUNDLE:ro" \
  --build-arg BASE_IMAGE="$BASE" -f deploy/sagemaker/Dockerfile.cpu -t "$IMAGE" .

echo "== metadata SageMaker relies on"
buildah inspect --type image "$IMAGE" | python3 -c '
import json, sys
config = json.load(sys.stdin)["OCIv1"]["config"]
problems = []
if config.get("Labels", {}).get("com.amazonaws.sagemaker.capabilities.bidirectional-streaming") != "true":
    problems.append("no bidirectional-streaming label: SageMaker refuses InvokeEndpointWithBidirectionalStream")
if config.get("Entrypoint") != ["/usr/local/bin/speakwire-entrypoint"]:
    problems.append("entrypoint %r is not the exec-form speakwire-entrypoint" % config.get("Entrypoint"))
if config.get("User", "").split(":")[0] in ("", "0", "root"):
    problems.append("runs as root")
if "8080/tcp" not in config.get("ExposedPorts", {}):
    problems.append("does not expose 8080")
for problem in problems:
    print("build-local.sh:", problem, file=sys.stderr)
if problems:
    sys.exit(1)
print("label, exec-form entrypoint, user", config["User"], "and port 8080: as SageMaker needs")
'
