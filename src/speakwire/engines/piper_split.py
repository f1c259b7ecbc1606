"""Split a Piper (VITS) ONNX voice at its prior sample ``z_p`` into a frontend graph and a decoder graph.

Why: Piper ships one graph, phoneme ids → waveform, so no audio exists until the whole sentence is
decoded. VITS inference has a seam, though. Everything up to

    z_p = m_p + randn_like(m_p) * exp(logs_p) * noise_scale

(text encoder, duration predictor, alignment, prior expansion; both random-noise nodes) needs the
whole sentence and is the cheaper part. Everything after it (flow → HiFi-GAN) is convolutional over
frames with a finite receptive field, so ``piper_stream`` can run it on overlapping windows of frames.
All sampling happens in the frontend, once per sentence, so overlapping windows see the same noise.

How the seam is found, by structure rather than node names (names differ between Piper exporters):
``z_p`` is the one ``Add`` whose inputs are a ``RandomNormalLike``'s input (``m_p``) and a tensor
computed from that node's noise. The boundary is then the exact cut of the graph: ``z_p`` plus every
other tensor the decoder's nodes read from the input-dependent part upstream (for the joe voice only
the frame mask; multi-speaker voices add the speaker embedding). Constant-only nodes are copied into
whichever graph needs them. Anything that breaks an assumption raises ``GraphSplitError``, and the
engine then keeps the whole-sentence path.

The frontend also returns the duration predictor's frames per phoneme id (``w_ceil``), for word timings
(``piper_alignment``). ``find_durations`` finds it by structure too: the output of the one ``Ceil`` whose
values reach ``z_p`` (the frame counts that expand the prior over frames). A voice without one still
splits; it just has no timings.

Own code rather than the ``streaming-vits`` package (MIT, 0.4.2, read for this): the idea and the
windowed decode come from there, but all we need is this cut and a decode loop (this module and
``piper_stream``, ~250 lines with docs). The package would bring a CLI, device calibration, a
phonemizer we do not use, split graphs written to a cache directory beside the model (installed
wheels may be read-only) and progress printed to stdout, and it finds the seam by heuristics (the
first ``Add`` after the last noise node; the mask as "a boundary tensor with more than five users";
the speaker embedding from ``"cond"`` in node names). Computing the cut needs none of those guesses,
runs in memory in about a second at load, and keeps a young single-author dependency out of the
server; ``onnx`` itself is the only new dependency. Its cached-state decoder (no recomputed overlap)
needs a torch export per voice and is not taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import onnx
import onnx.shape_inference
import onnx.utils

_NOISE_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"})


class GraphSplitError(ValueError):
    """The voice's graph does not have the VITS seam this module expects; use the whole graph."""


@dataclass(frozen=True, slots=True)
class SplitBoundary:
    """Names that connect the two graphs, and how frames map to samples."""

    latent: str
    """``z_p``: the decoder's input over frames, shape (1, channels, frames)."""
    conditioning: tuple[str, ...]
    """The other tensors the decoder reads (frame mask; speaker embedding on multi-speaker voices)."""
    frontend_inputs: tuple[str, ...]
    """The voice's own inputs (``input``, ``input_lengths``, ``scales``, and ``sid`` if it has speakers)."""
    audio: str
    """The decoder's (and the whole graph's) waveform output."""
    hop_length: int
    """Samples per frame: the product of the decoder's upsampling strides."""
    durations: str | None = None
    """An extra frontend output: frames per phoneme id, shape (1, 1, ids); None if the voice lacks it."""

    @property
    def decoder_inputs(self) -> tuple[str, ...]:
        """Frontend outputs = decoder inputs, latent first."""
        return (self.latent, *self.conditioning)


@dataclass(frozen=True, slots=True)
class SplitVoice:
    """A voice as two serialized ONNX models, ready for ``onnxruntime.InferenceSession``."""

    frontend: bytes
    decoder: bytes
    boundary: SplitBoundary


