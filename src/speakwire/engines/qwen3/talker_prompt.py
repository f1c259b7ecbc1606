"""The talker's dual-track prompt for one utterance, built as the package builds it — with text that may still grow.

Every talker position is a text-track embedding plus a codec-track embedding. The
prompt is: [instruction] + role tokens + codec tags (think/language, speaker, pad, bos)
aligned with pad/bos text embeddings, then the target text. In the package's streaming
text mode (``non_streaming_mode=False``) the first text token joins the prompt and the
rest is read one token per generated frame, then text EOS, then text pad forever.
In ICL voice cloning the reference transcript and the target text share one track that
is read alongside the reference codes in the prompt; whatever is longer than the
reference codes is read per frame.

``VoicePrompt`` is the part that does not depend on the target text; ``TrackPlan`` says
how many track tokens the prompt consumes. The arithmetic mirrors
``Qwen3TTSForConditionalGeneration.generate`` (qwen-tts 0.1.1) term by term, in the same
groupings, so the same inputs give the same floating-point embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLE_TOKENS = 3
"""``<|im_start|>assistant\\n``: the package slices text ids as [3:-5]."""


@dataclass(frozen=True, slots=True)
class VoiceSpec:
    """What selects a voice for one utterance (already validated against the checkpoint)."""

    task_type: str
    """CustomVoice, VoiceDesign or Base."""
    language: str | None = None
    speaker: str | None = None
    instructions: str | None = None
    clone: Any = None
    """A ``VoiceClonePromptItem`` for Base."""


@dataclass(slots=True)
class VoicePrompt:
    """The text-independent part of one utterance's prompt, on the talker's device."""

    prefix: Any
    """(1, P, D): everything before the target text."""
    codec_tail: Any
    """(1, C, D): codec-track embeddings the first text positions are added to (codec bos; ICL: bos + ref codes)."""
    track_prefix_ids: list[int]
    """Text-track tokens before the target text (ICL: the reference transcript)."""
    icl: bool

    @property
    def tokens_in_prompt(self) -> int:
        """Track tokens the prompt consumes (1 without ICL; the codec tail's length with ICL)."""
        return int(self.codec_tail.shape[1])


class PromptBuilder:
    """Builds talker prompts for one loaded checkpoint (``Qwen3TTSModel``)."""

    def __init__(self, tts: Any) -> None:
        import torch

        self._torch = torch
        self._tts = tts
        self._model = tts.model
        self._talker = tts.model.talker
        self._config = tts.model.config
        self._talker_config = tts.model.config.talker_config
        self._ignores_instructions = tts.model.tts_model_type == "custom_voice" and tts.model.tts_model_size in "0b6"
        with torch.no_grad():
            self.tts_bos, self.tts_eos, self.tts_pad = self.text_embeddings(
                [self._config.tts_bos_token_id, self._config.tts_eos_token_id, self._config.tts_pad_token_id]
            ).chunk(3, dim=1)
        self.role_ids = self._ids(tts._build_assistant_text("x"))[:ROLE_TOKENS]

    # ----- text ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The target text's talker tokens: the package's ``input_id[:, 3:-5]``."""
        return self._ids(self._tts._build_assistant_text(text))[ROLE_TOKENS:-5]

    def text_embeddings(self, ids: list[int]) -> Any:
        """(1, n, D) text-track embeddings of ``ids`` (one projection call for all of them)."""
        torch = self._torch
        tensor = torch.tensor([ids], device=self._talker.device, dtype=torch.long)
        return self._talker.text_projection(self._talker.get_text_embeddings()(tensor))

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self._tts.processor(text=text, return_tensors="pt")["input_ids"][0]]

    def _codec(self, ids: list[int]) -> Any:
        torch = self._torch
        return self._talker.get_input_embeddings()(torch.tensor([ids], device=self._talker.device, dtype=torch.long))

    # ----- voice -----------------------------------------------------------------------------

    def voice(self, spec: VoiceSpec) -> VoicePrompt:
        """The text-independent prompt for ``spec`` (runs on the device thread, under no_grad)."""
        torch = self._torch
        config = self._talker_config
        speaker_embed = self._speaker_embedding(spec)
        language_id = self._language_id(spec)

        if language_id is None:
            tags = [config.codec_nothink_id, config.codec_think_bos_id, config.codec_think_eos_id]
        else:
            tags = [config.codec_think_id, config.codec_think_bos_id, language_id, config.codec_think_eos_id]
        codec = [self._codec(tags)]
        if speaker_embed is not None:
            codec.append(speaker_embed.view(1, 1, -1))
        codec.append(self._codec([config.codec_pad_id, config.codec_bos_id]))
        codec_input = torch.cat(codec, dim=1)

        role = self.text_embeddings(self.role_ids)
        head = torch.cat((self.tts_pad.expand(-1, codec_input.shape[1] - 2, -1), self.tts_bos), dim=1)
        prefix = torch.cat((role, head + codec_input[:, :-1]), dim=1)
        instructions = None if self._ignores_instructions else spec.instructions
        if instructions:
            instruct_ids = self._ids(self._tts._build_instruct_text(instructions))
            prefix = torch.cat((self.text_embeddings(instruct_ids), prefix), dim=1)

        clone = spec.clone
        if clone is not None and clone.icl_mode and clone.ref_code is not None:
            ref_ids = self._ids(self._tts._build_ref_text(clone.ref_text))[ROLE_TOKENS:-2]
            return VoicePrompt(prefix, self._reference_codes(clone.ref_code), ref_ids, icl=True)
        return VoicePrompt(prefix, codec_input[:, -1:], [], icl=False)

    def prompt(self, voice: VoicePrompt, track: Any) -> tuple[Any, int]:
        """The whole prompt given the track's first embeddings: (1, L, D) and the track positions it consumed.

        ``track`` is (1, n, D): the embeddings of the first n track positions (text EOS included when
        the text is complete and that short). Without ICL n ≥ 1 and one position is consumed. With ICL,
        either n ≥ the codec tail's length, or the track is complete and is padded up to it.
        """
        torch = self._torch
        tail = voice.codec_tail
        take = tail.shape[1]
        if not voice.icl:
            return torch.cat((voice.prefix, track[:, :1] + tail), dim=1), 1
        if track.shape[1] >= take:
            return torch.cat((voice.prefix, track[:, :take] + tail), dim=1), take
        padded = torch.cat([track] + [self.tts_pad] * (take - track.shape[1]), dim=1)
        return torch.cat((voice.prefix, padded + tail), dim=1), take

    def _speaker_embedding(self, spec: VoiceSpec) -> Any:
        torch = self._torch
        talker = self._talker
        clone = spec.clone
        if clone is not None:
            if clone.x_vector_only_mode or clone.icl_mode:
                return clone.ref_spk_embedding.to(talker.device).to(talker.dtype)
            return None
        if not spec.speaker:
            return None
        spk_id = self._talker_config.spk_id[spec.speaker.lower()]
        return talker.get_input_embeddings()(torch.tensor(spk_id, device=talker.device, dtype=torch.long))

    def _language_id(self, spec: VoiceSpec) -> int | None:
        config = self._talker_config
        language = (spec.language or "Auto").lower()
        language_id = None if language == "auto" else config.codec_language_id[language]
        speaker = spec.speaker.lower() if spec.speaker and spec.clone is None else None
        if language in ("chinese", "auto") and speaker is not None and config.spk_is_dialect[speaker] is not False:
            language_id = config.codec_language_id[config.spk_is_dialect[speaker]]
        return language_id

    def _reference_codes(self, ref_code: Any) -> Any:
        """(1, 1 + T_ref, D): codec bos, then each reference frame's 16 codebook embeddings summed."""
        torch = self._torch
        talker = self._talker
        ref_code = ref_code.to(talker.device)
        groups = [talker.get_input_embeddings()(ref_code[:, :1])]
        for i in range(1, self._talker_config.num_code_groups):
            groups.append(talker.code_predictor.get_input_embeddings()[i - 1](ref_code[:, i : i + 1]))
        frames = torch.cat(groups, dim=1).sum(1).unsqueeze(0)
        return torch.cat((self._codec([self._talker_config.codec_bos_id]), frames), dim=1)
