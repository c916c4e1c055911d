"""Seed 001: nn.MultiheadAttention loses accuracy when a whole transformer goes FP16 (TensorRT 8.6.1).

A post-norm transformer encoder block built on nn.MultiheadAttention. The matrix runs it in
FP32, in FP16 as a whole, and in FP16 with Softmax held in FP32 (the fix that worked in
NVIDIA/TensorRT#3619). Expected on 8.6.1: plain FP16 degrades, FP32 softmax restores accuracy.
"""

import torch
from torch import nn

from matrix.case import Export, case


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.ReLU(), nn.Linear(ffn, dim))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = k = x + pos
        x = self.norm1(x + self.attn(q, k, x, need_weights=False)[0])
        return self.norm2(x + self.ffn(x))


@case(params={"batch": [1]}, export=Export(opset=17, output_names=("features",)))
def mha_transformer_block(batch: int, tokens: int = 256, dim: int = 256, heads: int = 8, ffn: int = 1024):
    """nn.MultiheadAttention encoder block with a positional embedding, tracker-sized (256 tokens)."""
    inputs = {"x": torch.randn(batch, tokens, dim), "pos": torch.randn(batch, tokens, dim)}
    return EncoderBlock(dim, heads, ffn), inputs
