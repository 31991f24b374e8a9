"""Tiny models for the torch front-end's tests (factories, as the CLI takes them)."""

from __future__ import annotations

import torch


def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    return model, torch.randn(8, 16)


def gpt2(layers: int = 2) -> tuple[torch.nn.Module, dict]:
    from maxshard.torch.examples import gpt2

    return gpt2(layers=layers, hidden=64, heads=4, vocab=128, batch=4, sequence=16)


def llama(layers: int = 2) -> tuple[torch.nn.Module, dict]:
    from maxshard.torch.examples import llama

    return llama(layers=layers, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=128,
                 batch=4, sequence=16)  # fmt: skip


class _DataDependent(torch.nn.Module):
    """Branches on a tensor's value: fake tensors cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y * 2 if y.sum().item() > 0 else y


def untraceable() -> tuple[torch.nn.Module, torch.Tensor]:
    return _DataDependent(), torch.randn(2, 4)
