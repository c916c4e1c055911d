"""Real onnxruntime faults, each in a model of two to fourteen nodes (CPU, onnxruntime only).

Found and bisected here over released onnxruntime wheels; the bad and good versions are in
cases/known_issues.toml and docs/known-issues.md ("Real onnxruntime regressions"), and
matrices/ort-regressions.toml runs the cases on the versions around each boundary.

- ort_clip_fp16_min_only: an FP16 Clip with only `min` given. onnxruntime 1.19.0 and 1.19.2
  take the missing `max` as 0 (the CPU kernel's float16 default), so every positive value
  becomes 0. A kernel bug: it shows with graph optimisations on and off.
- ort_pad_maxpool_fusion: Pad (constant 0) → MaxPool. From 1.17.0 to 1.31.1 the Pad is folded
  into MaxPool's own padding (PadFusion), which MaxPool fills with -inf, not 0: a border window
  whose values are all negative gives its maximum instead of 0. Optimisations off: right.
- ort_pad_avgpool_fusion: Pad (constant 0) → AveragePool(count_include_pad=0). 1.19.0 to 1.20.1
  fold the Pad into the pool without setting count_include_pad, so the padded zeros drop out of
  the border averages. Optimisations off: right.
- ort_avgpool_count_include_pad_end: AveragePool (opset 19) with a 5x1 kernel, pads 2 above and
  below, count_include_pad=1. 1.21.0 to 1.24.4 leave the end padding out of the last two rows'
  windows (their averages too large by up to 0.89 here); a kernel bug: optimisations off, too.
  onnxruntime issue #24681 (reproduced there on a 1.22.0 nightly); first good again 1.25.0 (its
  nightly 1.25.0.dev20260417008 already good: bisect names releases only, unless --pre).
- ort_layernorm_fp16_epsilon: a LayerNorm written out in FP16 (ReduceMean, Sub, Pow, ReduceMean,
  Add epsilon, Sqrt, Div, Mul, Add) with epsilon 0.5, after a Cast to FP16 and a gain. From 1.20.0 to 1.29.0 LayerNormFusion turns it
  into one LayerNormalization with epsilon 1e-5: the fusion reads the epsilon only from a float32
  constant, and 1.20.0 is the first release with an FP16 LayerNormalization kernel on the CPU (so the
  first that fuses FP16 at all). Optimisations off: right. First good again 1.30.0.
- ort_cast_int_to_bool_chain: Cast(to=INT32) → Cast(to=BOOL) → Cast(to=FLOAT): every release up to
  1.25.0 drops the INT32 Cast (optimisations on and off), so 0.5 becomes True instead of 0 → False;
  onnxruntime issue #13418. Not a regression: present in every release tried from 1.15.1 on;
  first good 1.26.0.

The Pad is written with its own ONNX symbolic (one Pad node with constant pads and value), as
models exported by other tools have it; torch's own export of F.pad computes the pads with a
dozen constant nodes that onnxruntime folds first, which would only hide the fused pair.
"""

import torch
import torch.nn.functional as F
from torch import nn

from matrix.case import Export, case


class _ZeroPad2d(torch.autograd.Function):
    """F.pad(x, (p, p, p, p)) with value 0, exported as one ONNX Pad node."""

    @staticmethod
    def forward(ctx, x, p: int):
        return F.pad(x, (p, p, p, p))

    @staticmethod
    def symbolic(g, x, p: int):
        pads = g.op("Constant", value_t=torch.tensor([0, 0, p, p, 0, 0, p, p], dtype=torch.int64))
        value = g.op("Constant", value_t=torch.tensor(0.0))
        return g.op("Pad", x, pads, value, mode_s="constant")


class ClipFp16MinOnly(nn.Module):
    def forward(self, x):
        return x.half().clamp(min=-0.5).float()


class PadMaxPool(nn.Module):
    def forward(self, x):
        return F.max_pool2d(_ZeroPad2d.apply(x, 1), kernel_size=3, stride=2)


class AvgPoolIncludePad(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(x, kernel_size=(5, 1), stride=1, padding=(2, 0), count_include_pad=True)


class LayerNormFp16(nn.Module):
    """A gain, then LayerNorm written out node by node (as older exporters and hand-written models
    have it), in FP16 between a Cast in and a Cast out."""

    def __init__(self, dim: int, epsilon: float):
        super().__init__()
        self.epsilon = epsilon
        self.gain = nn.Parameter(torch.rand(dim) + 0.5)
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        # The gain keeps the Cast away from the ReduceMean: a Cast right before it makes
        # onnxruntime 1.20-1.31 refuse to load the fused node instead (a different fault).
        h = x.half() * self.gain.half()
        centred = h - h.mean(-1, keepdim=True)
        variance = centred.pow(2).mean(-1, keepdim=True)
        return (centred / torch.sqrt(variance + self.epsilon) * self.weight.half() + self.bias.half()).float()


class CastIntToBool(nn.Module):
    def forward(self, x):
        return x.to(torch.int32).to(torch.bool).to(torch.float32)


class PadAvgPool(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(_ZeroPad2d.apply(x, 1), kernel_size=3, stride=1, count_include_pad=False)


@case(export=Export(opset=17, output_names=("y",)))
def ort_clip_fp16_min_only():
    """Cast to FP16 → Clip(min=-0.5, no max) → Cast to FP32; onnxruntime 1.19.x clips at max 0."""
    return ClipFp16MinOnly(), {"x": torch.randn(2, 64)}


@case(export=Export(opset=17, output_names=("y",)))
def ort_pad_maxpool_fusion():
    """Pad(constant 0) → MaxPool 3x3/2; onnxruntime 1.17.0-1.31.1 fuse the Pad into MaxPool (-inf padding)."""
    # Mostly negative values: the explicit zero padding wins the border windows' maximum.
    return PadMaxPool(), {"x": torch.randn(1, 4, 8, 8) - 1}


@case(export=Export(opset=17, output_names=("y",)))
def ort_pad_avgpool_fusion():
    """Pad(constant 0) → AveragePool 3x3/1, count_include_pad=0; onnxruntime 1.19.0-1.20.1 drop the zeros."""
    return PadAvgPool(), {"x": torch.randn(1, 4, 8, 8) + 1}


@case(export=Export(opset=19, output_names=("y",)))
def ort_avgpool_count_include_pad_end():
    """AveragePool-19 5x1, pads (2, 0), count_include_pad=1; onnxruntime 1.21.0-1.24.4 drop the end padding."""
    return AvgPoolIncludePad(), {"x": torch.randn(1, 4, 8, 8) + 1}


@case(export=Export(opset=17, output_names=("y",)))
def ort_layernorm_fp16_epsilon():
    """LayerNorm pattern in FP16 with epsilon 0.5; onnxruntime 1.20.0-1.29.0 fuse it with epsilon 1e-5."""
    return LayerNormFp16(32, epsilon=0.5), {"x": torch.randn(2, 7, 32)}


@case(export=Export(opset=17, output_names=("y",)))
def ort_cast_int_to_bool_chain():
    """Cast to INT32, then to BOOL, then to FLOAT; onnxruntime up to 1.25.0 skip the INT32 Cast."""
    return CastIntToBool(), {"x": torch.randn(4, 16)}
