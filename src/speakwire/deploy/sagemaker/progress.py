"""Visible progress while a boto3 waiter polls ``DescribeEndpoint``.

Creating a GPU endpoint takes 5–20 minutes and a silent waiter looks hung. botocore's
waiters have no per-poll callback, but every call a client makes emits an
``after-call`` event with the parsed response, waiter polls included; listening to it
for the duration of the wait prints each status as it is seen, without replacing the
waiter's own acceptors, delays and attempt limits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

_EVENT = "after-call.sagemaker.DescribeEndpoint"

Log = Callable[[str], None]


@contextmanager
def report_endpoint_polls(
    sm_client: Any, endpoint_name: str, log: Log, *, clock: Callable[[], float] = time.monotonic
) -> Iterator[None]:
    """Log ``[mm:ss] NAME: STATUS`` for every ``DescribeEndpoint`` the client makes inside the block.

    Args:
        sm_client: A boto3 SageMaker client.
        endpoint_name: Name shown in each line.
        log: Where the lines go.
        clock: Monotonic clock for the elapsed time.
    """
    start = clock()

    def on_describe(parsed: Mapping[str, Any], **_: Any) -> None:
        minutes, seconds = divmod(int(clock() - start), 60)
        error = parsed.get("Error")
        if error:
            state = f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
        else:
            state = str(parsed.get("EndpointStatus", "unknown"))
            if parsed.get("FailureReason"):
                state += f" ({parsed['FailureReason']})"
        log(f"[{minutes:02d}:{seconds:02d}] {endpoint_name}: {state}")

    sm_client.meta.events.register(_EVENT, on_describe)
    try:
        yield
    finally:
        sm_client.meta.events.unregister(_EVENT, on_describe)
