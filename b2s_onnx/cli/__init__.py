"""The ``b2s-onnx`` command line: a thin layer over the Python API."""
