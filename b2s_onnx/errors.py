"""The one error type users catch.

Everything the tool rejects because of its *input* (a model, a node, a value) raises
:class:`B2SError`. It subclasses ``ValueError`` so callers that already guard against bad
values keep working, and the CLI maps it to exit code 2 without a traceback. Anything
else that escapes is a bug of ours (exit code 3).
"""

from __future__ import annotations


class B2SError(ValueError):
    """Invalid input: the message names the node (or file), the input and the rule broken."""


class OpValidationError(B2SError):
    """A data-movement node breaks one of its op's rules.

    The structured fields let reports and tests point at the exact place without parsing
    the message.
    """

    def __init__(self, op_type: str, node_name: str, input_name: str, rule: str) -> None:
        self.op_type = op_type
        self.node_name = node_name
        self.input_name = input_name
        self.rule = rule
        super().__init__(f"{op_type} '{node_name}': {rule}")
