"""How many utterances fit at once: KV slots sized from the memory the process may use.

On CUDA the budget is the share of the GPU this process may take (``--gpu-memory-utilization``,
default 0.9) minus what the weights already hold and a reserve for activations and the
codec decoder. Code2wav's batch is capped from what is left once the loop is loaded
(``decode_free_bytes``; ``DecodeBatcher.fit_to_memory``). On CPU the KV cache gets at most
``CPU_KV_BUDGET`` bytes. Each slot holds ``max_len`` positions, enough for the longest prompt plus the
longest frame budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speakwire.engines.qwen3.kv_slots import kv_bytes_per_token

DEFAULT_MAX_LEN = 4096
"""Positions per slot: prompts (instructions, up to 30 s of ICL reference ≈ 400) plus 2048 frames fit."""
DEFAULT_MAX_SLOTS = 64
CPU_KV_BUDGET = 4 * 2**30
GPU_RESERVE_BYTES = 2 * 2**30
GPU_RESERVE_SHARE = 0.05
DEFAULT_GPU_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    slots: int
    max_len: int
    bytes_per_slot: int
    kv_budget: int
    weights: int
    device_total: int | None

    def describe(self) -> str:
        gib = 2**30
        total = "" if self.device_total is None else f" of {self.device_total / gib:.1f} GiB"
        return (
            f"KV cache {self.slots} slots × {self.max_len} positions "
            f"({self.bytes_per_slot / 2**20:.1f} MiB per slot, {self.slots * self.bytes_per_slot / gib:.2f} GiB; "
            f"budget {self.kv_budget / gib:.2f} GiB{total}; weights {self.weights / gib:.2f} GiB) "
            f"→ {self.slots} concurrent streams"
        )


def plan_memory(
    torch: Any,
    tts: Any,
    *,
    device: str,
    dtype: Any,
    max_batch: int | None = None,
    max_len: int | None = None,
    memory_share: float | None = None,
) -> MemoryPlan:
    """Slots and positions per slot for this checkpoint on this device."""
    config = tts.model.talker.config
    max_len = min(max_len or DEFAULT_MAX_LEN, int(config.max_position_embeddings))
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    per_slot = kv_bytes_per_token(config, dtype_bytes) * max_len
    weights = sum(int(p.numel()) * int(p.element_size()) for p in tts.model.parameters())
    cap = max_batch or DEFAULT_MAX_SLOTS
    total: int | None = None
    if device.startswith("cuda"):
        index = torch.device(device).index
        total = int(torch.cuda.get_device_properties(index or 0).total_memory)
        allowed = total * (memory_share or DEFAULT_GPU_SHARE)
        in_use = int(torch.cuda.memory_allocated(index))
        budget = int(allowed - in_use - GPU_RESERVE_BYTES - GPU_RESERVE_SHARE * total)
    else:
        budget = CPU_KV_BUDGET
    slots = max(1, min(cap, budget // per_slot)) if budget > 0 else 1
    return MemoryPlan(int(slots), max_len, per_slot, max(budget, 0), weights, total)


def decode_free_bytes(torch: Any, device: str, memory_share: float | None = None) -> int:
    """CUDA, once the weights, KV cache and step graphs are in place: what code2wav's batches may take.

    The process's share of the device minus what the caching allocator already holds (reserved, not just
    allocated: blocks cached for the loop's stream are not the decode stream's to reuse), minus
    ``GPU_RESERVE_SHARE`` of the device kept for the loop's own activations (prefill, eager steps).
    """
    index = torch.device(device).index
    total = int(torch.cuda.get_device_properties(index or 0).total_memory)
    allowed = total * (memory_share or DEFAULT_GPU_SHARE)
    return int(allowed - int(torch.cuda.memory_reserved(index)) - GPU_RESERVE_SHARE * total)
