"""The common frame: one run's history (step, tokens, batch, lr, time, loss), validated."""
