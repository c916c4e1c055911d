"""ONNX ops that do no arithmetic (Python 3.8, stdlib only): the worker's profile of an FP16 copy
does not count them as computing in FP16, and a known issue's pattern followed only by them is not
followed by arithmetic that could make a failure alone."""

# Ops that only move, select or cast values.
VALUE_MOVING = {"Cast", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Tile",
                "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Pad", "DepthToSpace",
                "SpaceToDepth"}
