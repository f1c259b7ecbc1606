"""Tiny random Qwen3-TTS checkpoints (~1.5 MB each) that the real package loads and runs on CPU.

Real weights cannot be downloaded in tests, but every code path of ours — loading,
prompt building, generation, the frame tap, incremental decoding — only needs
the right *shapes and config*. The weights are random, so the audio is noise;
timing structure, determinism and exactness are real.

Gotchas this encodes (each one fails loading or generation otherwise):
* ``save_pretrained`` writes ``"model_type"`` into ``speaker_encoder_config``, whose
  ``__init__`` takes no ``**kwargs`` — the key is deleted after saving;
* the talker vocabulary must be ≥ codebook size + 1024 (``generate`` suppresses the
  top 1024 ids except EOS);
* the text tokenizer must give exactly 3 tokens for ``"<|im_start|>assistant\\n"`` and 5
  for ``"<|im_end|>\\n<|im_start|>assistant\\n"`` (the package slices by those counts);
* the decoder config needs ``codebook_dim``; ``rope_scaling`` needs ``mrope_section`` and
  ``interleaved``;
* the RVQ ``embedding_sum`` starts at zero, so it is randomised (else every code decodes alike).

Two deliberate differences from the released tokenizer make the tests sharper: the
decoder has 2 transformer layers with a 4-frame window (so incremental decoding
must respect ``layers × window`` of history within a short utterance), and its
output is scaled to speech-like levels (random weights give ~1e-8 otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speakwire.bench.qwen3.random_checkpoint import SPECIALS, text_tokenizer_with_roles
from speakwire.engines.qwen3.compat import import_qwen_tts

CODEBOOK = 64
QUANTIZERS = 16
VARIANTS = {
    "base": ("base", "0b6"),
    "custom_voice": ("custom_voice", "0b6"),
    "custom_voice_1b7": ("custom_voice", "1b7"),
    "voice_design": ("voice_design", "1b7"),
}
SPEAKERS = {"ryan": False, "vivian": False, "uncle_fu": False, "eric": "sichuan_dialect"}
LANGUAGES = (
    "english",
    "chinese",
    "german",
    "italian",
    "portuguese",
    "spanish",
    "japanese",
    "korean",
    "french",
    "russian",
    "beijing_dialect",
    "sichuan_dialect",
)
DECODER_LAYERS = 2
DECODER_WINDOW = 4


def build_tiny_checkpoints(out: Path) -> dict[str, Path]:
    """Write one checkpoint directory per entry of ``VARIANTS`` under ``out``; return name → directory."""
    import_qwen_tts()
    import torch
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from transformers import EncodecFeatureExtractor

    torch.manual_seed(0)
    text_tokenizer = _text_tokenizer()
    speech_tokenizer = _speech_tokenizer(torch)
    features = EncodecFeatureExtractor(feature_size=1, sampling_rate=24_000, padding_value=0.0)
    ids = {name: text_tokenizer.convert_tokens_to_ids(name) for name in SPECIALS}
    generation = {
        "do_sample": True,
        "top_k": 50,
        "top_p": 1.0,
        "temperature": 0.9,
        "repetition_penalty": 1.05,
        "subtalker_dosample": True,
        "subtalker_top_k": 50,
        "subtalker_top_p": 1.0,
        "subtalker_temperature": 0.9,
        "max_new_tokens": 2048,
    }
    paths = {}
    for name, (variant, size) in VARIANTS.items():
        talker = _talker_config(len(text_tokenizer), speakers=variant == "custom_voice")
        config = Qwen3TTSConfig(
            talker_config=talker,
            speaker_encoder_config={
                "mel_dim": 128,
                "enc_dim": 32,
                "enc_channels": [16, 16, 16, 16, 48],
                "enc_kernel_sizes": [5, 3, 3, 3, 1],
                "enc_dilations": [1, 2, 3, 4, 1],
                "enc_attention_channels": 8,
                "enc_res2net_scale": 4,
                "enc_se_channels": 8,
                "sample_rate": 24_000,
            },
            tokenizer_type="qwen3_tts_tokenizer_12hz",
            tts_model_size=size,
            tts_model_type=variant,
            im_start_token_id=ids["<|im_start|>"],
            im_end_token_id=ids["<|im_end|>"],
            tts_pad_token_id=ids["<tts_pad>"],
            tts_bos_token_id=ids["<tts_text_bos>"],
            tts_eos_token_id=ids["<tts_text_eod>"],
        )
        config.architectures = ["Qwen3TTSForConditionalGeneration"]
        directory = out / name
        Qwen3TTSForConditionalGeneration(config).eval().save_pretrained(directory)
        config_path = directory / "config.json"
        saved = json.loads(config_path.read_text())
        saved["speaker_encoder_config"].pop("model_type", None)
        config_path.write_text(json.dumps(saved, indent=2))
        (directory / "generation_config.json").write_text(json.dumps(generation))
        Qwen3TTSProcessor(tokenizer=text_tokenizer).save_pretrained(directory)
        speech_tokenizer.save_pretrained(directory / "speech_tokenizer")
        features.save_pretrained(directory / "speech_tokenizer")
        paths[name] = directory
    return paths


def _text_tokenizer() -> Any:
    """The random-architecture checkpoints' tokenizer, checked against the role-token counts the package slices by."""
    tokenizer = text_tokenizer_with_roles()
    assert len(tokenizer("<|im_start|>assistant\n")["input_ids"]) == 3
    assert len(tokenizer("<|im_end|>\n<|im_start|>assistant\n")["input_ids"]) == 5
    return tokenizer


