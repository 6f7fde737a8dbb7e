import os

from hypothesis import HealthCheck, settings

# CI runs a bounded number of examples; B2S_HYPOTHESIS_PROFILE=thorough runs many more.
# CI draws the same examples every run (a failure there is reproducible, never luck);
# the thorough profile explores.
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("B2S_HYPOTHESIS_PROFILE", "ci"))


def pytest_sessionstart(session):
    """Records every UndeclaredAttributeError raised during the run, even one some code
    path caught: a converter reading an attribute its schema does not declare fails the
    session, whichever test happened to convert that layer."""
    from b2s_onnx.ir.converters import schema
    from tests.undeclared import UNDECLARED_READS

    original = schema.UndeclaredAttributeError.__init__

    def record(self, *args):
        UNDECLARED_READS.append(str(args[0]) if args else "")
        original(self, *args)

    schema.UndeclaredAttributeError.__init__ = record


def pytest_sessionfinish(session, exitstatus):
    from tests.undeclared import EXPECTED_UNDECLARED, UNDECLARED_READS

    unexpected = [m for m in UNDECLARED_READS if m not in EXPECTED_UNDECLARED]
    if unexpected:
        print("\nconverters read attributes their schemas do not declare:")
        for message in dict.fromkeys(unexpected):
            print(f"  {message}")
        session.exitstatus = 1
