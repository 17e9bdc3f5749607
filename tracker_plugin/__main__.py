"""``python -m tracker_plugin``: the same as the ``tracker-plugin`` command."""

from tracker_plugin.cli import entry_point

entry_point()
