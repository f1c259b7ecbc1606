"""The talker and its code predictor as batched steps over many utterances at different positions.

``prefill`` runs one row's prompt (or a chunk of it) into its KV slot. ``decode`` advances
every given row by one talker position in one forward: the rows' new keys and values go to
their own slots at their own positions, and each row attends to its own prefix only.
``predict_residuals`` runs the code predictor's 15 steps for all rows at once; every row is
at the same inner position, so that is a plain batch with a fresh small cache per frame.

The package's own modules do the arithmetic (decoder layers, norms, rotary embedding, heads),
so the numbers are the package's numbers. Logits are taken over all positions and cast to
float32 before the last one is picked, as ``generate`` does.
"""

from __future__ import annotations

from typing import Any

from speakwire.engines.qwen3.kv_slots import SlotKVCache
from speakwire.engines.qwen3.predictor_graph import PredictorGraphs, predictor_logits
from speakwire.engines.qwen3.sampling import Sampling, draw_noise, sample_rows


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
        self.static: PredictorGraphs | None = None
        """Static predictors per batch bucket (CUDA graphs once captured); None: the eager loop."""

    def use_static_predictor(self, *, capture: bool) -> float:
        """Switch the code predictor to static buffers per batch bucket; ``capture`` records CUDA graphs.

        Returns the capture time in seconds. Call while no utterance is running (``GenerationLoop.wait_idle``).
        """
        graphs = PredictorGraphs(self._tts, self.cache.slots)
        seconds = graphs.capture() if capture else 0.0
        self.static = graphs
        return seconds

    def embed_codes(self, frames: Any) -> Any:
        """(B, 1, D): a frame's 16 codebook embeddings summed (what the talker reads back)."""
        torch = self._torch
        parts = [self._talker.get_input_embeddings()(frames[:, :1])]
        embeddings = self._predictor.get_input_embeddings()
        parts += [embeddings[i](frames[:, i + 1 : i + 2]) for i in range(self.codebooks - 1)]
        return torch.cat(parts, dim=1).sum(1, keepdim=True)

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

    def decode(self, slots: list[int], positions: list[int], embeds: Any) -> tuple[Any, Any]:
        """One talker step for B rows: ``embeds`` (B, 1, D) at each row's own position."""
        torch = self._torch
        self.cache.plan_decode(slots, positions)
        device = embeds.device
        where = torch.tensor(positions, device=device)
        position_ids = where.view(1, -1, 1).expand(3, -1, -1)
        mask = None
        if min(positions) != max(positions):
            keys = torch.arange(max(positions) + 1, device=device)
            mask = (keys[None, :] <= where[:, None]).view(len(slots), 1, 1, -1)
        hidden = self._layers(embeds, position_ids, mask)
        return self._logits(hidden), hidden[:, -1:, :]

    def predict_residuals(
        self, past_hidden: Any, first_codes: Any, settings: list[Sampling], generators: list[Any]
    ) -> Any:
        """Codebooks 1..15 for each row's frame: (B, 15) long, sampled with each row's subtalker settings.

        Each codebook is one ``predictor_logits`` forward, without ``generate``'s per-call set-up.
        """
        torch = self._torch
        predictor = self._predictor
        model = predictor.model
        vocab = int(predictor.config.vocab_size)
        noise = draw_noise(torch, (self.codebooks - 1, vocab), settings, generators, device=past_hidden.device)
        static = self.static.for_batch(len(settings), settings) if self.static is not None else None
        if static is not None:
            static.load(past_hidden, first_codes, settings, noise)
            return static.run()[: len(settings)].clone()
        cache = _GrowingCache()
        inputs = torch.cat((past_hidden, self._talker.get_input_embeddings()(first_codes.unsqueeze(1))), dim=1)
        codes: list[Any] = []
        position = 0
        for step in range(self.codebooks - 1):
            if step:
                inputs = model.get_input_embeddings()[step - 1](codes[-1].unsqueeze(1))
            length = inputs.shape[1]
            positions = torch.arange(position, position + length, device=inputs.device).unsqueeze(0)
            logits = predictor_logits(torch, predictor, inputs, positions, cache, step)
            position += length
            codes.append(sample_rows(torch, logits, settings, generators, noise=noise[:, step]))
        return torch.stack(codes, dim=1)

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


class _GrowingCache:
    """The code predictor's per-frame KV cache: at most 16 positions, appended to (the ``Cache.update`` call)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._layers: dict[int, tuple[Any, Any]] = {}

    def update(self, key: Any, value: Any, layer_idx: int, cache_kwargs: Any = None) -> tuple[Any, Any]:
        held = self._layers.get(layer_idx)
        if held is not None:
            key = self._torch.cat((held[0], key), dim=-2)
            value = self._torch.cat((held[1], value), dim=-2)
        self._layers[layer_idx] = (key, value)
        return key, value
