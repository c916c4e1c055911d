"""Causes that say what is refused, read the same across releases, and refusals that are
`unsupported` wherever they are met (session, first inference, parser, builder): checked on real
TensorRT-RTX 1.4 and 1.7 builds and real onnxruntime 1.31.1 and 1.32 sessions of ONNX node tests."""

import json

import pytest

from conftest import matrix_file
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import read_run
from matrix.worker.trt_causes import builder_refusal, errors_text, refusal_cause

# TensorRT-RTX's own lines (tensorrt.log of real builds here), as the worker reads them.
INPUT_TYPE = ('[E] In node -1 with name:  and operator:  (importInput): UNSUPPORTED_NODE: Assertion failed: '
              'convertDtype(onnxDtype.elem_type(), &trtDtype) && "Failed to convert ONNX date type to TensorRT data type."')
NO_OP_14 = ("[E] In node 0 with name:  and operator: LinearAttention (parseNodeStaticCheck): INTERNAL_ERROR: Op type "
            "LinearAttention is not supported in TensorRT-RTX.")
NO_OP_17 = ("[E] In node 0 with name:  and operator: LinearAttention (importLinearAttention): INVALID_NODE: Assertion "
            "failed: creator && getPluginCreatorVersion(creator) == CreatorVersion::kV3ONE: failed to load "
            "LinearAttention plugin.")
NO_PLUGIN_17 = ('[E] In node 0 with name:  and operator: CumProd (checkFallbackPluginImporter): INVALID_NODE: creator && '
                '"Plugin not found, are the plugin name, version, and namespace correct?"')
INVALID_NODE = ["[E] ITensor::getDimensions: Error Code 4: API Usage Error (node_of_sum: ElementWiseOperation SUM requires "
                "inputs with type kFLOAT, kHALF, kBF16, kFP8, or kINT8, kINT32, or kINT64. But type is UInt8. In "
                "validateTypes at /_src/optimizer/common/nodes/elementWiseNode.cpp:72)",
                "[E] [checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime (In catchCudaError at "
                "/_src/common/dispatch/checkMacros.cpp:250 (cudaError 35: CUDA driver version is insufficient))",
                "[E] ModelImporter.cpp:140: While parsing node number 0 [Add -> \"sum\"]:",
                "[E] In node 0 with name:  and operator: Add (parseNode): INVALID_NODE: Invalid Node - node_of_sum",
                "[!] Could not parse ONNX correctly"]


def test_a_cause_names_what_is_refused_and_reads_the_same_across_releases():
    # The parser names no type: the model's inputs do (float32 it takes, int16 it does not).
    assert refusal_cause(errors_text([INPUT_TYPE]), {"float32", "int16"}) == "an input of type int16 (UNSUPPORTED_NODE)"
    # One missing operator, three wordings across 1.4 and 1.7: one cause.
    causes = {refusal_cause(errors_text([line])) for line in (NO_OP_14, NO_OP_17)}
    assert causes == {"LinearAttention (operator not supported)"}
    assert refusal_cause(errors_text([NO_PLUGIN_17])) == "CumProd (operator not supported)"
    # An invalid node: why (the builder's error before it) is kept in the words, its type in the cause.
    words = errors_text(INVALID_NODE)
    assert words.startswith("ITensor::getDimensions: Error Code 4: API Usage Error (node_of_sum:") and "catchCudaError" not in words
    assert refusal_cause(words) == "Add (type UInt8)"
    # The builder refusing a type or an operator is a refusal; an internal assertion is not.
    assert builder_refusal("Error Code 1: Internal Error (Node {ForeignNode[node_of_sum]} cannot be quantized by x.") \
        == "builder: an INT8 tensor without a DQ node (cannot be quantized)"
    assert builder_refusal("API Usage Error (Tensor output has datatype FP8 but is not produced by IPluginLayer, ...") \
        == "builder: FP8 network output outside Q/DQ"
    assert builder_refusal("Internal Error (Assertion !layerImpls.empty() failed. node_of_result has no runners)") is None


TESTS = ["test_add_int16", "test_cumprod_1d", "test_add_int8", "test_add_uint8", "test_convinteger_with_padding",
         "test_attention_local_window", "test_cast_FLOAT_to_FLOAT8E4M3FN"]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory, cache_dir):
    body = ('[profiles.fp32]\nprecision = "fp32"\n[cases.node]\nsuite = "onnx-backend-node"\nprofiles = ["fp32"]\n'
            f"include = {json.dumps(TESTS)}\n")
    config = matrix_file(tmp_path_factory.mktemp("causes"), cache_dir, body,
                         environments=("trt-rtx-1.4", "trt-rtx-1.7", "ort-1.31.1", "ort-1.32"))
    frame = read_run(MatrixRun(build_plan(config)).execute())
    return {(row.split("/")[1][5:], env): (status, error.split(" — ")[0] if isinstance(error, str) else None)
            for row, env, status, error in zip(frame["row_id"], frame["env"], frame["status"], frame["error"])}


def test_tensorrt_rtx_refusals_say_what_and_stay_refusals(refusals):
    for env in ("trt-rtx-1.4", "trt-rtx-1.7"):
        assert refusals[("test_add_int16", env)] == ("unsupported", "an input of type int16 (UNSUPPORTED_NODE)")
        assert refusals[("test_cumprod_1d", env)] == ("unsupported", "CumProd (operator not supported)")
        assert refusals[("test_add_uint8", env)] == ("unsupported", "Add (type UInt8)")
        assert refusals[("test_cast_FLOAT_to_FLOAT8E4M3FN", env)] == ("unsupported", "builder: FP8 network output outside Q/DQ")
    # 1.4's builder refuses INT8 arithmetic without a DQ node: a refusal, not an error; 1.7 builds it.
    assert refusals[("test_add_int8", "trt-rtx-1.4")] == (
        "unsupported", "builder: an INT8 tensor without a DQ node (cannot be quantized)")
    assert refusals[("test_add_int8", "trt-rtx-1.7")][0] == "built"


def test_onnxruntime_refusals_at_the_first_inference_and_of_an_attribute_are_named(refusals):
    for env in ("ort-1.31.1", "ort-1.32"):
        assert refusals[("test_convinteger_with_padding", env)] == (
            "unsupported", "ConvInteger: Non per-tensor quantization is not supported")
    assert refusals[("test_attention_local_window", "ort-1.31.1")] == (
        "unsupported", "attribute left_window_size of Attention not recognised")
    assert refusals[("test_attention_local_window", "ort-1.32")] == ("pass", None)
