"""The loop's step as one static function over per-slot device buffers: graphable per batch bucket.

Everything a step needs lives on the device, one row per KV slot, written when a row is admitted
(``start_row``) and advanced by the step itself: the row's next first-codebook code, its last hidden
state, the codes it has produced (repetition penalty), its position, its frame count and its sampling
settings for both stages. A step runs over the slot prefix ``0..bucket-1`` (``BUCKETS``); the slots
that do not step this time (free, prefilling, waiting for text, sitting out) are computed and masked
out, so no state is gathered and no index is sent from the host. What the host does per step:

* marks the stepping slots in ``active`` (only when the set changed; ``fill_`` with a Python scalar, no
  copy from host memory), copies the rows' next text embeddings into ``text`` (device to device: one copy
  when the rows hold slots 0..n-1) and
  draws each sampling row's noise for the frame in one ``exponential_`` from the row's own generator
  into ``noise`` (15 code-predictor draws, then the talker's, in the order the package draws them);
* runs the step (``_body``: code predictor, codes read back into the talker, one talker decode,
  sampling) over the positions the rows hold, or replays the CUDA graph of its batch bucket and span bucket
  (``spans_for``: the positions a graph reads are fixed when it is captured);
* reads back one small tensor, ``out`` (the frame's 16 codes and the next code per slot).

The talker decode is written out here, with the package's weights and the package's arithmetic, in as few
ops as give the same numbers (each op is a kernel launch, and a node of the CUDA graph):

* every RMSNorm is one ``rms_norm`` (``package_rms_norm``; one fused kernel on CUDA; the weight a second
  op below float32, where the package rounds before applying it); queries and keys are normed and rotated
  together, with q, k and v from one matmul and the MLP's gate and up from another (``_MergedProjections``);
* the talker's rotary is a table of every position made at load, read with one ``index_select``; each row's
  keys and values are written in place at its own position of its own slot (``scatter_``) and read in place
  (the prefix of slots is a view); attention is ``scaled_dot_product_attention`` with native GQA
  (``enable_gqa``) and a per-row length mask, made additive once per step;
* the code predictor runs the package's layers, written out the same way, over a 16-position static cache
  with rotary tables made at load; the talker reads back the codebook embeddings the predictor looked up;
* sampling is ``sampling.sample_rows``'s arithmetic with per-slot settings; top-k takes the k-th value from
  ``topk`` (at most ``TOPK_CAP``; a larger k, or a top-p below 1, makes that step run eagerly with a full
  sort, never graphed); a greedy stage samples with temperature 1, top-k 1 and noise 1, which is argmax.

The step runs under inference mode (``_body``). Under it the dispatcher sees composite ops whole
(``rms_norm``, ``linear``, ``scaled_dot_product_attention``, ``softmax``), as CUDA runs them: one kernel
each. On CPU ``rms_norm`` still runs as its six-op composite; the profile
(``python -m bench.qwen3.step_profile --breakdown``) counts what the dispatcher sees.

The tests compare it with the eager reference step (``tests/qwen3/oracle/eager_step.py``) and with the
package's ``generate_*``: the same codes, greedy and sampled, in padded buckets, with rows joining,
leaving and cancelled.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from speakwire.engines.qwen3.sampling import MIN_NEW_TOKENS, RowSampling

logger = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
SPAN_FLOOR = 256
"""The shortest span a graph reads; the span buckets double from here up to the cache's length (``spans_for``).

