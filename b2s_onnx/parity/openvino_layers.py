"""OpenVINO's CPU plugin with chosen layer outputs exposed, keyed by IR (layer id, port id).

``core.read_model`` keeps each IR layer's name as the op's friendly name, so layers are
found by name; a name used twice is resolved by type and topological position. Exposing
an output adds a Result, which stops the plugin from fusing across it: the exposed run can
differ from the plain one (notably in INT8 models), and callers report by how much.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import IRModel, Layer

#: The CPU plugin runs bf16 on AMX/AVX512-BF16 machines unless told otherwise.
F32_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
#: With hundreds of outputs, fusing elementwise chains into JIT subgraphs ("snippets")
#: doubles compile time (measured) while the exposed outputs split most chains anyway.
EXPOSED_CONFIG = {**F32_CONFIG, "SNIPPETS_MODE": "DISABLE"}


def _same_type(ir_type: str, ov_type: str) -> bool:
    return ir_type.lower() == ov_type.lower()


class OpenVINOLayers:
    """One read of the IR; :meth:`run` compiles a copy with some outputs exposed."""

    def __init__(
        self, ir: IRModel, xml: str | os.PathLike, bin_path: str | os.PathLike | None = None
    ) -> None:
        import openvino as ov

        self.core = ov.Core()
        self.model = self.core.read_model(str(xml), None if bin_path is None else str(bin_path))
        self._by_name = {op.get_friendly_name(): op for op in self.model.get_ordered_ops()}
        self._ops = self._match(ir, self.model.get_ordered_ops())
        self._port_index = {
            layer.id: {port.id: k for k, port in enumerate(layer.outputs)}
            for layer in ir.layers.values()
        }

    @staticmethod
    def _match(ir: IRModel, ops: Sequence) -> dict[str, str]:
        """IR layer id -> OpenVINO friendly name (unique in the model read)."""
        by_name: dict[str, list] = {}
        for op in ops:
            by_name.setdefault(op.get_friendly_name(), []).append(op)
        matched: dict[str, str] = {}
        for layer in ir.layers.values():
            candidates = by_name.get(layer.name, [])
            if len(candidates) > 1:
                candidates = [op for op in candidates if _same_type(layer.type, op.get_type_name())]
            if len(candidates) == 1:
                matched[layer.id] = layer.name
        return matched

    def has(self, layer: Layer) -> bool:
        return layer.id in self._ops

    def constant_input(self, layer: Layer, index: int) -> np.ndarray | None:
        """The value of input ``index`` of ``layer`` when OpenVINO holds it as a constant
        (possibly behind a Convert of decompressed weights)."""
        name = self._ops.get(layer.id)
        if name is None:
            return None
        source = self._by_name[name].input_value(index).get_node()
        if source.get_type_name() == "Convert":
            source = source.input_value(0).get_node()
        if source.get_type_name() != "Constant":
            return None
        return np.asarray(source.get_data(), dtype=np.float64)

    def run(
        self, feeds: Mapping[str, np.ndarray], ports: Iterable[tuple[str, int]]
    ) -> tuple[dict[tuple[str, int], np.ndarray], dict[str, np.ndarray], object]:
        """Runs with ``ports`` exposed; returns (exposed arrays, final outputs by tensor
        name, the request that owns the arrays' memory: keep it while using them)."""
        model = self.model.clone()
        ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
        wanted = [key for key in ports if key[0] in self._ops]
        outputs = [ops[self._ops[lid]].output(self._port_index[lid][pid]) for lid, pid in wanted]
        final_count = len(model.get_results())
        if outputs:
            model.add_outputs(outputs)
        positions = {
            (r.input_value(0).get_node().get_friendly_name(), r.input_value(0).get_index()): k
            for k, r in enumerate(model.get_results())
        }
        try:
            compiled = self.core.compile_model(model, "CPU", EXPOSED_CONFIG)
        except RuntimeError:  # a plugin without the snippets property
            compiled = self.core.compile_model(model, "CPU", F32_CONFIG)
        request = compiled.create_infer_request()
        request.infer(_ov_feeds(compiled, feeds), share_outputs=True)
        exposed = {}
        for lid, pid in wanted:
            k = positions[(self._ops[lid], self._port_index[lid][pid])]
            exposed[(lid, pid)] = request.get_output_tensor(k).data
        finals = {}
        for k in range(final_count):
            data = request.get_output_tensor(k).data
            for name in compiled.outputs[k].get_names():
                finals[name] = data
        return exposed, finals, request


def _ov_feeds(compiled, feeds: Mapping[str, np.ndarray]) -> dict:
    by_port = {}
    for port in compiled.inputs:
        match = [n for n in feeds if n in port.get_names()]
        if not match:
            raise B2SError(f"OpenVINO input {sorted(port.get_names())} has no converted input")
        by_port[port] = feeds[match[0]]
    return by_port
