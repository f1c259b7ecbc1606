"""Device, dtype and GPU memory budget defaults (checked against a stand-in for torch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from speakwire.engines.qwen3.device import (
    MEMORY_ENV,
    apply_memory_fraction,
    memory_fraction,
    resolve_device,
    resolve_dtype,
)


def fake_torch(*, cuda: bool) -> SimpleNamespace:
    budgets: list[tuple[float, int | None]] = []

    def device(name: str) -> SimpleNamespace:
        return SimpleNamespace(index=int(name.split(":")[1]) if ":" in name else None)

    return SimpleNamespace(
        cuda=SimpleNamespace(
            is_available=lambda: cuda,
            set_per_process_memory_fraction=lambda fraction, index: budgets.append((fraction, index)),
        ),
        device=device,
        budgets=budgets,
        bfloat16="bf16",
        float16="fp16",
        float32="fp32",
    )


def test_cuda_in_bfloat16_when_a_gpu_is_visible() -> None:
    torch = fake_torch(cuda=True)
    device = resolve_device(torch, None)
    assert (device, resolve_dtype(torch, None, device)) == ("cuda", "bf16")


def test_cpu_in_float32_without_a_gpu() -> None:
    torch = fake_torch(cuda=False)
    device = resolve_device(torch, None)
    assert (device, resolve_dtype(torch, None, device)) == ("cpu", "fp32")


def test_asking_for_cuda_without_a_gpu_fails_at_load() -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device(fake_torch(cuda=False), "cuda:0")


def test_dtype_aliases_are_understood_and_unknown_ones_listed() -> None:
    torch = fake_torch(cuda=False)
    assert resolve_dtype(torch, "BF16", "cpu") == "bf16"
    assert resolve_dtype(torch, "half", "cpu") == "fp16"
    with pytest.raises(ValueError, match="use one of: bfloat16, float16, float32"):
        resolve_dtype(torch, "int8", "cpu")


def test_the_memory_budget_comes_from_the_argument_first_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MEMORY_ENV, "0.4")
    assert memory_fraction(0.8) == 0.8
    assert memory_fraction(None) == 0.4
    monkeypatch.delenv(MEMORY_ENV)
    assert memory_fraction(None) is None


@pytest.mark.parametrize("raw", ["0", "1.5", "lots"])
def test_an_invalid_memory_budget_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(MEMORY_ENV, raw)
    with pytest.raises(ValueError, match=r"between 0 and 1|in \(0, 1\]"):
        memory_fraction(None)


def test_the_memory_budget_is_applied_to_the_chosen_gpu_only() -> None:
    torch = fake_torch(cuda=True)
    apply_memory_fraction(torch, "cuda", 0.5)
    apply_memory_fraction(torch, "cuda:1", 0.25)
    apply_memory_fraction(torch, "cuda", None)
    apply_memory_fraction(torch, "cpu", 0.5)
    assert torch.budgets == [(0.5, None), (0.25, 1)]  # an index (None = current device), as torch requires
