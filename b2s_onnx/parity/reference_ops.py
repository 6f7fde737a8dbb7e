"""The ops' numpy references as custom ops of ``onnx.reference.ReferenceEvaluator``.

One class per (domain, op type), built from the same ``ops`` modules the lowering uses, so
the reference run and the lowered graph can only agree if the lowering is right.
"""

from __future__ import annotations

from collections.abc import Iterable

from onnx.reference.op_run import OpRun

from b2s_onnx.ops import OP_MODULES, NodeRef


def _make_op(op_type: str, domain: str) -> type[OpRun]:
    module = OP_MODULES[op_type]

    if hasattr(module, "INDEX_ROLES"):

        def _run(self, data, first, second, third):
            ref = NodeRef(op_type, self.onnx_node.name or op_type)
            return (module.reference(data, first, second, third, node=ref),)

    else:

        def _run(self, data, block_size=1, mode=None):
            ref = NodeRef(op_type, self.onnx_node.name or op_type)
            return (module.reference(data, int(block_size), str(mode), node=ref),)

    # ``op_schema = None``: OpRun would otherwise apply ONNX's schema of the same name
    # (ONNX's DepthToSpace wants ``blocksize``), though ours is a different op.
    return type(op_type, (OpRun,), {"op_domain": domain, "op_schema": None, "_run": _run})


def reference_ops(domains: Iterable[str]) -> list[type[OpRun]]:
    return [_make_op(op_type, domain) for domain in domains for op_type in OP_MODULES]
