"""The analysis: pure functions from a validated frame to frozen results.

Nothing here does I/O, prints, or imports a tracker, the report or the CLI.
"""
