"""What a run planned: its lr and batch schedules, read from params, flags or the log."""