def split_voice(model: onnx.ModelProto) -> SplitVoice:
    """Cut a Piper voice into frontend and decoder models at ``z_p``.

    Args:
        model: The loaded voice (``onnx.load(path)``); it is not modified.

    Returns:
        Both halves serialized, and the names and hop length that connect them.

    Raises:
        GraphSplitError: The graph lacks the VITS seam (no unique ``z_p``, noise after it, no upsampling).
    """
    graph = model.graph
    if not graph.output:
        raise GraphSplitError("the graph has no outputs")
    audio = graph.output[0].name
    initializers = {tensor.name for tensor in graph.initializer}
    # Old IR versions list initializers among the inputs too; only real inputs are fed.
    inputs = tuple(value.name for value in graph.input if value.name not in initializers)

    latent = _find_latent(graph.node)
    conditioning = _conditioning(graph.node, inputs, latent, audio)
    boundary_names = [latent, *conditioning]
    durations = find_durations(graph.node, latent)
    if durations in boundary_names:
        durations = None

    # The extractor needs each boundary tensor's type, which only shape inference records.
    try:
        extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model))
        frontend = extractor.extract_model(list(inputs), boundary_names + ([durations] if durations else []))
        decoder = extractor.extract_model(boundary_names, [audio])
    except (ValueError, KeyError, onnx.shape_inference.InferenceError) as error:
        raise GraphSplitError(f"could not extract the two graphs: {error}") from error

    noisy = sorted({node.op_type for node in decoder.graph.node if node.op_type in _NOISE_OPS})
    if noisy:
        # Each window would draw its own noise, and overlapping windows would no longer agree.
        raise GraphSplitError(f"the decoder would sample noise ({', '.join(noisy)}); cannot decode in windows")
    hop_length = 1
    for node in decoder.graph.node:
        if node.op_type == "ConvTranspose":
            hop_length *= _strides(node)
    if hop_length == 1:
        raise GraphSplitError("the decoder has no upsampling ConvTranspose; frames cannot be mapped to samples")

    boundary = SplitBoundary(latent, conditioning, inputs, audio, hop_length, durations)
    return SplitVoice(frontend.SerializeToString(), decoder.SerializeToString(), boundary)


def _find_latent(nodes: Iterable[onnx.NodeProto]) -> str:
    """The output of ``z_p = m_p + noise(m_p)``: an ``Add`` of a noise node's input and its descendant."""
    nodes = list(nodes)
    candidates: list[str] = []
    for noise in (node for node in nodes if node.op_type == "RandomNormalLike"):
        # The duration predictor's noise node takes a ConstantOfShape, not m_p, so it never matches.
        prior_mean = noise.input[0]
        descendants = _forward_closure(nodes, set(noise.output))
        candidates += [
            node.output[0]
            for node in nodes
            if node.op_type == "Add" and prior_mean in node.input and descendants.intersection(node.input)
        ]
    if len(candidates) != 1:
        raise GraphSplitError(f"expected one z_p = m_p + noise Add, found {len(candidates)}: {candidates}")
    return candidates[0]


def find_durations(nodes: Iterable[onnx.NodeProto], latent: str | None = None) -> str | None:
    """The duration predictor's frames per phoneme id: the output of the one ``Ceil`` that ``z_p`` depends on.

    Args:
        nodes: The voice's graph nodes.
        latent: ``z_p`` when known (``_find_latent``); without it, the graph's only ``Ceil`` (what Piper's own
            ``patch_voice_with_alignment`` assumes).

    Returns:
        The tensor name, or None when there is no such node or more than one: no timings, rather than wrong ones.
    """
    nodes = list(nodes)
    ceilings = [node.output[0] for node in nodes if node.op_type == "Ceil" and node.output]
    if latent is not None:
        ceilings = [name for name in ceilings if latent in _forward_closure(nodes, {name})]
    return ceilings[0] if len(ceilings) == 1 else None


def _conditioning(nodes: Iterable[onnx.NodeProto], inputs: tuple[str, ...], latent: str, audio: str) -> tuple[str, ...]:
    """Every tensor besides ``latent`` that nodes after it read from the input-dependent part upstream."""
    nodes = list(nodes)
    producer = {name: node for node in nodes for name in node.output if name}
    after_latent = _forward_closure(nodes, {latent})
    from_inputs = _forward_closure(nodes, set(inputs))
    needed: list[str] = []
    seen: set[str] = set()
    stack = [audio]
    # Walk back from the waveform; stop at the latent and at anything the decoder will be fed.
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if name in seen or name == latent or node is None:
            continue
        seen.add(name)
        for tensor in node.input:
            if not tensor:
                continue
            if tensor in from_inputs and tensor not in after_latent and set(node.output) & after_latent:
                if tensor not in needed:
                    needed.append(tensor)
                continue
            stack.append(tensor)
    return tuple(needed)


def _forward_closure(nodes: list[onnx.NodeProto], start: set[str]) -> set[str]:
    """``start`` and every tensor computed from it (nodes are in topological order, as ONNX requires)."""
    reached = set(start)
    for node in nodes:
        if reached.intersection(node.input):
            reached.update(name for name in node.output if name)
    return reached


def _strides(node: onnx.NodeProto) -> int:
    for attribute in node.attribute:
        if attribute.name == "strides":
            product = 1
            for stride in attribute.ints:
                product *= stride
            return product
    return 1
