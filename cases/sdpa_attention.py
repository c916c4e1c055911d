"""Seed 003: F.scaled_dot_product_attention compiled wrong by TensorRT 10.7 on an L4.

Two cases with the same weights and inputs: attention through F.scaled_dot_product_attention
(the TorchScript exporter splits its scale as sqrt(scale) on Q and on K) and the explicit twin
(matmul, one scale of 0.125 on the scores, softmax). In PyTorch they agree; on TensorRT 10.7 the
SDPA engine differed from the explicit one by 1373.39, and 10.8 fixed it.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from matrix.case import Export, case

HEAD_DIM = 64  # scale 1/sqrt(64) = 0.125, as in NVIDIA/TensorRT#4333


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, use_sdpa: bool):
        super().__init__()
        self.heads, self.use_sdpa = heads, use_sdpa
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.use_sdpa:
            context = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            context = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(context.transpose(1, 2).reshape(b, s, d))


def _attention(use_sdpa: bool, batch: int, tokens: int, heads: int):
    module = Attention(heads * HEAD_DIM, heads, use_sdpa)
    return module, {"x": torch.randn(batch, tokens, heads * HEAD_DIM)}


@case(params={"batch": [1]}, seed=3, export=Export(opset=17, output_names=("attn",)))
def sdpa_attention(batch: int, tokens: int = 197, heads: int = 12):
    """Self-attention through F.scaled_dot_product_attention (ViT-B/16 shape: 197 tokens, 12 heads)."""
    return _attention(True, batch, tokens, heads)


@case(params={"batch": [1]}, seed=3, export=Export(opset=17, output_names=("attn",)))
def explicit_attention(batch: int, tokens: int = 197, heads: int = 12):
    """The same attention written out (matmul, scale 0.125, softmax, matmul): the known-good twin."""
    return _attention(False, batch, tokens, heads)
