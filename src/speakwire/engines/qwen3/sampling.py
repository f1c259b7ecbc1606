"""Per-row sampling for a batch of talker (or code-predictor) logits, as Hugging Face ``generate`` samples.

Each row has its own settings and its own ``torch.Generator``. The logits are processed as
``generate`` processes them for the package's settings: repetition penalty over the row's
earlier codes, suppressed ids, no EOS before ``min_new_tokens``, then temperature, top-k and
top-p. Rows that sample draw with their own generator, one ``multinomial`` per row, so a
seeded row draws the same numbers alone or in any batch. It also draws them in the order
the package draws from the global generator (talker, then 15 code-predictor draws per frame),
so a solo row with seed *s* equals the package's ``generate`` after ``torch.manual_seed(s)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_NEW_TOKENS = 2
"""The package's ``min_new_tokens``: the first frame can never be EOS (empty audio otherwise)."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """One stage's sampling settings (the talker's, or the code predictor's "subtalker" settings)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0


@dataclass(frozen=True, slots=True)
class RowSampling:
    """A row's settings for both stages (the package's generate kwargs)."""

    talker: Sampling
    predictor: Sampling

    @classmethod
    def from_defaults(cls, defaults: dict[str, Any], *, greedy: bool = False) -> RowSampling:
        """From the checkpoint's ``generate_config.json`` defaults (what the package would use)."""

        def pick(name: str, fallback: Any) -> Any:
            return defaults.get(name, fallback)

        talker = Sampling(
            do_sample=not greedy and bool(pick("do_sample", True)),
            temperature=float(pick("temperature", 0.9)),
            top_k=int(pick("top_k", 50)),
            top_p=float(pick("top_p", 1.0)),
            repetition_penalty=float(pick("repetition_penalty", 1.05)),
        )
        predictor = Sampling(
            do_sample=not greedy and bool(pick("subtalker_dosample", True)),
            temperature=float(pick("subtalker_temperature", 0.9)),
            top_k=int(pick("subtalker_top_k", 50)),
            top_p=float(pick("subtalker_top_p", 1.0)),
        )
        return cls(talker, predictor)


def sample_rows(
    torch: Any,
    logits: Any,
    settings: list[Sampling],
    generators: list[Any],
    *,
    seen: Any = None,
    banned: Any = None,
    eos_blocked: Any = None,
    eos: int | None = None,
    noise: Any = None,
) -> Any:
    """Next token per row: a (B,) long tensor on the logits' device.

    Everything is batched except each sampling row's random draw. ``torch.multinomial`` draws one
    sample as ``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn from the generator; doing exactly that, with
    each row's ``q`` drawn from its own generator, gives the same token multinomial would.

    Args:
        logits: (B, V) float32 scores of the last position.
        settings, generators: one per row.
        seen: (B, V) bool, the codes a row has produced so far (repetition penalty), or None.
        banned: (V,) bool, ids never allowed (the package's suppress_tokens), or None.
        eos_blocked: (B,) bool, rows that may not end yet (fewer than ``MIN_NEW_TOKENS`` codes), or None.
        eos: the EOS id ``eos_blocked`` refers to.
        noise: (B, V) Exp(1) draws already made for this draw (``draw_noise``), or None to draw them here.
    """
    scores = logits
    penalties = [s.repetition_penalty for s in settings]
    if seen is not None and any(p != 1.0 for p in penalties):
        penalty = torch.tensor(penalties, device=scores.device, dtype=scores.dtype).unsqueeze(1)
        penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
        scores = torch.where(seen & (penalty != 1.0), penalized, scores)
    if eos_blocked is not None and eos is not None and bool(eos_blocked.any()):
        column = scores[:, eos]
        scores = scores.clone()
        scores[:, eos] = torch.where(eos_blocked, torch.full_like(column, float("-inf")), column)
    if banned is not None:
        scores = torch.where(banned, torch.full_like(scores, float("-inf")), scores)

    tokens = torch.argmax(scores, dim=-1)
    sampled = [i for i, s in enumerate(settings) if s.do_sample]
    if not sampled:
        return tokens
    every = len(sampled) == len(settings)
    rows = None if every else torch.tensor(sampled, device=scores.device)
    subset = scores if rows is None else scores.index_select(0, rows)
    probs = torch.softmax(_warp(torch, subset, [settings[i] for i in sampled]), dim=-1)
    if noise is None:
        noise = draw_noise(torch, probs.shape[-1:], settings, generators, device=probs.device)
    if rows is not None:
        noise = noise.index_select(0, rows)
    picks = torch.argmax(probs / noise, dim=-1)
    if rows is None:
        return picks
    tokens[rows] = picks
    return tokens


def draw_noise(torch: Any, shape: Any, settings: list[Sampling], generators: list[Any], *, device: Any) -> Any:
    """(B, *shape) Exp(1) draws, each sampling row's from its own generator in one call; greedy rows draw nothing.

    One call of ``shape`` (k, V) gives exactly the numbers of k calls of (V,) in a row (checked on CPU), so
    the code predictor draws a frame's 15 at once and still matches ``multinomial`` draw for draw.
    """
    noise = torch.ones((len(settings), *shape), device=device)
    for i, s in enumerate(settings):
        if s.do_sample:
            noise[i].exponential_(1, generator=generators[i])
    return noise


def _warp(torch: Any, scores: Any, settings: list[Sampling]) -> Any:
    """Temperature, top-k, top-p per row (B, V), with the HF warpers' arithmetic and tie rules."""
    device, dtype, vocab = scores.device, scores.dtype, scores.shape[-1]
    if any(s.temperature != 1.0 for s in settings):
        temperature = torch.tensor([s.temperature for s in settings], device=device, dtype=dtype)
        scores = scores / temperature.unsqueeze(1)
    if any(s.top_k for s in settings):
        ks = [min(s.top_k, vocab) if s.top_k else vocab for s in settings]
        ordered = torch.sort(scores, dim=-1, descending=True).values
        kth = ordered.gather(1, torch.tensor(ks, device=device).sub(1).unsqueeze(1))
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if any(s.top_p < 1.0 for s in settings):
        ordered, order = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        floor = torch.tensor([1 - s.top_p if s.top_p < 1.0 else -1.0 for s in settings], device=device, dtype=dtype)
        remove = cumulative <= floor.unsqueeze(1)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores
