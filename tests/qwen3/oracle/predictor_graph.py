"""The code predictor's 15-codebook loop over static buffers, one per batch bucket: capturable as a CUDA graph.

Per frame the code predictor runs 15 small forwards (5 layers each) with sampling in between: about a
thousand kernel launches, which on a GPU cost more than the arithmetic. ``StaticPredictor`` does the same
work over fixed tensors — inputs, per-row sampling settings, the frame's pre-drawn noise, a 16-position KV
cache, the output codes — so the whole loop can be recorded once as a CUDA graph and replayed with one
launch. Rows beyond the live batch are padding: computed, never read.

It computes what ``BatchedTalker.predict_residuals`` computes, op for op (the tests run it eagerly on CPU
and compare); the only restriction is top-p, which it does not implement: a batch with a row that uses
top-p < 1 takes the eager path.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from speakwire.engines.qwen3.sampling import Sampling

logger = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def predictor_logits(torch: Any, predictor: Any, inputs: Any, positions: Any, cache: Any, step: int) -> Any:
    """One code-predictor forward for codebook ``step + 1``: last-position logits (B, V) in float32.

    Its decoder layers run directly, as ``generate`` runs them (no mask: a causal prompt of two positions,
    then one position per codebook), with ``cache`` taking each layer's keys and values.
    """
    model = predictor.model
    hidden = predictor.small_to_mtp_projection(inputs)
    embeddings = model.rotary_emb(hidden, positions)
    for layer in model.layers:
        hidden = layer(
            hidden,
            attention_mask=None,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            position_embeddings=embeddings,
        )[0]
    hidden = model.norm(hidden)
    return predictor.lm_head[step](hidden)[:, -1, :].to(dtype=torch.float32)


class _StaticCache:
    """16 positions of keys and values per layer; ``update`` writes at ``position`` and returns what is written."""

    def __init__(self, keys: list[Any], values: list[Any]) -> None:
        self.keys = keys
        self.values = values
        self.position = 0

    def update(self, key: Any, value: Any, layer_idx: int, cache_kwargs: Any = None) -> tuple[Any, Any]:
        end = self.position + key.shape[-2]
        self.keys[layer_idx][:, :, self.position : end] = key
        self.values[layer_idx][:, :, self.position : end] = value
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]


class StaticPredictor:
    """The predictor loop for ``batch`` rows over static tensors; ``run`` is eager, ``capture`` makes it a graph."""

    def __init__(self, tts: Any, batch: int) -> None:
        import torch

        self._torch = torch
        talker = tts.model.talker
        self._talker = talker
        self._predictor = talker.code_predictor
        config = self._predictor.config
        device, dtype = talker.device, talker.dtype
        self.batch = batch
        self.codebooks = int(tts.model.config.talker_config.num_code_groups)
        self.vocab = int(config.vocab_size)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_shape = (batch, config.num_key_value_heads, self.codebooks, head_dim)
        layers = int(config.num_hidden_layers)
        self._cache = _StaticCache(
            [torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(layers)],
            [torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(layers)],
        )
        self.past_hidden = torch.zeros((batch, 1, talker.config.hidden_size), device=device, dtype=dtype)
        self.first = torch.zeros(batch, dtype=torch.long, device=device)
        self.noise = torch.ones((batch, self.codebooks - 1, self.vocab), device=device)
        self.temperature = torch.ones((batch, 1), device=device)
        self.top_k = torch.full((batch, 1), self.vocab, dtype=torch.long, device=device)
        self.sampled = torch.zeros((batch, 1), dtype=torch.bool, device=device)
        self.codes = torch.zeros((batch, self.codebooks - 1), dtype=torch.long, device=device)
        self._positions = [torch.arange(2, device=device).unsqueeze(0)] + [
            torch.tensor([[step + 1]], device=device) for step in range(1, self.codebooks - 1)
        ]
        self._graph: Any = None

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def load(self, past_hidden: Any, first: Any, settings: list[Sampling], noise: Any) -> None:
        """Copy a live batch of ``len(settings)`` ≤ ``batch`` rows into the static inputs."""
        torch = self._torch
        n = len(settings)
        self.past_hidden[:n].copy_(past_hidden)
        self.first[:n].copy_(first)
        self.noise[:n].copy_(noise)
        device = self.first.device
        self.temperature[:n].copy_(torch.tensor([[s.temperature] for s in settings], device=device))
        self.top_k[:n].copy_(torch.tensor([[min(s.top_k, self.vocab) or self.vocab] for s in settings], device=device))
        self.sampled[:n].copy_(torch.tensor([[s.do_sample] for s in settings], device=device))

    def run(self) -> Any:
        """The 15 codebooks for every static row: (batch, 15) long (also left in ``codes``)."""
        if self._graph is not None:
            self._graph.replay()
            return self.codes
        return self._body()

    def capture(self) -> float:
        """Record ``run`` as a CUDA graph (after warm-up runs on a side stream); returns the seconds it took."""
        torch = self._torch
        started = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # code2wav may run meanwhile
            self._body()
        self._graph = graph
        return time.perf_counter() - started

    def _body(self) -> Any:
        torch = self._torch
        predictor, model, cache = self._predictor, self._predictor.model, self._cache
        inputs = torch.cat((self.past_hidden, self._talker.get_input_embeddings()(self.first.unsqueeze(1))), dim=1)
        cache.position = 0
        for step in range(self.codebooks - 1):
            if step:
                inputs = model.get_input_embeddings()[step - 1](self.codes[:, step - 1 : step])
            logits = predictor_logits(torch, predictor, inputs, self._positions[step], cache, step)
            cache.position += inputs.shape[1]
            self.codes[:, step] = self._sample(logits, step)
        return self.codes

    def _sample(self, logits: Any, step: int) -> Any:
        """``sample_rows`` for the predictor (no penalty, no top-p) with static per-row settings."""
        torch = self._torch
        greedy = torch.argmax(logits, dim=-1)
        scores = logits / self.temperature
        ordered = torch.sort(scores, dim=-1, descending=True).values
        kth = ordered.gather(1, self.top_k - 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
        picks = torch.argmax(torch.softmax(scores, dim=-1) / self.noise[:, step], dim=-1)
        return torch.where(self.sampled[:, 0], picks, greedy)


class PredictorGraphs:
    """Static predictors for the batch buckets up to ``slots``; CUDA graphs on a GPU once ``capture`` ran."""

    def __init__(self, tts: Any, slots: int) -> None:
        self._predictors = {b: StaticPredictor(tts, b) for b in BUCKETS if b <= slots}
        if slots not in self._predictors and slots > max(self._predictors):
            self._predictors[slots] = StaticPredictor(tts, slots)

    def capture(self) -> float:
        """Capture every bucket; returns the total seconds."""
        seconds = sum(predictor.capture() for predictor in self._predictors.values())
        logger.info("qwen3: captured CUDA graphs of the code predictor for batches %s in %.2f s",
                    sorted(self._predictors), seconds)  # fmt: skip
        return seconds

    def for_batch(self, rows: int, settings: list[Sampling]) -> StaticPredictor | None:
        """The smallest bucket that holds ``rows``, or None when one is missing or a row needs top-p."""
        if any(s.top_p < 1.0 for s in settings):
            return None
        fits = [b for b in self._predictors if b >= rows]
        return self._predictors[min(fits)] if fits else None
