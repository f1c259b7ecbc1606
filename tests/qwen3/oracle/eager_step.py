"""The loop's reference step: the package's layers over ``SlotKVCache``, each row's state gathered per step.

``eager_steps(loop)`` makes a ``GenerationLoop`` step this way instead of with ``StaticStep`` (index tensors
built from host lists, per-layer gathers, one host copy per row); ``static_predictor(talker)`` runs its code
predictor over static per-bucket buffers instead (``predictor_graph``). For the same rows both must give exactly
the codes of the static step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from speakwire.engines.qwen3.batched_talker import BatchedTalker
from speakwire.engines.qwen3.sampling import MIN_NEW_TOKENS, Sampling, draw_noise, sample_rows

from .predictor_graph import PredictorGraphs, predictor_logits

_static: dict[int, PredictorGraphs] = {}
"""Static predictors per talker (by id), once ``static_predictor`` ran."""


@contextlib.contextmanager
def eager_steps(loop: Any) -> Iterator[None]:
    """The loop steps with the eager reference while inside (from its next step on)."""
    assert loop.wait_idle(timeout=60)
    loop._advance = lambda rows: advance_eager(loop, rows)
    try:
        yield
    finally:
        assert loop.wait_idle(timeout=300)
        del loop._advance


def static_predictor(talker: BatchedTalker, *, capture: bool = False) -> float:
    """The eager step's code predictor runs over static buffers per batch bucket (CUDA graphs with ``capture``)."""
    graphs = PredictorGraphs(talker._tts, talker.cache.slots)
    seconds = graphs.capture() if capture else 0.0
    _static[id(talker)] = graphs
    return seconds


def advance_eager(loop: Any, rows: list[Any]) -> None:
    torch, talker, state = loop._torch, loop.talker, loop.state
    device = loop._device
    index = torch.tensor([a.slot for a in rows], device=device)
    first = state.next_code[index]
    past = state.past_hidden[index]
    residuals = predict_residuals(
        talker, past, first, [a.row.sampling.predictor for a in rows], [a.generator for a in rows]
    )
    frames = torch.cat((first.unsqueeze(1), residuals), dim=1)

    text = torch.cat([loop._text_at(a) for a in rows], dim=0)
    embeds = embed_codes(talker, frames) + text
    logits, hidden = decode(talker, [a.slot for a in rows], [a.length for a in rows], embeds)
    seen = state.seen[index]
    blocked = torch.tensor([a.frames < MIN_NEW_TOKENS for a in rows], device=device)
    codes = sample_rows(
        torch,
        logits,
        [a.row.sampling.talker for a in rows],
        [a.generator for a in rows],
        seen=seen,
        banned=loop._banned,
        eos_blocked=blocked,
        eos=loop._eos,
    )
    state.next_code[index] = codes
    state.past_hidden[index] = hidden
    state.seen[index, codes] = True
    state.length[index] += 1
    state.frames[index] += 1
    next_codes = codes.tolist()
    loop._emit(rows, [frames[i] for i in range(len(rows))], loop.step_events.record(), next_codes)
    loop._finish_step(rows, next_codes)


def embed_codes(talker: BatchedTalker, frames: Any) -> Any:
    """(B, 1, D): a frame's 16 codebook embeddings summed (what the talker reads back)."""
    torch = talker._torch
    parts = [talker._talker.get_input_embeddings()(frames[:, :1])]
    embeddings = talker._predictor.get_input_embeddings()
    parts += [embeddings[i](frames[:, i + 1 : i + 2]) for i in range(talker.codebooks - 1)]
    return torch.cat(parts, dim=1).sum(1, keepdim=True)


def decode(talker: BatchedTalker, slots: list[int], positions: list[int], embeds: Any) -> tuple[Any, Any]:
    """One talker step for B rows: ``embeds`` (B, 1, D) at each row's own position."""
    torch = talker._torch
    talker.cache.plan_decode(slots, positions)
    device = embeds.device
    where = torch.tensor(positions, device=device)
    position_ids = where.view(1, -1, 1).expand(3, -1, -1)
    mask = None
    if min(positions) != max(positions):
        keys = torch.arange(max(positions) + 1, device=device)
        mask = (keys[None, :] <= where[:, None]).view(len(slots), 1, 1, -1)
    hidden = talker._layers(embeds, position_ids, mask)
    return talker._logits(hidden), hidden[:, -1:, :]


def predict_residuals(
    talker: BatchedTalker, past_hidden: Any, first_codes: Any, settings: list[Sampling], generators: list[Any]
) -> Any:
    """Codebooks 1..15 for each row's frame: (B, 15) long, sampled with each row's subtalker settings.

    Each codebook is one ``predictor_logits`` forward, without ``generate``'s per-call set-up.
    """
    torch = talker._torch
    predictor = talker._predictor
    model = predictor.model
    vocab = int(predictor.config.vocab_size)
    noise = draw_noise(torch, (talker.codebooks - 1, vocab), settings, generators, device=past_hidden.device)
    graphs = _static.get(id(talker))
    static = graphs.for_batch(len(settings), settings) if graphs is not None else None
    if static is not None:
        static.load(past_hidden, first_codes, settings, noise)
        return static.run()[: len(settings)].clone()
    cache = _GrowingCache()
    inputs = torch.cat((past_hidden, talker._talker.get_input_embeddings()(first_codes.unsqueeze(1))), dim=1)
    codes: list[Any] = []
    position = 0
    for step in range(talker.codebooks - 1):
        if step:
            inputs = model.get_input_embeddings()[step - 1](codes[-1].unsqueeze(1))
        length = inputs.shape[1]
        positions = torch.arange(position, position + length, device=inputs.device).unsqueeze(0)
        logits = predictor_logits(torch, predictor, inputs, positions, cache, step)
        position += length
        codes.append(sample_rows(torch, logits, settings, generators, noise=noise[:, step]))
    return torch.stack(codes, dim=1)


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
