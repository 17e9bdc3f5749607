"""The live forecast in a plain training loop, replayed here from a bundled log.

    python examples/live_loop.py

A nanoGPT-style loop calls ``live.update`` after each step it logs; forecasts run on a
background thread, so the loop never waits. Here the rows come from the bundled nanoGPT
log, cut at step 5,000 as if the run were there, with its clock made up at 0.33 s a step.
"""

import pandas as pd

from tracker_plugin.live import LiveForecast

log = pd.read_csv("examples/runs/nanogpt-124M-adamw-llmc.csv")  # stands in for the loop
live = LiveForecast([3.3, 3.2], plan="wsd:warmup=250,total=9536,decay=2000,final=0", tokens_per_step=524_288)
for row in log[log.step <= 5000].itertuples():  # for step in range(max_steps): ... loss.backward() ...
    live.update(row.step, row.train_loss, lr=row.lr, time=1.7e9 + 0.33 * row.step)
result = live.forecast()  # the latest rows, now (the background ones keep to their cadence)
print(live.status)
print("\n".join(result.lines()) if result else "")
live.close()
