#!/bin/sh
# speakwire container entrypoint (SageMaker hosting contract).
#
# SageMaker starts the container as `docker run IMAGE serve`: `serve` (or no argument)
# runs the server in SageMaker mode — 0.0.0.0:8080, GET /ping, POST /invocations and the
# bidirectional-stream WebSocket — and any further arguments are passed to it
# (`serve --port 9000`). Any other command runs as given (`bash`, `speakwire say ...`),
# so the image doubles as a CLI.
#
# `exec` replaces this shell, so the server is PID 1 and receives SageMaker's SIGTERM
# directly (SIGKILL follows 30 s later); a shell left in between would swallow it.
set -eu

if [ "$#" -eq 0 ]; then
    set -- serve
fi

if [ "$1" = "serve" ]; then
    shift
    exec speakwire serve --sagemaker "$@"
fi

exec "$@"
