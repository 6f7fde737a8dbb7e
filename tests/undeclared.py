"""Undeclared attribute reads seen in this test session (filled by conftest's hook)."""

#: Messages of every UndeclaredAttributeError raised in this session.
UNDECLARED_READS: list[str] = []
#: Tests that raise the error on purpose list it here, so the session does not fail.
EXPECTED_UNDECLARED: list[str] = []
