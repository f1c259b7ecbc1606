"""A server's Prometheus ``/metrics``, read as one number per metric: the sum over its label sets.

The benchmarks compare a counter before and after a level (underruns, rejections, audio made, loop steps)
or read a gauge once (active streams); which protocol or engine a sample carries does not matter to them.
"""

from __future__ import annotations

import contextlib

import httpx


def parse(body: str) -> dict[str, float]:
    """``{metric name: sum of its samples}`` from Prometheus text (a histogram's ``_bucket`` etc. apart)."""
    totals: dict[str, float] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        name = sample.partition("{")[0].strip()
        with contextlib.suppress(ValueError):
            totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def scrape(base_url: str, *, timeout_s: float = 10.0) -> dict[str, float]:
    """Every metric of the server at ``base_url``, summed over label sets.

    Raises:
        httpx.HTTPError: The server did not answer.
    """
    response = httpx.get(f"{base_url.rstrip('/')}/metrics", timeout=timeout_s)
    response.raise_for_status()
    return parse(response.text)


def metric(base_url: str, name: str, *, missing: float | None = None) -> float | None:
    """One metric summed over its label sets; ``missing`` when the server has no sample of it (a labelled
    gauge or counter before its first use), None when the server does not answer."""
    try:
        return scrape(base_url, timeout_s=5.0).get(name, missing)
    except httpx.HTTPError:
        return None
