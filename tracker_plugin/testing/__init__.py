"""For your own tests: training runs whose answer is known.

:func:`synthetic_run` logs a run whose loss follows a power law in tokens (or the
lr-annealing law on a planned schedule), plus noise, with a fixed or a dynamic batch;
:func:`multi_power_run` one that follows the multi-power law on any planned lr
(:class:`MultiPowerLaw`). Each returns a dataframe in the CSV format, which
:func:`tracker_plugin.analyze` takes as it is, or which you log into your tracker to test
a job that reads it back.

Nothing else in the package imports this module. The doubles the project tests itself
with (a W&B GraphQL server, an MLflow server launcher, tiny trainers) live in its source
tree and are not installed.
"""

from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run, synthetic_run

__all__ = ["MultiPowerLaw", "multi_power_run", "synthetic_run"]
