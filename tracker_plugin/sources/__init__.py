"""Adapters that move run histories between a tracker and the common frame."""
