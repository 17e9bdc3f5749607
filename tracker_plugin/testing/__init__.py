"""Test helpers shipped with the package: runs with a known answer, and tracker doubles.

Nothing here is imported by the rest of the package.
"""

from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run, synthetic_run

__all__ = ["MultiPowerLaw", "multi_power_run", "synthetic_run"]
