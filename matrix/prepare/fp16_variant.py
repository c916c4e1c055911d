"""The FP16 copy of a model that onnxruntime's FP16 profiles run: converted, repaired, checked.

`onnxruntime.transformers.float16.convert_float_to_float16` leaves two defects (seen on the seed
case mha_transformer_block): the Cast nodes it inserts are appended after their consumers, so the
graph is not topologically sorted and the ONNX checker rejects it; and a float→float Cast of the
original becomes a float16→float16 Cast, which onnxruntime 1.17–1.20 mistypes when graph
optimisations are off ("InsertedPrecisionFreeCast_… does not match expected type"). Both are
repaired with onnxruntime's own graph helpers, and a variant is kept only once the full ONNX
checker (strict shape and type inference included) accepts it: no cell ever runs an invalid model.

Variants are cached in the artifact folder, keyed by prepare's own code (matrix/prepare/*.py is
hashed into every artifact key) and the host's converter versions: a change here re-runs their cells.
"""

from __future__ import annotations

from pathlib import Path

import onnx


class InvalidVariant(ValueError):
    """The FP16 variant is not a valid ONNX model."""


def _fp16_model(model: onnx.ModelProto, keep_fp32: list[str]) -> onnx.ModelProto:
    """The FP16 copy with FP32 inputs and outputs; `keep_fp32` (exact node names) stay FP32."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    fp16 = OnnxModel(convert_float_to_float16(model, keep_io_types=True, op_block_list=DEFAULT_OP_BLOCK_LIST,
                                              node_block_list=keep_fp32))
    fp16.enable_shape_infer = False  # the converter's ONNX shape inference has already typed every value
    fp16.remove_useless_cast_nodes()
    fp16.topological_sort()
    return fp16.model


def write_fp16_variant(model: onnx.ModelProto, keep_fp32: list[str], path: Path) -> None:
    """Write the FP16 copy to `path`; raise InvalidVariant (and leave no file) if the checker rejects it."""
    onnx.save(_fp16_model(model, keep_fp32), str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        path.unlink()
        raise InvalidVariant(f"the FP16 variant fails the ONNX checker: {exc}") from None