Why buckets: a graph reads a fixed number of key positions. One graph per batch over the whole cache (4,096)
made every step read every slot's whole cache (28 GiB at 64 rows on 0.6B, an H200's 6 ms per step before any
math) and its masked attention, over other shapes than the eager step's, rounded differently: on an H200 the
graphed greedy codes left the eager ones after 1 frame of 40 (``bench/results/qwen3-gpu-h200/s13``)."""
TOPK_CAP = 64
"""Largest top-k a graphed step takes (the package's defaults are 50 for both stages)."""


def buckets_for(slots: int) -> tuple[int, ...]:
    return (*(b for b in BUCKETS if b < slots), slots)


def spans_for(max_len: int) -> tuple[int, ...]:
    """The spans graphs are captured at: ``SPAN_FLOOR`` doubled while below ``max_len``, then ``max_len``."""
    spans: list[int] = []
    span = SPAN_FLOOR
    while span < max_len:
        spans.append(span)
        span *= 2
    return (*spans, max_len)


class StaticStep:
    """Per-slot step state and the step over a slot prefix; ``capture`` records one CUDA graph per bucket."""

    def __init__(self, tts: Any, cache: Any, *, banned: Any, eos: int) -> None:
        import torch

        self._torch = torch
        talker = tts.model.talker
        self._talker = talker
        self._model = talker.model
        self._predictor = talker.code_predictor
        self._cache = cache
        config = talker.config
        pconfig = self._predictor.config
        device, dtype = talker.device, talker.dtype
        self.device = device
        slots = cache.slots
        self.slots = slots
        self.codebooks = int(tts.model.config.talker_config.num_code_groups)
        self.vocab = int(config.vocab_size)
        self.pvocab = int(pconfig.vocab_size)
        self.park = cache.max_len
        """The scratch position (the cache holds one more) where slots that do not step write."""
        self.eos = eos
        hidden = int(config.hidden_size)
        c = self.codebooks
        self.buckets = buckets_for(slots)
        self.spans = spans_for(cache.max_len)

        def zeros(*shape: int, dtype: Any = torch.float32) -> Any:
            return torch.zeros(shape, dtype=dtype, device=device)

        long, boolean = torch.long, torch.bool
        self.next_code = zeros(slots, dtype=long)
        self.past_hidden = zeros(slots, 1, hidden, dtype=dtype)
        self.seen = zeros(slots, self.vocab, dtype=boolean)
        self.length = torch.full((slots,), self.park, dtype=long, device=device)
        self.frames = zeros(slots, dtype=long)
        self.active = zeros(slots, dtype=boolean)
        self.text = zeros(slots, 1, hidden, dtype=dtype)
        self.noise = torch.ones((slots, (c - 1) * self.pvocab + self.vocab), device=device)
        self.out = zeros(slots, c + 1, dtype=long)
        # sampling settings per slot: talker (t_) and code predictor (p_); a greedy stage samples with
        # temperature 1, top-k 1 and noise 1, which picks the first maximal score: ``argmax``'s pick
        self.t_temperature, self.p_temperature = (
            torch.ones((slots, 1), device=device),
            torch.ones((slots, 1), device=device),
        )
        self.t_kth = zeros(slots, 1, dtype=long)
        self.p_kth = zeros(slots, 1, dtype=long)
        """Top-k as the index of the k-th largest score (k - 1)."""
        self.t_top_p = torch.full((slots, 1), -1.0, device=device)
        self.p_top_p = torch.full((slots, 1), -1.0, device=device)
        """Top-p floors: ``1 - top_p`` (computed in Python, as ``sample_rows`` does), -1 for none."""
        self.t_penalty = torch.ones((slots, 1), device=device)
        self.t_penalized = zeros(slots, 1, dtype=boolean)
        """Rows with a repetition penalty (``!= 1``)."""
        self._banned = banned
        self._eos_column = torch.arange(self.vocab, device=device) == eos
        self._key_positions = torch.arange(cache.max_len, device=device)
        self._minus_inf = torch.full((), float("-inf"), dtype=dtype, device=device)
        self._zero = torch.zeros((), dtype=dtype, device=device)
        # the talker's rotary: a table of every position (``_rotary``, the multimodal sections combined)
        attention = self._model.layers[0].self_attn
        self._mrope = (list(attention.rope_scaling["mrope_section"]), bool(attention.rope_scaling["interleaved"]))
        self._half = int(attention.head_dim) // 2
        with torch.no_grad():
            cos, sin = self._rotary(torch.zeros((1, 1, hidden), dtype=dtype, device=device),
                                    torch.arange(self.park + 1, device=device))  # fmt: skip
            self._talker_rotary = torch.cat((cos.transpose(1, 2), _signed_sin(torch, sin.transpose(1, 2))), dim=1)
        """(positions, 2, 1, hd): cos and signed sin of every talker position, the scratch one included, made
        at load by the per-step computation over all positions at once (each entry is the same elementwise
        arithmetic on one position: the step reads the same numbers with one ``index_select``)."""
        self._talker_qk = [_stacked_norm_weight(torch, layer.self_attn) for layer in self._model.layers]
        self._predictor_qk = [_stacked_norm_weight(torch, layer.self_attn) for layer in self._predictor.model.layers]
        self._talker_proj = [_MergedProjections(torch, layer) for layer in self._model.layers]
        self._predictor_proj = [_MergedProjections(torch, layer) for layer in self._predictor.model.layers]
        self._kv_heads = int(config.num_key_value_heads)
        self._head_dim = int(getattr(config, "head_dim", None) or hidden // config.num_attention_heads)
        # the code predictor: a 16-position cache per layer over all slots, rotary tables for its 15 forwards
        phead = int(getattr(pconfig, "head_dim", None) or pconfig.hidden_size // pconfig.num_attention_heads)
        self._phead = phead
        pshape = (slots, int(pconfig.num_key_value_heads), c, phead)
        layers = int(pconfig.num_hidden_layers)
        self._pkeys = [torch.zeros(pshape, dtype=dtype, device=device) for _ in range(layers)]
        self._pvalues = [torch.zeros(pshape, dtype=dtype, device=device) for _ in range(layers)]
        self._ppositions = [torch.arange(2, device=device).unsqueeze(0)] + [
            torch.full((1, 1), step + 1, dtype=long, device=device) for step in range(1, c - 1)
        ]
        probe = torch.zeros((1, 1, int(pconfig.hidden_size)), dtype=dtype, device=device)
        rotary = self._predictor.model.rotary_emb
        self._protary = []
        for positions in self._ppositions:
            cos, sin = rotary(probe, positions)  # (1, L, hd): heads go between L and hd
            self._protary.append((cos.unsqueeze(2), _signed_sin(torch, sin.unsqueeze(2))))
        self._embed_first = talker.get_input_embeddings()
        self._embed_rest = self._predictor.get_input_embeddings()
        self._host: Any = None
        self._event: Any = None
        if str(device).startswith("cuda"):
            self._host = torch.zeros((slots, c + 1), dtype=long, pin_memory=True)
            self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._graphs: dict[tuple[int, int], Any] = {}
        """(batch bucket, span bucket) -> its CUDA graph."""
        self.pad_spans = False
        """Eager steps read their span bucket's positions, as graphed ones do (always so once graphs exist): a
        check compares eager steps with graphs on the same shapes by setting it before capture."""
        self.padded_steps = 0
        """Steps that read more positions than their rows hold (a span bucket's padding)."""
        self._active_slots: tuple[int, ...] = ()

    # ----- admission -------------------------------------------------------------------------------

    def start_row(self, slot: int, sampling: RowSampling, hidden: Any, code: Any, length: int) -> None:
        """A row's prompt is done: its last hidden state (1, 1, D), first code (1,) and position go to its slot."""
        talker, predictor = sampling.talker, sampling.predictor
        self.past_hidden[slot].copy_(hidden[0])
        self.next_code[slot].copy_(code[0])
        seen = self.seen[slot]
        seen.zero_()
        seen.scatter_(0, code, True)
        self.length[slot].fill_(length)
        self.frames[slot].fill_(0)
        self.t_penalty[slot].fill_(talker.repetition_penalty)
        self.t_penalized[slot].fill_(talker.repetition_penalty != 1.0)
        split = (self.codebooks - 1) * self.pvocab
        noise = self.noise[slot]
        stages = ((talker, self.vocab, self.t_temperature, self.t_kth, self.t_top_p, noise[split:]),
                  (predictor, self.pvocab, self.p_temperature, self.p_kth, self.p_top_p, noise[:split]))  # fmt: skip
        for stage, vocab, temperature, kth, top_p, draws in stages:
            if stage.do_sample:
                temperature[slot].fill_(stage.temperature)
                kth[slot].fill_((min(stage.top_k, vocab) or vocab) - 1)
                top_p[slot].fill_(1 - stage.top_p if stage.top_p < 1.0 else -1.0)
            else:  # greedy: the top score, and no draw (noise stays 1)
                temperature[slot].fill_(1.0)
                kth[slot].fill_(0)
                top_p[slot].fill_(-1.0)
                draws.fill_(1.0)

    def release(self, slot: int) -> None:
        """The slot's row is over: it writes at the scratch position from now on."""
        self.length[slot].fill_(self.park)
        # free slots hold top-k 1 (within ``TOPK_CAP``), so only a stepping row can make a step ungraphable
        self.t_kth[slot].fill_(0)
        self.p_kth[slot].fill_(0)

    # ----- one step ---------------------------------------------------------------------------------

    def graphable(self, sampling: RowSampling) -> bool:
        """Whether a row's settings fit the graphed step (top-k within ``TOPK_CAP``, no top-p; greedy fits)."""
        return all(
            not s.do_sample or (0 < s.top_k <= TOPK_CAP and s.top_p >= 1.0)
            for s in (sampling.talker, sampling.predictor)
        )

    def bucket(self, slots: list[int]) -> int:
        top = max(slots) + 1
        return min(b for b in self.buckets if b >= top)

    def span_bucket(self, span: int) -> int:
        """The positions a graph for ``span`` reads; past the cache's length there is none (the loop ends a row
        before it gets there: a graph reading fewer positions than a row holds would be silently wrong)."""
        for bucket in self.spans:
            if bucket >= span:
                return bucket
        raise ValueError(f"a step over {span} positions is past the cache's {self.spans[-1]}")

    def run(self, rows: list[tuple[int, Any, RowSampling, Any]], span: int) -> tuple[Any, Any]:
        """Step the rows ``(slot, text embedding (1, 1, D), sampling, generator)``; ``span`` positions are read.

        Returns (frames (bucket, 16) on the device, by slot; the host copy of ``out``: (bucket, 17) codes).
        """
        slots = sorted(slot for slot, *_ in rows)
        if tuple(slots) != self._active_slots:
            self.active.fill_(False)
            for slot in slots:
                self.active[slot].fill_(True)
            self._active_slots = tuple(slots)
        split = (self.codebooks - 1) * self.pvocab
        graphable = True
        if slots == list(range(len(slots))):  # slots 0..n-1 (the usual case): the text embeddings in one copy
            by_slot = sorted(rows, key=lambda row: int(row[0]))
            self._torch.cat([text for _, text, *_ in by_slot], dim=0, out=self.text[: len(slots)])
        else:
            for slot, text, *_ in rows:
                self.text[slot].copy_(text[0])
        for slot, _, sampling, generator in rows:
            predictor, talker = sampling.predictor.do_sample, sampling.talker.do_sample
            noise = self.noise[slot]
            if predictor and talker:
                noise.exponential_(1, generator=generator)
            elif predictor:
                noise[:split].exponential_(1, generator=generator)
            elif talker:
                noise[split:].exponential_(1, generator=generator)
            graphable = graphable and self.graphable(sampling)
        bucket = self.bucket(slots)
        if self._graphs or self.pad_spans:  # with graphs, an eager step (a top-p row) reads what they read: a
            bucketed = self.span_bucket(span)  # row's numbers do not depend on whether a row beside it was graphable
            self.padded_steps += bucketed > span
            span = bucketed
        graph = self._graphs.get((bucket, span)) if graphable else None
        if graph is not None:
            graph.replay()
        else:
            self._body(bucket, span, graphable)
        return self.out[:bucket, : self.codebooks].clone(), self._read_back(bucket)

    def _read_back(self, bucket: int) -> Any:
        """The one device-to-host copy of a step: the frame codes and next codes of the bucket."""
        if self._host is None:
            return self.out[:bucket].numpy().copy()
        host = self._host[:bucket]
        host.copy_(self.out[:bucket], non_blocking=True)
        self._event.record()
        self._event.synchronize()
        return host.numpy()

    def capture(self) -> float:
        """Record the step of every batch and span bucket as a CUDA graph (at load, while no row runs); seconds.

        A graph of span ``s`` is the eager step at span ``s``: the same ops on the same shapes. A step whose
        rows hold fewer positions replays it; the positions past a row's length are masked either way.
        """
        torch = self._torch
        started = time.perf_counter()
        self.active.fill_(False)
        self._active_slots = ()
        shapes = sorted(((b, s) for b in self.buckets for s in self.spans), reverse=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for bucket, span in shapes:
                for _ in range(2):
                    self._body(bucket, span, True)
        torch.cuda.current_stream().wait_stream(side)
        graphs: dict[tuple[int, int], Any] = {}
        pool = None
        for shape in shapes:  # the largest first; the others share its memory pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):  # code2wav may run
                self._body(*shape, True)
            pool = graph.pool()
            graphs[shape] = graph
        torch.cuda.synchronize()
        self._graphs = graphs  # only once every shape is captured
        seconds = time.perf_counter() - started
        logger.info("qwen3: captured the loop step as %d CUDA graphs (batches %s × spans %s) in %.2f s", len(graphs),
                    list(self.buckets), list(self.spans), seconds)  # fmt: skip
        return seconds

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    @property
    def graph_count(self) -> int:
        return len(self._graphs)

    def drop_graphs(self) -> None:
        """Back to the eager step (after a failed capture, say)."""
        self._graphs = {}

    def _body(self, b: int, span: int, graphable: bool) -> None:
        """The step over slots 0..b-1; writes ``out`` and advances the state of the ``active`` slots.

        Under inference mode: no autograd bookkeeping (version counters, view tracking) on the host, and
        composite ops such as ``rms_norm`` reach the dispatcher whole, where CUDA runs them as one kernel.
        Every tensor it writes is a buffer made at load (a normal tensor: writing it here is allowed).
        """
        with self._torch.inference_mode():
            self._advance(b, span, graphable)

    def _advance(self, b: int, span: int, graphable: bool) -> None:
        torch, c = self._torch, self.codebooks
        active = self.active[:b]
        first = self.next_code[:b]
        past = self.past_hidden[:b]
        codes, parts = self._predict(b, past, first, graphable)
        # the talker reads the frame back: ``BatchedTalker.embed_codes``, the 16 codebook embeddings summed; the
        # predictor looked up the first 15 already (its inputs), the last one is looked up here
        parts.append(self._embed_rest[c - 2](codes[-1].unsqueeze(1)))
        embeds = torch.cat(parts, dim=1).sum(1, keepdim=True) + self.text[:b]
        logits, hidden = self._decode(b, embeds, span)
        frames = self.frames[:b]
        frames.add_(active)
        following = self._sample_talker(b, logits, frames < MIN_NEW_TOKENS, graphable)
        torch.stack((first, *codes, following), dim=1, out=self.out[:b])
        torch.where(active, following, first, out=first)
        torch.where(active.view(b, 1, 1), hidden, past, out=past)
        index = following.unsqueeze(1)
        seen = self.seen[:b]
        seen.scatter_(1, index, seen.gather(1, index) | active.unsqueeze(1))
        self.length[:b].add_(active)

    def _predict(self, b: int, past: Any, first: Any, graphable: bool) -> tuple[list[Any], list[Any]]:
        """Codebooks 1..15 of each row's frame: their codes ((b,) each), and the codebook embeddings of codes
        0..14 ((b, 1, D) each: the inputs of the predictor's forwards, which the talker reads back too)."""
        torch = self._torch
        predictor, model = self._predictor, self._predictor.model
        keys, values = [k[:b] for k in self._pkeys], [v[:b] for v in self._pvalues]
        functional = torch.nn.functional
        position = 0
        parts = [self._embed_first(first.unsqueeze(1))]
        inputs = torch.cat((past, parts[0]), dim=1)
        codes: list[Any] = []
        split = (self.codebooks - 1) * self.pvocab
        noise = self.noise[:b, :split].view(b, self.codebooks - 1, self.pvocab)
        settings = (self.p_temperature[:b], self.p_kth[:b], self.p_top_p[:b])
        for step in range(self.codebooks - 1):
            if step:
                inputs = self._embed_rest[step - 1](codes[-1].unsqueeze(1))
                parts.append(inputs)
            hidden = predictor.small_to_mtp_projection(inputs)
            length = int(inputs.shape[1])
            end = position + length
            cos, sin = self._protary[step]
            shape = (b, length, -1, self._phead)
            for i, layer in enumerate(model.layers):
                # the package's decoder layer, written out (transformers' SDPA call: no mask, causal over the
                # first two positions, native GQA)
                attention = layer.self_attn
                residual = hidden
                x = self._norm(layer.input_layernorm, hidden)
                q, k, v = self._qkv(attention, self._predictor_proj[i], self._predictor_qk[i], x, shape, cos, sin)
                keys[i][:, :, position:end] = k
                values[i][:, :, position:end] = v
                attended = functional.scaled_dot_product_attention(
                    q, keys[i][:, :, :end], values[i][:, :, :end], dropout_p=0.0, scale=attention.scaling,
                    is_causal=length > 1, enable_gqa=True,
                )  # fmt: skip
                attended = attended.transpose(1, 2).reshape(b, length, -1)
                hidden = residual + attention.o_proj(attended)
                residual = hidden
                hidden = residual + self._predictor_proj[i].mlp(self._norm(layer.post_attention_layernorm, hidden))
            hidden = self._norm(model.norm, hidden)
            logits = self._float(predictor.lm_head[step](hidden)[:, -1, :])
            position = end
            codes.append(self._pick(logits, noise[:, step], settings, graphable))
        return codes, parts

    def _sample_talker(self, b: int, logits: Any, blocked: Any, graphable: bool) -> Any:
        """``sample_rows`` for the talker: penalty over seen codes, no EOS before the second frame, suppressed ids."""
        torch = self._torch
        penalty = self.t_penalty[:b]
        penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
        scores = torch.where(self.seen[:b] & self.t_penalized[:b], penalized, logits)
        scores = scores.masked_fill(self._banned | (self._eos_column & blocked.unsqueeze(1)), float("-inf"))
        noise = self.noise[:b, (self.codebooks - 1) * self.pvocab :]
        settings = (self.t_temperature[:b], self.t_kth[:b], self.t_top_p[:b])
        return self._pick(scores, noise, settings, graphable)

    def _pick(self, scores: Any, noise: Any, settings: tuple[Any, ...], graphable: bool) -> Any:
        """Temperature, top-k, top-p, then the row's draw (``argmax(probs / q)``).

        A greedy row has temperature 1, top-k 1 and noise 1: what is left is its maximal scores (ties kept),
        equally probable, and ``argmax`` takes the first of them, the index ``argmax(scores)`` gives.
        """
        torch = self._torch
        temperature, kth_index, top_p = settings
        scores = scores / temperature
        if graphable:
            kth = torch.topk(scores, min(TOPK_CAP, scores.shape[-1]), dim=-1).values.gather(1, kth_index)
        else:
            kth = torch.sort(scores, dim=-1, descending=True).values.gather(1, kth_index)
        scores = scores.masked_fill(scores < kth, float("-inf"))
        if not graphable:  # top-p (a no-op for rows at 1.0)
            ordered, order = torch.sort(scores, descending=False)
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            remove = cumulative <= top_p
            remove[..., -1:] = False
            scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
        return torch.argmax(torch.softmax(scores, dim=-1) / noise, dim=-1)

    def _rotary(self, embeds: Any, positions: Any) -> tuple[Any, Any]:
        """The talker's cos/sin at ``positions`` (P,): (P, 1, 1, hd) each, the multimodal sections combined."""
        torch = self._torch
        cos, sin = self._model.rotary_emb(embeds, positions.view(1, -1, 1).expand(3, -1, -1))
        section, interleaved = self._mrope
        if interleaved:

            def combine(x: Any) -> Any:
                dim = x.shape[-1]
                modality = len(section)
                half = x[..., : dim // 2]
                merged = half[0].clone()
                for i, n in enumerate(section[1:], 1):
                    merged[..., i : n * modality : modality] = half[i, ..., i : n * modality : modality]
                return torch.cat([merged] * 2, dim=-1).unsqueeze(1)

        else:

            def combine(x: Any) -> Any:
                parts = x.split(section * 2, dim=-1)
                return torch.cat([m[i % 3] for i, m in enumerate(parts)], dim=-1).unsqueeze(1)

        return combine(cos), combine(sin)

    def _qkv(
        self,
        attention: Any,
        merged: _MergedProjections,
        weight: Any,
        x: Any,
        shape: tuple[int, ...],
        cos: Any,
        sin: Any,
    ) -> tuple[Any, Any, Any]:
        """Queries, keys (normed and rotated) and values (B, heads, L, hd): the package's projections, ``q_norm``/
        ``k_norm`` and rotary, op for op, with queries and keys together (one projection for q, k and v, one
        norm and one rotation instead of two each).

        The norms differ only in their weights (``weight``: both stacked per head, applied after the norm as
        the package applies it: ``_norm``'s reduced-precision form), and ``rotate_half(x) * sin``
        equals ``roll(x, hd/2) * signed_sin`` exactly (``signed_sin`` = the first half of ``sin`` negated).
        """
        torch = self._torch
        qkv = merged.qkv(x)
        b, length = shape[0], shape[1]
        hd = shape[3]
        heads, kv_heads = merged.sizes[0] // hd, merged.sizes[1] // hd
        both = qkv[..., : (heads + kv_heads) * hd].view(b, length, heads + kv_heads, hd)
        v = qkv[..., (heads + kv_heads) * hd :].view(b, length, kv_heads, hd).transpose(1, 2)
        both = weight * torch.nn.functional.rms_norm(both, (hd,), None, attention.q_norm.variance_epsilon)
        both = (both * cos) + (both.roll(self._half, dims=-1) * sin)
        q, k = both.split((heads, kv_heads), dim=2)
        return q.transpose(1, 2), k.transpose(1, 2), v

    def _float(self, logits: Any) -> Any:
        """Logits in float32, as ``generate`` takes them (no op when they already are)."""
        return logits if logits.dtype == self._torch.float32 else logits.float()

    def _norm(self, module: Any, x: Any) -> Any:
        return package_rms_norm(self._torch, module, x)

    def _decode(self, b: int, embeds: Any, span: int) -> tuple[Any, Any]:
        """One talker position for slots 0..b-1, each at its own ``length``: (logits (b, V) float32, hidden)."""
        torch = self._torch
        functional = torch.nn.functional
        positions = self.length[:b]
        tables = self._talker_rotary.index_select(0, positions)  # (b, 2, 1, hd): heads last-but-one
        cos, sin = tables[:, :1], tables[:, 1:]
        # the additive mask SDPA would make of a bool mask (0 where a row may look, -inf past its length),
        # made once per step here rather than by SDPA in every layer
        ahead = self._key_positions[:span] > positions.unsqueeze(1)
        mask = torch.where(ahead, self._minus_inf, self._zero).view(b, 1, 1, span)
        where = positions.view(b, 1, 1, 1).expand(b, self._kv_heads, 1, self._head_dim)
        shape = (b, 1, -1, self._head_dim)
        hidden = embeds
        for i, layer in enumerate(self._model.layers):
            attention = layer.self_attn
            residual = hidden
            x = self._norm(layer.input_layernorm, hidden)
            q, k, v = self._qkv(attention, self._talker_proj[i], self._talker_qk[i], x, shape, cos, sin)
            keys, values = self._cache.keys[i, :b], self._cache.values[i, :b]
            keys.scatter_(2, where, k)
            values.scatter_(2, where, v)
            attended = functional.scaled_dot_product_attention(
                q, keys[:, :, :span], values[:, :, :span], attn_mask=mask, scale=attention.scaling, enable_gqa=True
            )
            attended = attended.transpose(1, 2).reshape(b, 1, -1)
            hidden = residual + attention.o_proj(attended)
            residual = hidden
            hidden = residual + self._talker_proj[i].mlp(self._norm(layer.post_attention_layernorm, hidden))
        hidden = self._norm(self._model.norm, hidden)
        logits = self._float(self._talker.codec_head(hidden)[:, -1, :])
        return logits, hidden[:, -1:, :]


def package_rms_norm(torch: Any, module: Any, x: Any) -> Any:
    """The package's ``Qwen3TTSRMSNorm`` (``module``) as ``rms_norm``: one fused kernel on CUDA, not six.

    The package computes ``weight * (x * rsqrt(mean(x²) + eps)).to(dtype)`` in float32. ``rms_norm`` does the
    same arithmetic in the same order (bit for bit on CPU in float32, bfloat16 and float16: the tests check);
    only where the weight goes differs. In float32 the weight is applied inside, the same single rounding;
    in bfloat16/float16 the package rounds before applying the weight, so the weight stays a second op.
    """
    functional = torch.nn.functional
    shape, eps = module.weight.shape, module.variance_epsilon
    if x.dtype == torch.float32:
        return functional.rms_norm(x, shape, module.weight, eps)
    return module.weight * functional.rms_norm(x, shape, None, eps)


def _stacked_norm_weight(torch: Any, attention: Any) -> Any:
    """(heads + kv_heads, head_dim): ``q_norm``'s weight for each query head, then ``k_norm``'s for each key head."""
    q_norm, k_norm = attention.q_norm, attention.k_norm
    if q_norm.variance_epsilon != k_norm.variance_epsilon:
        raise ValueError("qwen3: q_norm and k_norm differ in eps; the static step norms them together")
    heads = attention.config.num_attention_heads
    kv_heads = attention.config.num_key_value_heads
    return torch.cat((q_norm.weight.detach().expand(heads, -1), k_norm.weight.detach().expand(kv_heads, -1)))


def _signed_sin(torch: Any, sin: Any) -> Any:
    """``sin`` with its first half negated: ``rotate_half(x) * sin == roll(x, hd/2) * _signed_sin(sin)``."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


class _MergedProjections:
    """A decoder layer's q/k/v projections as one matrix, and its MLP's gate/up as another (one matmul each).

    Merged weights give the same numbers as separate ones (each output column is the same dot product;
    checked bitwise on CPU). The layer's own modules are re-pointed at views of the merged weights, so the
    package's forward (``generate``, prefill) uses the same memory: nothing is held twice.
    """

    def __init__(self, torch: Any, layer: Any) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        self._torch = torch
        self._act = mlp.act_fn
        self._down = mlp.down_proj
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.sizes = tuple(int(p.out_features) for p in projections)
        self._qkv, self._qkv_bias = self._merge(projections)
        self._gate_up, self._gate_up_bias = self._merge((mlp.gate_proj, mlp.up_proj))
        self._intermediate = int(mlp.gate_proj.out_features)

    def _merge(self, linears: tuple[Any, ...]) -> tuple[Any, Any]:
        torch = self._torch
        with torch.no_grad():
            weight = torch.cat([linear.weight for linear in linears])
            biases = [linear.bias for linear in linears]
            bias = torch.cat(biases) if all(b is not None for b in biases) else None
            if bias is None and any(b is not None for b in biases):
                raise ValueError("qwen3: projections with and without bias cannot be merged")
            start = 0
            for linear in linears:
                end = start + int(linear.out_features)
                linear.weight = torch.nn.Parameter(weight[start:end], requires_grad=False)
                if bias is not None:
                    linear.bias = torch.nn.Parameter(bias[start:end], requires_grad=False)
                start = end
        return weight, bias

    def qkv(self, x: Any) -> Any:
        return self._torch.nn.functional.linear(x, self._qkv, self._qkv_bias)

    def mlp(self, x: Any) -> Any:
        """The package's MLP: ``down(act(gate(x)) * up(x))``, gate and up in one matmul."""
        gate_up = self._torch.nn.functional.linear(x, self._gate_up, self._gate_up_bias)
        gate, up = gate_up.split((self._intermediate, self._intermediate), dim=-1)
        return self._down(self._act(gate) * up)
