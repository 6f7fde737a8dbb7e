"""OpenVINO IR (v10, v11) reading and conversion to ONNX."""
