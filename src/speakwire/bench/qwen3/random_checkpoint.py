"""Qwen3-TTS checkpoints with the published architectures and random weights (no downloads).

``configs/`` holds the published ``config.json`` of Qwen3-TTS-12Hz-0.6B-Base, its speech
tokenizer's config and its generation config (sources in SOURCES.md). The 1.7B-Base config differs from
the 0.6B one only in the fields ``ONE_B_SEVEN`` sets (the talker's width and the speaker encoder's output),
as SOURCES.md records. The text tokenizer is a small byte-level BPE trained here on a few phrases (the tests
build the same one): token ids only feed embeddings, so any tokenizer that yields the role tokens the package
slices by will do.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).with_name("configs")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>")
ONE_B_SEVEN = {"tts_model_size": "1b7", "speaker_encoder_config.enc_dim": 2048,
               "talker_config.hidden_size": 2048, "talker_config.intermediate_size": 6144}  # fmt: skip


def published_config(name: str) -> dict[str, Any]:
    """``0.6B-Base`` or ``1.7B-Base``."""
    config: dict[str, Any] = json.loads((CONFIGS / "0.6B-Base.json").read_text())
    if name == "1.7B-Base":
        config = copy.deepcopy(config)
        for dotted, value in ONE_B_SEVEN.items():
            *parents, leaf = dotted.split(".")
            target = config
            for key in parents:
                target = target[key]
            target[leaf] = value
    elif name != "0.6B-Base":
        raise ValueError(f"unknown model {name!r}")
    return config


def build_random_checkpoint(out: Path, name: str, *, device: str, dtype: Any) -> Path:
    """Write a loadable checkpoint directory for ``name`` with random weights; returns it."""
    import torch

    from speakwire.engines.qwen3.compat import import_qwen_tts

    import_qwen_tts()
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
    from transformers import EncodecFeatureExtractor

    torch.manual_seed(0)
    directory = out / name
    text_tokenizer = text_tokenizer_with_roles()
    raw = published_config(name)
    ids = {token: text_tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
    raw.update(im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"],
               tts_pad_token_id=ids["<tts_pad>"], tts_bos_token_id=ids["<tts_text_bos>"],
               tts_eos_token_id=ids["<tts_text_eod>"])  # fmt: skip
    raw["talker_config"]["text_vocab_size"] = max(raw["talker_config"]["text_vocab_size"], len(text_tokenizer))
    config = Qwen3TTSConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "transformers_version")})
    config.architectures = ["Qwen3TTSForConditionalGeneration"]
    with torch.device(device):
        model = Qwen3TTSForConditionalGeneration(config).eval()
    model.to(dtype).save_pretrained(directory)
    del model
    saved = json.loads((directory / "config.json").read_text())
    saved["speaker_encoder_config"].pop("model_type", None)
    (directory / "config.json").write_text(json.dumps(saved, indent=2))
    (directory / "generation_config.json").write_text((CONFIGS / "generation_config.json").read_text())
    Qwen3TTSProcessor(tokenizer=text_tokenizer).save_pretrained(directory)

    tokenizer_raw = json.loads((CONFIGS / "speech_tokenizer.json").read_text())
    tokenizer_config = Qwen3TTSTokenizerV2Config(
        **{k: v for k, v in tokenizer_raw.items() if k not in ("architectures", "transformers_version")}
    )
    tokenizer_config.architectures = ["Qwen3TTSTokenizerV2Model"]
    with torch.device(device):
        speech = Qwen3TTSTokenizerV2Model(tokenizer_config).eval()
    _speech_like_levels(torch, speech)
    speech.save_pretrained(directory / "speech_tokenizer")
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24_000, padding_value=0.0).save_pretrained(
        directory / "speech_tokenizer"
    )
    del speech
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return directory


def text_tokenizer_with_roles() -> Any:
    """A byte-level BPE with Qwen's chat special tokens, trained on a few phrases."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["assistant\n", "user\n", "hello world, this is a tiny test.", "Hi there!"] * 50, trainer)
    tokenizer = Qwen2TokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    return tokenizer


def _speech_like_levels(torch: Any, speech: Any) -> None:
    """Random RVQ tables (they start at zero) and an output scaled to speech-like levels."""
    decoder = speech.decoder
    with torch.no_grad():
        for parameter_name, parameter in decoder.quantizer.named_parameters():
            if parameter_name.endswith("embedding_sum"):
                parameter.normal_()
        quantizers = int(decoder.config.num_quantizers)
        codes = torch.randint(0, int(decoder.config.codebook_size), (1, quantizers, 30), device=parameter.device)
        level = float(decoder(codes).float().std()) or 1.0
        final = decoder.decoder[-1].conv
        final.weight.mul_(0.2 / level)
        final.bias.mul_(0.2 / level)
