"""Profile → TensorRT builder settings, as plain data (no tensorrt import: testable anywhere).

The TensorRT engine turns these names into Polygraphy's CreateConfig arguments.
- fp32: FP16 off and TF32 off, so "FP32" means IEEE FP32 matmuls, comparable with the reference
  (TensorRT enables TF32 by default on Ampere and newer; seed 004 ran trtexec with --noTF32).
- fp16: FP16 kernels allowed.
- keep_fp32: the selected layers get precision FP32 and FP32 outputs, and precision constraints
  are set to "obey" so TensorRT must honour them or fail the build (trtexec's
  --precisionConstraints=obey); engine inspection then reports what really ran.
- strongly typed (TensorRT-RTX always; full TensorRT with `typing = "strong"`): none of the above
  precision settings exist; the network's types come from the model (the FP16 ONNX copy), and
  only TF32 stays a flag (off).
- optimization "off": builder optimisation level 0 (TensorRT 8.6+; fewest tactics and fusions
  TensorRT allows — it cannot switch fusion off entirely).
"""


def builder_settings(profile, fp32_layers, strongly_typed=False):
    settings = {
        "strongly_typed": strongly_typed,
        "fp16": profile["precision"] == "fp16" and not strongly_typed,
        "tf32": False,
        "precision_constraints": "obey" if fp32_layers else None,
        "profiling_verbosity": "DETAILED",  # the engine inspector needs it for per-layer facts
        "layer_precisions": {name: "FLOAT" for name in fp32_layers},
        "layer_output_types": {name: "FLOAT" for name in fp32_layers},
    }
    if profile["optimization"] == "off":
        settings["builder_optimization_level"] = 0
    return settings
