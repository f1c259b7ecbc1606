"""One Qwen3 generation-loop step, counted: aten ops, host<->device copies, talker forwards of a burst, host ms.

Runs the real 0.6B- or 1.7B-Base architecture with random weights (``qwen3.random_checkpoint``) on
the CPU, so the figures need no GPU. For each batch size N it starts N voice-cloning rows (x-vector prompt,
EOS steered off), waits until all N generate, and then counts one loop step (``GenerationLoop._step``) on
the loop's own thread:

* **ops_eager / ops_static**: aten ops dispatched (a ``TorchDispatchMode``), views excluded (view, reshape,
  slice, select, transpose, t, expand, (un)squeeze, permute, as_strided, alias, detach, split, unbind,
  narrow); each is a kernel launch on a GPU in eager mode. ``ops_eager`` is the eager reference step the
  tests compare with (``tests/qwen3/oracle/eager_step.py``'s ``eager_steps``, through ``bench.checkout``), counted
  on a round of rows of its own; ``ops_static`` the loop's own step (the one a CUDA graph records; on the CPU it
  runs eagerly);
* **h2d_per_step**: tensors built from host data (``aten.lift_fresh``: ``torch.tensor``, ``as_tensor``,
  indexing with Python lists, assigning Python scalars; ``torch.from_numpy``) plus copies from the CPU to
  another device; **d2h_per_step**: reads of device data by the host (``aten._local_scalar_dense``:
  ``.item()``, ``bool()``, ``int()``; ``.tolist()``, ``.numpy()``) plus copies from a device to the CPU.
  Both on the static path;
* **host_ms_static**: wall milliseconds per static step (mean of ``--timed-steps``, no counting). On the
  CPU this is the arithmetic too, not only the host's share;
* **burst16_prefill_forwards**: talker forwards the loop makes for prompts when 16 rows arrive in the same
  turn, until every one has its first frame.

``--breakdown`` also prints (to stderr) the static step's counted ops by op name and by where they come
from: the talker's layers, the code predictor's layers, sampling, or the glue around them (read off the
Python stack of each op).

    python -m bench.qwen3.step_profile --arch 0.6B --rows 16 --json    # or: python bench/qwen3_step_profile.py ...
    python -m bench.qwen3.step_profile --arch 0.6B --rows 1,16,64 --out bench/results/qwen3-step-profile
    python -m bench.qwen3.step_profile --arch 0.6B --rows 16 --timed-steps 1 --breakdown
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.checkout import tests_on_path
from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, one_line
from speakwire.bench.results import write_results

TEXT = (
    "Good morning, and thank you for calling. Your order left our warehouse this morning and should reach you "
    "on Thursday; I have sent the tracking link to your email."
)
VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "slice", "select", "transpose", "t", "expand", "squeeze",
    "unsqueeze", "permute", "as_strided", "alias", "detach", "split", "split_with_sizes", "unbind", "narrow",
})  # fmt: skip
STAGES = {"_decode": "talker", "_predict": "predictor", "_sample_talker": "sampling", "_pick": "sampling"}
"""Functions of the static step (and of ``sampling``) that name where an op comes from, innermost wins."""


def op_origin() -> str:
    """``stage/part`` of the op being dispatched: the innermost ``STAGES`` function on the stack (else glue),
    and the innermost speakwire function or torch module class below it (the part of the layer)."""
    part = stage = None
    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if part is None:
            if "/speakwire/" in path:
                part = code.co_name
            elif code.co_name == "forward" and "self" in frame.f_locals and "/torch/" not in path:
                part = type(frame.f_locals["self"]).__name__
        if "/speakwire/" in path and code.co_name in STAGES:
            stage = STAGES[code.co_name]
            break
        frame = frame.f_back
    return f"{stage or 'glue'}/{part or '?'}"


class StepCounter:
    """Counts, on one thread, the aten ops and the host<->device copies between ``start`` and ``stop``."""

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                counter._dispatched(func, args, kwargs or {})
                return func(*args, **(kwargs or {}))

        self._torch = torch
        self._mode_type: Any = Mode
        self._mode: Any = None
        self._thread: int | None = None
        self.ops: Counter[str] = Counter()
        self.origins: Counter[str] | None = None
        """``stage/part op`` counts when set (``--breakdown``)."""
        self.h2d = 0
        self.d2h = 0
        self._patches: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        """Wrap the Python-level host reads that dispatch no aten op (``tolist``, ``numpy``, ``from_numpy``)."""
        torch = self._torch

        def wrap(owner: Any, name: str, kind: str) -> None:
            inner = getattr(owner, name)

            def counted(*args: Any, **kwargs: Any) -> Any:
                if self._thread == threading.get_ident():
                    if kind == "d2h":
                        self.d2h += 1
                    else:
                        self.h2d += 1
                return inner(*args, **kwargs)

            self._patches.append((owner, name, inner))
            setattr(owner, name, counted)

        wrap(torch.Tensor, "tolist", "d2h")
        wrap(torch.Tensor, "numpy", "d2h")
        wrap(torch, "from_numpy", "h2d")

    def uninstall(self) -> None:
        for owner, name, inner in reversed(self._patches):
            setattr(owner, name, inner)
        self._patches.clear()

    def _dispatched(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        name = func.overloadpacket.__name__
        if name == "lift_fresh":
            self.h2d += 1
        elif name == "_local_scalar_dense":
            self.d2h += 1
        elif name in ("_to_copy", "copy_"):
            src = args[1] if name == "copy_" else args[0]
            dst = args[0].device if name == "copy_" else kwargs.get("device") or src.device
            if src.device.type == "cpu" and dst.type != "cpu":
                self.h2d += 1
            elif src.device.type != "cpu" and dst.type == "cpu":
                self.d2h += 1
        if name not in VIEWS:
            self.ops[name] += 1
            if self.origins is not None:
                self.origins[f"{op_origin()} {name}"] += 1

    def start(self) -> None:
        self.ops.clear()
        if self.origins is not None:
            self.origins = Counter()
        self.h2d = self.d2h = 0
        self._thread = threading.get_ident()
        self._mode = self._mode_type()
        self._mode.__enter__()

    def stop(self) -> None:
        self._mode.__exit__(None, None, None)
        self._mode = None
        self._thread = None


class LoopProbe:
    """Hooks the loop thread: count or time its next full step, count talker forwards made for prompts."""

    def __init__(self, engine: Any) -> None:
        self.loop = engine.loop
        self.counter = StepCounter()
        self._lock = threading.Lock()
        self._want: str | None = None
        self._rows = 0
        self._done = threading.Event()
        self.result: Any = None
        self.breakdown: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
        """The last counted step's ops by name, and by ``stage/part op`` (``--breakdown``)."""
        self.prompt_forwards = 0
        self._in_prompts = False
        loop = self.loop
        inner_step, inner_prefills = loop._step, loop._continue_prefills

        def step() -> bool:
            with self._lock:
                want, rows = self._want, self._rows
            if want is None:
                return bool(inner_step())
            before = loop.stats.rows_stepped
            if want == "count":
                self.counter.start()
            started = time.perf_counter()
            try:
                progressed = inner_step()
            finally:
                if want == "count":
                    self.counter.stop()
            seconds = time.perf_counter() - started
            if loop.stats.rows_stepped - before == rows:  # a full step of the N rows: keep it
                with self._lock:
                    self._want = None
                if want == "count":
                    self.result = (sum(self.counter.ops.values()), self.counter.h2d, self.counter.d2h,
                                   dict(self.counter.ops.most_common(12)))  # fmt: skip
                    self.breakdown = (Counter(self.counter.ops), Counter(self.counter.origins or {}))
                else:
                    self.result = seconds
                self._done.set()
            return bool(progressed)

        def prefills() -> bool:
            self._in_prompts = True
            try:
                return bool(inner_prefills())
            finally:
                self._in_prompts = False

        loop._step = step
        loop._continue_prefills = prefills
        layers = engine.tts_model.model.talker.model.layers

        def forward_hook(module: Any, args: Any) -> None:
            if self._in_prompts:
                self.prompt_forwards += 1

        layers[0].register_forward_pre_hook(forward_hook)

    def next_step(self, what: str, rows: int, timeout: float = 1800) -> Any:
        self._done.clear()
        with self._lock:
            self._want, self._rows = what, rows
        if not self._done.wait(timeout):
            raise TimeoutError(f"no full step of {rows} rows within {timeout} s")
        return self.result


