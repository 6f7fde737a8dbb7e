import os

from hypothesis import HealthCheck, settings

# CI runs a bounded number of examples; B2S_HYPOTHESIS_PROFILE=thorough runs many more.
settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("B2S_HYPOTHESIS_PROFILE", "ci"))
