#!/usr/bin/env bash
# Run an image as SageMaker starts it (`docker run IMAGE serve`), without a container runtime.
#
#   bash deploy/sagemaker/run-local.sh [IMAGE] [ARGS...]    # default localhost/speakwire:cpu, ARGS the image's CMD
#
# podman and crun cannot start containers on this kind of machine (no setrlimit, hybrid cgroups), so the
# image's filesystem is mounted with buildah and entered with chroot as the image's USER, in new mount
# and PID namespaces: the server is PID 1 and gets the signals, as in a container. The network is the
# host's, so pass SPEAKWIRE_HOST/SPEAKWIRE_PORT to pick where it listens. The environment is the
# image's plus the caller's SPEAKWIRE_*, SM_*, HF_* and AWS_* variables. SIGTERM and SIGINT to this
# script go to the server; the script exits with its status and removes the working container.
set -euo pipefail

IMAGE=${1:-localhost/speakwire:cpu}
shift || true
buildah() { command buildah --storage-driver vfs "$@"; }

config=$(buildah inspect --type image "$IMAGE")
field() { python3 -c 'import json, sys; c = json.load(sys.stdin)["OCIv1"]["config"]; print(eval(sys.argv[1]))' "$1" <<<"$config"; }
user=$(field 'c.get("User") or "0:0"')
workdir=$(field 'c.get("WorkingDir") or "/"')
mapfile -t command < <(field '"\n".join((c.get("Entrypoint") or []) + (sys.argv[2:] or c.get("Cmd") or []))' "$@")
mapfile -t environment < <(field '"\n".join(c.get("Env") or [])')
for name in $(compgen -e); do
  case $name in SPEAKWIRE_*|SM_*|HF_*|AWS_*) environment+=("$name=${!name}") ;; esac
done

container=$(buildah from --quiet "$IMAGE")
root=$(buildah mount "$container")
cleanup() { buildah umount "$container" >/dev/null 2>&1 || true; buildah rm "$container" >/dev/null 2>&1 || true; }
trap cleanup EXIT

env -i "${environment[@]}" unshare --mount --pid --fork --mount-proc="$root/proc" \
  sh -c 'user=$0 root=$1 && shift && mount --rbind /dev "$root/dev" &&
         exec chroot --userspec="$user" "$root" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$@"' \
  "$user" "$root" "$workdir" "${command[@]}" &
unshare_pid=$!
forward() {  # the server is unshare's child (sh exec'd into chroot, then the entrypoint, then python)
  local child
  child=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null || true)
  kill "-$1" ${child:-$unshare_pid} 2>/dev/null || true
}
trap 'forward TERM' TERM
trap 'forward INT' INT
status=0
while true; do
  wait "$unshare_pid" && status=0 || status=$?
  kill -0 "$unshare_pid" 2>/dev/null || break  # wait returns early when a trapped signal arrives
done
exit "$status"
