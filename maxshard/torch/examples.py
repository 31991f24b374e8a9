"""Factories for ``maxshard torch plan MODULE:FACTORY``: each returns
``(model, example_args)``.

    maxshard torch plan maxshard.torch.examples:gpt2 --mesh 2x2
    maxshard torch plan maxshard.torch.examples:mlp --mesh 4

``gpt2`` and ``llama`` build ``transformers`` models from configurations
(random weights, nothing downloaded); with ``device="meta"`` a model of any
size is built without memory, for planning only (``verify`` needs real
weights). ``mlp`` needs only PyTorch.
"""

from __future__ import annotations

from typing import Any

import torch


def mlp(
    batch: int = 32, width: int = 256, hidden: int = 1024, device: str = "cpu"
) -> tuple[Any, Any]:
    """Two linear layers with a GELU between them."""
    torch.manual_seed(0)
    with torch.device(device):
        model = torch.nn.Sequential(
            torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width)
        )
        return model, torch.randn(batch, width)


def gpt2(
    layers: int = 2,
    hidden: int = 512,
    heads: int = 8,
    vocab: int = 8192,
    batch: int = 16,
    sequence: int = 256,
    device: str = "cpu",
) -> tuple[Any, Any]:
    """A GPT-2 language model (``transformers``), small by default."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab,
        n_positions=max(sequence, 64), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        use_cache=False, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return _language_model(GPT2LMHeadModel, config, batch, sequence, device)


def llama(
    layers: int = 2,
    hidden: int = 512,
    intermediate: int = 1376,
    heads: int = 8,
    kv_heads: int = 4,
    vocab: int = 8192,
    batch: int = 16,
    sequence: int = 256,
    device: str = "cpu",
) -> tuple[Any, Any]:
    """A LLaMA language model (``transformers``), small by default."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
        num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
        max_position_embeddings=max(sequence, 64), use_cache=False,
    )  # fmt: skip
    return _language_model(LlamaForCausalLM, config, batch, sequence, device)


def _language_model(
    kind: Any, config: Any, batch: int, sequence: int, device: str
) -> tuple[Any, Any]:
    """A ``transformers`` language model of class ``kind`` built from
    ``config`` on ``device`` (weights seeded), with a batch of token ids."""
    torch.manual_seed(0)
    with torch.device(device):
        model = kind(config)  # before the ids: the weights as they always were
        return model, {"input_ids": torch.randint(0, config.vocab_size, (batch, sequence))}


def llama3_8b(layers: int = 32, batch: int = 8, sequence: int = 2048) -> tuple[Any, Any]:
    """LLaMA-3 8B's shapes on the meta device (planning only)."""
    return llama(layers=layers, hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256,
                 batch=batch, sequence=sequence, device="meta")  # fmt: skip


def gpt2_xl(layers: int = 48, batch: int = 8, sequence: int = 1024) -> tuple[Any, Any]:
    """GPT-2 XL's shapes on the meta device (planning only)."""
    return gpt2(
        layers=layers,
        hidden=1600,
        heads=25,
        vocab=50257,
        batch=batch,
        sequence=sequence,
        device="meta",
    )


#: The real shapes the benchmark tools trace, by name (meta device).
REAL_SHAPES = {"gpt2-xl": gpt2_xl, "llama3-8b": llama3_8b}
