"""A tiny random Qwen3-ForcedAligner checkpoint (~1 MB) that ``qwen_asr`` loads and runs on CPU.

The published Qwen3-ForcedAligner-0.6B cannot be downloaded here, and our code around it (loading from a
directory, resampling, the prompt ``qwen_asr`` builds, mapping its units back to the text, clamping) needs only
the right *shapes and config*. So this is the published architecture at toy sizes, with random weights: its
timings are noise, their structure (one unit per word or CJK character, in order, inside the audio) is real.

What the published ``config.json`` has and a tiny one must keep (each fails loading or aligning otherwise):

* ``thinker_config.model_type`` is ``qwen3_forced_aligner``: only then does the thinker get the
  ``classify_num``-class timestamp head instead of a vocabulary head. ``save_pretrained`` writes the class's
  own ``model_type`` there, so the file is mended after saving (the published file has the aligner's);
* ``timestamp_token_id`` and ``timestamp_segment_time`` (80 ms) at the top level, where ``qwen_asr`` reads them;
* the audio encoder's ``n_window`` of 50 (its output-length formula assumes 100-frame chunks) and 128 mel bins;
* ``rope_scaling.mrope_section`` summing to half the head size;
* a tokenizer whose ``<|audio_pad|>`` and ``<timestamp>`` are single tokens and that names the audio tokens
  (``audio_token``, ``audio_bos_token``, ``audio_eos_token``), as the processor reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
            "<timestamp>")  # fmt: skip
LANGUAGES = ["Chinese", "English", "Japanese", "Korean", "German", "French", "Spanish", "Portuguese", "Italian",
             "Arabic", "Indonesian"]  # fmt: skip
CLASSES = 5000
"""Timestamp classes of the published head (80 ms each: up to 400 s)."""
TINY_CLASSES = 64
"""The tiny head's (up to 5.1 s): random argmaxes over 5000 classes land past the end of any test's audio, so every
time would be clamped to its end; over 64 they fall inside a few seconds, and the mending is exercised."""


TINY = {
    "audio": {"num_mel_bins": 128, "d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
              "encoder_ffn_dim": 64, "output_dim": 32, "downsample_hidden_size": 8, "n_window": 50,
              "n_window_infer": 800, "max_source_positions": 1500},
    "text": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 16, "rope_theta": 1_000_000, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": False,
             "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "interleaved": True}},
    "classes": TINY_CLASSES,
}  # fmt: skip
PUBLISHED = {
    "audio": {"num_mel_bins": 128, "d_model": 1024, "encoder_layers": 24, "encoder_attention_heads": 16,
              "encoder_ffn_dim": 4096, "output_dim": 1024, "downsample_hidden_size": 480, "n_window": 50,
              "n_window_infer": 800, "max_source_positions": 1500, "scale_embedding": False},
    "text": {"vocab_size": 152_064, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1_000_000,
             "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
             "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True}},
    "classes": CLASSES,
}  # fmt: skip
"""Qwen3-ForcedAligner-0.6B's sizes (its ``config.json`` as public ports of it quote it: 24 encoder layers of
1024, 28 decoder layers of 1024, a 152,064-token vocabulary), for measuring what the real network costs: the
cost of a forward pass does not depend on the weights' values."""


def forced_aligner_parts(sizes: dict[str, Any] = TINY) -> tuple[Any, Any]:
    """A Qwen3-ForcedAligner with random weights, and its processor, in memory: ``(model, processor)``."""
    import torch
    from qwen_asr.core.transformers_backend import (
        Qwen3ASRConfig,
        Qwen3ASRForConditionalGeneration,
        Qwen3ASRProcessor,
    )
    from transformers import WhisperFeatureExtractor

    torch.manual_seed(0)
    tokenizer = _tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
    thinker = {
        "model_type": "qwen3_forced_aligner",
        "classify_num": sizes["classes"],
        "audio_token_id": ids["<|audio_pad|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "audio_end_token_id": ids["<|audio_end|>"],
        "audio_config": sizes["audio"],
        "text_config": {"vocab_size": len(tokenizer), **sizes["text"]},
    }
    config = Qwen3ASRConfig(thinker_config=thinker, support_languages=LANGUAGES,
                            timestamp_token_id=ids["<timestamp>"], timestamp_segment_time=80)  # fmt: skip
    config.thinker_config.model_type = "qwen3_forced_aligner"  # the instance's: its class says qwen3_asr_thinker
    config.thinker_config.classify_num = sizes["classes"]
    config.architectures = ["Qwen3ASRForConditionalGeneration"]
    model = Qwen3ASRForConditionalGeneration(config).eval()
    features = WhisperFeatureExtractor(feature_size=128, sampling_rate=16_000, hop_length=160, chunk_length=30,
                                       n_fft=400, padding_value=0.0, return_attention_mask=True)  # fmt: skip
    return model, Qwen3ASRProcessor(feature_extractor=features, tokenizer=tokenizer)


def build_tiny_forced_aligner(out: Path) -> Path:
    """Write the tiny checkpoint's directory ``out / "qwen3-forced-aligner-tiny"``; returns it."""
    directory = out / "qwen3-forced-aligner-tiny"
    model, processor = forced_aligner_parts(TINY)
    model.save_pretrained(directory)
    saved: dict[str, Any] = json.loads((directory / "config.json").read_text())
    saved["thinker_config"]["model_type"] = "qwen3_forced_aligner"  # as the published file has it
    (directory / "config.json").write_text(json.dumps(saved, indent=2))
    processor.save_pretrained(directory)
    return directory


def _tokenizer() -> Any:
    """A byte-level BPE (any script tokenizes, byte by byte at worst) with the aligner's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    bpe.train_from_iterator(["hello world, the weather is fine today.", "你好世界", "Guten Tag"] * 50, trainer)
    return Qwen2TokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIALS[1:]),
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"},
    )  # fmt: skip
