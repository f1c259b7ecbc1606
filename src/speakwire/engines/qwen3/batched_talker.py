"""The talker and its code predictor as batched steps over many utterances at different positions.

``prefill`` runs one row's prompt (or a chunk of it) into its KV slot, ``prefill_rows`` the
next chunks of several rows' prompts in one padded forward, each into its own slot from its
own position. The step itself is ``static_step``'s (the eager reference step, which used the
rest of this class, lives in the tests: ``tests/qwen3/oracle``).

The package's own modules do the arithmetic (decoder layers, norms, rotary embedding, heads),
so the numbers are the package's numbers. Logits are taken over all positions and cast to
float32 before the last one is picked, as ``generate`` does.
"""

from __future__ import annotations

from typing import Any

from speakwire.engines.qwen3.kv_slots import SlotKVCache


class BatchedTalker:
    """Batched forward passes of one checkpoint's talker over a ``SlotKVCache``."""

    def __init__(self, tts: Any, cache: SlotKVCache) -> None:
        import torch

        self._torch = torch
        check_attention(tts)
        self._talker = tts.model.talker
        self._model = tts.model.talker.model
        self._predictor = tts.model.talker.code_predictor
        self.cache = cache
        self.codebooks = int(tts.model.config.talker_config.num_code_groups)
        self._tts = tts

    def prefill(self, slot: int, embeds: Any, start: int) -> tuple[Any, Any]:
        """Run ``embeds`` (1, n, D) into ``slot`` from ``start``: (logits (1, V) float32, hidden (1, 1, D))."""
        torch = self._torch
        length = embeds.shape[1]
        self.cache.plan_prefill(slot, start, length)
        positions = torch.arange(start, start + length, device=embeds.device).view(1, 1, -1).expand(3, 1, -1)
        mask = None
        if start:
            # A later chunk of a long prompt: causal over everything written so far.
            keys = torch.arange(start + length, device=embeds.device)
            mask = (keys[None, :] <= positions[0, 0, :, None]).view(1, 1, length, start + length)
        hidden = self._layers(embeds, positions, mask)
        return self._logits(hidden), hidden[:, -1:, :]

    def prefill_rows(self, slots: list[int], chunks: list[Any], starts: list[int]) -> tuple[Any, Any]:
        """Several rows' prompt chunks (each (1, n_r, D)) in one forward, padded to the longest, each into its own
        slot from its own start: (logits (B, V) float32 and hidden (B, 1, D) at each row's last position)."""
        torch = self._torch
        lengths = [int(chunk.shape[1]) for chunk in chunks]
        longest = max(lengths)
        device = chunks[0].device
        embeds = torch.cat(
            [torch.nn.functional.pad(chunk, (0, 0, 0, longest - chunk.shape[1])) for chunk in chunks], dim=0
        )
        self.cache.plan_prefill_rows(slots, starts, lengths)
        positions = torch.arange(longest, device=device).unsqueeze(0) + torch.tensor(starts, device=device)[:, None]
        span = max(start + length for start, length in zip(starts, lengths, strict=True))
        keys = torch.arange(span, device=device)
        mask = (keys[None, None, :] <= positions[:, :, None]).view(len(chunks), 1, longest, span)
        hidden = self._layers(embeds, positions.unsqueeze(0).expand(3, -1, -1), mask)
        self.cache.end_forward()
        logits = self._talker.codec_head(hidden).to(dtype=torch.float32)
        rows = torch.arange(len(chunks), device=device)
        last = torch.tensor(lengths, device=device) - 1
        return logits[rows, last], hidden[rows, last].unsqueeze(1)

    def _layers(self, embeds: Any, position_ids: Any, mask: Any) -> Any:
        model = self._model
        embeddings = model.rotary_emb(embeds, position_ids)
        hidden = embeds
        for layer in model.layers:
            hidden = layer(
                hidden,
                attention_mask=mask,
                position_ids=position_ids[0],
                past_key_values=self.cache,
                use_cache=True,
                position_embeddings=embeddings,
            )[0]
        return model.norm(hidden)

    def _logits(self, hidden: Any) -> Any:
        return self._talker.codec_head(hidden)[:, -1, :].to(dtype=self._torch.float32)


def check_attention(tts: Any) -> None:
    """The talker and code predictor must run SDPA: the package's eager attention would drop causality in prefill.

    The package's eager attention adds the mask only when one is given, and the prefill passes none (a causal
    prompt is SDPA's ``is_causal``), so an eager model would let every prompt position see the future.
    """
    talker = tts.model.talker
    for name, config in (("talker", talker.config), ("code predictor", talker.code_predictor.config)):
        implementation = getattr(config, "_attn_implementation", None)
        if implementation != "sdpa":
            raise ValueError(
                f"qwen3: the {name} runs attention implementation {implementation!r}; the generation loop needs "
                "'sdpa' (load the model with attn_implementation='sdpa')"
            )