def build_requests(engine: Any, n: int, *, seed0: int) -> list[Any]:
    from qwen3_testing import noise_clip

    from speakwire.engines.base import SynthesisRequest

    clip = noise_clip(2.0, seed=5)
    requests = []
    for i in range(n):
        request = SynthesisRequest(ref_audio=clip, x_vector_only_mode=True, seed=seed0 + i, max_new_tokens=200)
        requests.append(engine.prepare(engine.validate(request)))
    return requests


def start_rows(engine: Any, requests: list[Any]) -> list[Any]:
    """Open every row in one loop turn (the loop thread waits on the lock meanwhile)."""
    rows = []
    with engine.loop._cond:
        for req in requests:
            row = engine.open_row(req)
            row.feed(TEXT)
            row.finish()
            rows.append(row)
    return rows


def wait_first_frames(rows: list[Any], timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while any(row.events.qsize() == 0 for row in rows):
        if time.monotonic() > deadline:
            raise TimeoutError("rows did not start")
        time.sleep(0.01)


def end_rows(engine: Any, rows: list[Any]) -> None:
    for row in rows:
        row.cancel()
    if not engine.loop.wait_idle(timeout=600):
        raise TimeoutError("the loop did not go idle")


def profile_rows(engine: Any, probe: LoopProbe, n: int, timed_steps: int) -> dict[str, Any]:
    tests_on_path()
    from oracle.eager_step import eager_steps

    # The eager reference replaces the loop's step only while the loop is idle: a round of rows of its own.
    with eager_steps(engine.loop):
        rows = start_rows(engine, build_requests(engine, n, seed0=100))
        try:
            wait_first_frames(rows)
            probe.next_step("time", n)  # warm
            ops_eager, h2d_eager, d2h_eager, top_eager = probe.next_step("count", n)
        finally:
            end_rows(engine, rows)
    rows = start_rows(engine, build_requests(engine, n, seed0=100))
    try:
        wait_first_frames(rows)
        probe.next_step("time", n)  # warm
        ops_static, h2d, d2h, top_static = probe.next_step("count", n)
        by_name, by_origin = probe.breakdown
        host_ms = 1000 * sum(probe.next_step("time", n) for _ in range(timed_steps)) / timed_steps
    finally:
        end_rows(engine, rows)
    return {
        "ops_eager": ops_eager,
        "ops_static": ops_static,
        "h2d_per_step": h2d,
        "d2h_per_step": d2h,
        "host_ms_static": round(host_ms, 1),
        "_detail": {
            "h2d_eager": h2d_eager,
            "d2h_eager": d2h_eager,
            "top_ops_eager": top_eager,
            "top_ops_static": top_static,
            **({"breakdown_static": breakdown(by_name, by_origin)} if by_origin else {}),
        },
    }


def breakdown(by_name: Counter[str], by_origin: Counter[str]) -> dict[str, Any]:
    """The static step's ops by name, by stage (talker, predictor, sampling, glue) and by stage/part/op."""
    stages: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    for key, n in by_origin.items():
        where, _ = key.split(" ")
        stages[where.split("/")[0]] += n
        parts[where] += n
    return {"by_op": dict(by_name.most_common()), "by_stage": dict(stages.most_common()),
            "by_part": dict(parts.most_common()), "by_part_op": dict(by_origin.most_common())}  # fmt: skip


def burst16(engine: Any, probe: LoopProbe) -> int:
    requests = build_requests(engine, 16, seed0=500)  # prompts encoded before the burst
    probe.prompt_forwards = 0
    rows = start_rows(engine, requests)
    try:
        wait_first_frames(rows)
        return probe.prompt_forwards
    finally:
        end_rows(engine, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--arch", action="append", choices=("0.6B", "1.7B"), help="repeatable; default 0.6B")
    parser.add_argument("--rows", action="append", help="batch sizes, repeatable or comma-separated; default 16")
    parser.add_argument("--max-len", type=int, default=256, help="talker positions per slot (KV memory)")
    parser.add_argument("--timed-steps", type=int, default=3)
    parser.add_argument("--dtype", default="float32", help="model dtype (bfloat16: what CUDA runs by default)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--checkpoints", type=Path, default=Path("/tmp/speakwire-qwen3-arch"),
                        help="where the random checkpoints are built (reused when present)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object per arch x rows, nothing else")
    parser.add_argument("--breakdown", action="store_true",
                        help="also print the static step's ops by name and by origin (stderr)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write results.json and results.md here")
    parser.add_argument("--label", default="", help="a note for results.md (e.g. the commit)")
    args = parser.parse_args(argv)
    archs = args.arch or ["0.6B"]
    levels = sorted({int(n) for item in (args.rows or ["16"]) for n in str(item).split(",") if n})

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("speakwire").setLevel(logging.ERROR)
    import torch

    tests_on_path()
    from qwen3_testing import steer_eos

    from speakwire.bench.qwen3.random_checkpoint import build_random_checkpoint
    from speakwire.engines.qwen3 import load_qwen3_engine

    torch.set_num_threads(args.threads)
    machine = describe(torch_device="cpu")
    results = []
    for arch in archs:
        name = f"{arch}-Base"
        path = args.checkpoints / name
        if not (path / "config.json").exists():
            args.checkpoints.mkdir(parents=True, exist_ok=True)
            build_random_checkpoint(args.checkpoints, name, device="cpu", dtype=torch.float32)
        slots = max(16, *levels)
        engine = load_qwen3_engine(str(path), device="cpu", dtype=args.dtype, max_batch=slots, max_len=args.max_len)
        if engine.loop.slots < slots:
            raise SystemExit(f"only {engine.loop.slots} KV slots fit the CPU budget at --max-len {args.max_len}; "
                             f"{slots} are needed: lower --max-len")  # fmt: skip
        engine.loop.max_lead_s = 0.0  # every ready row steps: the batch is exactly N
        probe = LoopProbe(engine)
        if args.breakdown:
            probe.counter.origins = Counter()
        probe.counter.install()
        try:
            with steer_eos(engine, after=None):
                burst = burst16(engine, probe)
                for n in levels:
                    record = {"arch": arch, "rows": n, **profile_rows(engine, probe, n, args.timed_steps),
                              "burst16_prefill_forwards": burst}  # fmt: skip
                    detail = record.pop("_detail")
                    results.append({**record, "detail": detail})
                    if "breakdown_static" in detail:
                        print(json.dumps(detail["breakdown_static"], indent=1), file=sys.stderr, flush=True)
                    if args.json:
                        print(json.dumps(record), flush=True)
                    else:
                        print(json.dumps(record), detail, file=sys.stderr, flush=True)
        finally:
            probe.counter.uninstall()
            engine.close()
    if args.out:
        save(args.out, machine, results, args)
    return 0


def save(out: Path, machine: dict[str, Any], results: list[dict[str, Any]], args: Any) -> None:
    document = {"machine": machine, "max_len": args.max_len, "dtype": args.dtype, "label": args.label,
                "results": results}  # fmt: skip
    lines = [
        "# Qwen3 loop step profile (random weights, published architectures, CPU)",
        "",
        f"{args.label}" if args.label else "",
        f"{one_line(machine)}; x-vector voice-cloning rows, EOS steered off. "
        "`python -m bench.qwen3.step_profile --arch A --rows N`.",
        "",
        "| arch | rows | ops eager | ops static | h2d/step | d2h/step | host ms/step (static) "
        "| burst-16 prefill forwards |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['arch']} | {r['rows']} | {r['ops_eager']} | {r['ops_static']} | {r['h2d_per_step']} | "
                     f"{r['d2h_per_step']} | {r['host_ms_static']} | {r['burst16_prefill_forwards']} |")  # fmt: skip
    write_results(out, document, "\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
