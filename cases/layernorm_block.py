"""Seed 004: LayerNorm FP32 constraints ignored inside a Myelin-fused region (TensorRT 8.6).

A pre-norm transformer MLP stack with many LayerNormalization nodes (opset 17 exports them as
one op). Profiles hold LayerNorm in FP32 inside an FP16 build, selected by op type; the
TensorRT engine records which layers really ran in FP32. Expected on 8.6: not honoured.
"""

import torch
from torch import nn

from matrix.case import Export, case


class MlpStack(nn.Module):
    def __init__(self, dim: int, depth: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.mlps = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                                  for _ in range(depth))
        self.final = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, mlp in zip(self.norms, self.mlps):
            x = x + mlp(norm(x))
        return self.final(x)


@case(params={"batch": [2]}, export=Export(opset=17, output_names=("features",)))
def layernorm_block(batch: int, tokens: int = 64, dim: int = 384, depth: int = 4):
    """Four pre-norm MLP blocks (LayerNorm → Linear → GELU → Linear) and a final LayerNorm."""
    # Inputs with a large mean and spread: LayerNorm statistics in FP16 lose digits here.
    x = torch.randn(batch, tokens, dim) * 8 + 30
    return MlpStack(dim, depth), {"x": x}
