"""Settings every unit test shares."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# A property's verdict must not depend on how busy the machine is: hypothesis' default 200 ms
# deadline per example and its too-slow health check are timed assertions, so neither applies.
# A test that sets its own `@settings` keeps these for the fields it does not set.
settings.register_profile("gangplugin", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gangplugin")
