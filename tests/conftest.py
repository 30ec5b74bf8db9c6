import os
import sys

from hypothesis import HealthCheck, settings

# tests/bruteforce.py and tests/strategies.py are imported as top-level modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