def _speech_tokenizer(torch: Any) -> Any:
    """Mimi-style encoder + Qwen code2wav decoder, 1920 samples per frame at 24 kHz like the real one."""
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    config = Qwen3TTSTokenizerV2Config(
        encoder_config={
            "hidden_size": 32,
            "num_filters": 4,
            "num_residual_layers": 1,
            "upsampling_ratios": [8, 6, 5, 4],
            "codebook_size": CODEBOOK,
            "codebook_dim": 16,
            "vector_quantization_hidden_dimension": 16,
            "num_quantizers": QUANTIZERS,
            "num_semantic_quantizers": 1,
            "upsample_groups": 32,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "frame_rate": 12.5,
            "sampling_rate": 24_000,
        },
        decoder_config={
            "codebook_size": CODEBOOK,
            "codebook_dim": 16,
            "hidden_size": 32,
            "latent_dim": 32,
            "head_dim": 16,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "intermediate_size": 64,
            "num_hidden_layers": DECODER_LAYERS,
            "num_quantizers": QUANTIZERS,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": 32,
            "sliding_window": DECODER_WINDOW,
            "layer_scale_initial_scale": 1.0,
        },
        encoder_valid_num_quantizers=QUANTIZERS,
        input_sample_rate=24_000,
        output_sample_rate=24_000,
        decode_upsample_rate=1920,
        encode_downsample_rate=1920,
    )
    config.architectures = ["Qwen3TTSTokenizerV2Model"]
    model = Qwen3TTSTokenizerV2Model(config).eval()
    decoder = model.decoder
    with torch.no_grad():
        for name, parameter in decoder.quantizer.named_parameters():
            if name.endswith("embedding_sum"):
                parameter.normal_()
        codes = torch.randint(0, CODEBOOK, (1, QUANTIZERS, 50))
        level = float(decoder(codes).std())
        final = decoder.decoder[-1].conv
        final.weight.mul_(0.2 / level)
        final.bias.mul_(0.2 / level)
    return model


def _talker_config(text_vocab: int, *, speakers: bool) -> dict[str, Any]:
    c = CODEBOOK
    return {
        "vocab_size": c + 1024,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "rope_theta": 1_000_000.0,
        "rope_scaling": {"mrope_section": [4, 2, 2], "interleaved": True, "rope_type": "default"},
        "num_code_groups": QUANTIZERS,
        "text_hidden_size": 32,
        "text_vocab_size": text_vocab,
        "codec_eos_token_id": c + 102,
        "codec_pad_id": c + 100,
        "codec_bos_id": c + 101,
        "codec_think_id": c + 106,
        "codec_nothink_id": c + 107,
        "codec_think_bos_id": c + 108,
        "codec_think_eos_id": c + 109,
        "codec_language_id": {name: c + 200 + i for i, name in enumerate(LANGUAGES)},
        "spk_id": {name: c + 300 + i for i, name in enumerate(SPEAKERS)} if speakers else {},
        "spk_is_dialect": dict(SPEAKERS) if speakers else {},
        "code_predictor_config": {
            "vocab_size": c,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "rope_theta": 1_000_000.0,
            "num_code_groups": QUANTIZERS,
        },
    }
