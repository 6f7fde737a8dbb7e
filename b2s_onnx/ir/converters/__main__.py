"""``python -m b2s_onnx.ir.converters`` prints the supported-op table for docs/supported_ops.md."""

from b2s_onnx.ir.converters.registry import markdown_table

print(markdown_table(), end="")
