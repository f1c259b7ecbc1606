"""The talker's KV cache as fixed per-slot buffers, so rows of different lengths decode in one batch.

Each utterance owns a slot: a (layers, kv_heads, max_len, head_dim) region of one buffer
allocated at startup. The talker's attention layers call ``update`` (the Hugging Face
``Cache`` method they already call); ``plan_prefill``/``plan_decode`` say beforehand
where this forward writes and which span it reads. A freed slot is reused as it is:
positions past a row's length are never read (the decode mask hides them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Bytes one token takes in the talker's KV cache (all layers, keys and values)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return int(config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * dtype_bytes)


@dataclass(slots=True)
class _Plan:
    slots: Any
    """(B,) long: slot per row."""
    start: Any
    """Decode: (B,) long write position per row. Prefill: an int (one row)."""
    span: int
    """Positions every row reads: 0..span-1."""
    contiguous: int | None
    """First slot when the rows hold consecutive slots (reads are then views, not copies)."""
    prefill: bool
    packed: list[tuple[int, int, int]] | None = None
    """Prefill of several rows' prompts in one forward: (slot, start, length) per batch row."""


class SlotKVCache:
    """Static KV buffers for ``slots`` utterances of up to ``max_len`` positions."""

    def __init__(self, torch: Any, config: Any, *, slots: int, max_len: int, dtype: Any, device: Any) -> None:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # One position more than ``max_len``: the scratch position where the static step's idle slots write.
        shape = (config.num_hidden_layers, slots, config.num_key_value_heads, max_len + 1, head_dim)
        self._torch = torch
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.slots = slots
        self.max_len = max_len
        self._plan: _Plan | None = None

    @property
    def nbytes(self) -> int:
        return int(self.keys.numel() * self.keys.element_size() * 2)

    def plan_prefill(self, slot: int, start: int, length: int) -> None:
        """The next forward writes positions start..start+length-1 of ``slot`` and reads 0..start+length-1."""
        if start + length > self.max_len:
            raise ValueError(f"prompt of {start + length} positions exceeds the slot length {self.max_len}")
        self._plan = _Plan(slot, start, start + length, slot, prefill=True)

    def plan_prefill_rows(self, slots: list[int], starts: list[int], lengths: list[int]) -> None:
        """The next forward runs B prompts (padded to the longest): row r writes ``lengths[r]`` positions of
        ``slots[r]`` from ``starts[r]`` and reads 0..max(start + length)-1 (its mask hides the rest)."""
        for start, length in zip(starts, lengths, strict=True):
            if start + length > self.max_len:
                raise ValueError(f"prompt of {start + length} positions exceeds the slot length {self.max_len}")
        span = max(start + length for start, length in zip(starts, lengths, strict=True))
        index = self._torch.tensor(slots, device=self.keys.device)
        self._plan = _Plan(index, 0, span, None, prefill=False, packed=list(zip(slots, starts, lengths, strict=True)))

    def plan_decode(self, slots: list[int], positions: list[int]) -> None:
        """The next forward writes one position per row and reads each row's 0..position."""
        torch = self._torch
        device = self.keys.device
        first = slots[0]
        contiguous = first if slots == list(range(first, first + len(slots))) else None
        self._plan = _Plan(
            torch.tensor(slots, device=device),
            torch.tensor(positions, device=device),
            max(positions) + 1,
            contiguous,
            prefill=False,
        )

    def end_forward(self) -> None:
        """The forward is over: drop its plan (and the index tensors it holds)."""
        self._plan = None

    def update(self, key: Any, value: Any, layer_idx: int, cache_kwargs: Any = None) -> tuple[Any, Any]:
        """Store this forward's keys/values; return every position the rows may attend to."""
        plan = self._plan
        assert plan is not None, "plan_prefill/plan_decode first"
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        if plan.packed is not None:
            for row, (slot, start, length) in enumerate(plan.packed):
                keys[slot, :, start : start + length] = key[row, :, :length]
                values[slot, :, start : start + length] = value[row, :, :length]
            return keys[plan.slots, :, : plan.span], values[plan.slots, :, : plan.span]
        if plan.prefill:
            slot, start = int(plan.slots), int(plan.start)
            keys[slot, :, start : plan.span] = key[0]
            values[slot, :, start : plan.span] = value[0]
            return keys[slot : slot + 1, :, : plan.span], values[slot : slot + 1, :, : plan.span]
        keys[plan.slots, :, plan.start] = key[:, :, 0]
        values[plan.slots, :, plan.start] = value[:, :, 0]
        if plan.contiguous is not None:
            rows = slice(plan.contiguous, plan.contiguous + key.shape[0])
            return keys[rows, :, : plan.span], values[rows, :, : plan.span]
        return keys[plan.slots, :, : plan.span], values[plan.slots, :, : plan.span]
