"""TensorRT data types, by their enum names (`trt.DataType.X.name`), against numpy's (Python 3.8,
stdlib only: arrays come in, numpy itself is not needed): which layer outputs may be forced to
FP32, and how inputs meet engine bindings.

- Only floating-point outputs are made FP32: forcing FLOAT on an integer output (TopK's indices,
  a Shape) would retype a tensor that other layers read as integers. A layer with no floating
  output is not held in FP32 at all (Polygraphy's `debug precision` skips such layers too).
- TensorRT before 10 has no INT64 I/O: its ONNX parser turns an INT64 input (BGE's `input_ids`)
  into an INT32 binding, and Polygraphy's runner rejects an int64 array for it. Such an input is
  cast when its values fit in int32, and the cast is recorded; values that do not fit are an error.
"""

FLOATING = ("FLOAT", "HALF", "BF16")
INT32_RANGE = (-2 ** 31, 2 ** 31 - 1)


def floating_outputs(dtype_names):
    """Indices of the outputs whose type is FP32, FP16 or BF16."""
    return [index for index, name in enumerate(dtype_names) if name in FLOATING]


def fit_inputs(inputs, bindings):
    """inputs: {name: array}; bindings: {name: TensorRT dtype name of the engine's input}.
    Returns (arrays to feed, casts made as text)."""
    fed, casts = {}, []
    for name, array in inputs.items():
        if array.dtype == "int64" and bindings.get(name) == "INT32":
            low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
            if low < INT32_RANGE[0] or high > INT32_RANGE[1]:
                raise ValueError("input {!r} is int64 with values in [{}, {}], outside int32: the engine's binding "
                                 "is INT32 (TensorRT before 10 has no INT64 inputs)".format(name, low, high))
            array = array.astype("int32")
            casts.append("{}: int64 -> int32 (the engine's binding is INT32; values fit)".format(name))
        fed[name] = array
    return fed, casts
