"""The val rows of a modded-nanogpt record log as a CSV (step,time,val_loss[,train_loss]).

    python extract.py LOG.txt > OUT.csv

A row per line ``step:N/T val_loss:X train_time:Yms`` (time in seconds); ``train_loss``
is filled where a line of that step also logs ``train_loss:X``, else left empty, and
there is no ``train_loss`` column when no line logs one (as in ``runs-time``'s
validation-only logs: an empty column would be read as the loss). The step-0 row is
left out.
"""

from __future__ import annotations

import re
import sys

VAL = re.compile(r"^step:(\d+)/\d+ val_loss:([0-9.]+) train_time:(\d+)ms")
TRAIN = re.compile(r"^step:(\d+)/\d+ train_loss:([0-9.]+)")


def main(path: str) -> None:
    val: dict[int, tuple[float, float]] = {}
    train: dict[int, float] = {}
    with open(path, encoding="utf-8") as log:
        for line in log:
            if match := VAL.match(line):
                val[int(match[1])] = (int(match[3]) / 1000.0, float(match[2]))
            elif match := TRAIN.match(line):
                train[int(match[1])] = float(match[2])
    steps = [s for s in sorted(val) if s != 0]  # step 0, the untrained model: runs-time holds none either
    with_train = any(s in train for s in steps)
    print("step,time,val_loss,train_loss" if with_train else "step,time,val_loss")
    for step in steps:
        seconds, loss = val[step]
        print(f"{step},{seconds},{loss},{train.get(step, '')}" if with_train else f"{step},{seconds},{loss}")


if __name__ == "__main__":
    main(sys.argv[1])
