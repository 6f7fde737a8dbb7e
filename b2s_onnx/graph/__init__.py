"""What the lowering needs to know about an ONNX model: types, constants, versions."""
