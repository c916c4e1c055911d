"""Seed 000: TensorRT 10.0.0's fused `_gemm_mha_v2` kernel mismatches PyTorch in FP16.

A BERT-base-shaped self-attention block written out op by op (Q/K/V projections, scaled dot
product, softmax, output projection), the pattern TensorRT fuses into one MHA kernel when built
in FP16. Expected on TensorRT: fail on 10.0.0, pass on 9.3 and 10.0.1.6+.
"""

import math

import torch
from torch import nn

from matrix.case import Export, case


class AttentionBlock(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, _, s, _ = context.shape
        return self.out(context.transpose(1, 2).reshape(b, s, -1))


@case(params={"batch": [1]}, export=Export(opset=17, output_names=("hidden",)))
def gemm_mha_fp16(batch: int, seq_len: int = 128, hidden: int = 768, heads: int = 12):
    """BERT-base self-attention block (768 hidden, 12 heads, 128 tokens)."""
    return AttentionBlock(hidden, heads), {"x": torch.randn(batch, seq_len, hidden)}
