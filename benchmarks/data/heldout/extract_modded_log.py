"""Rows of a modded-nanogpt training log as a CSV: step,time,val_loss[,train_loss].

    python extract_modded_log.py LOG.txt OUT.csv

Reads the log's ``step:N/T val_loss:X train_time:Yms`` and ``step:N/T train_loss:X
train_time:Yms`` lines (the training script at the top of the log and the per-step lines
with only a time are skipped); one row per step that logged a loss, ``time`` in seconds.
"""

from __future__ import annotations

import csv
import re
import sys

LINE = re.compile(r"^step:(\d+)/\d+ (val_loss|train_loss):([0-9.]+) train_time:(\d+)ms")


def rows(lines: list[str]) -> list[tuple[int, str, str, str]]:
    by_step: dict[int, dict[str, str]] = {}
    for line in lines:
        found = LINE.match(line)
        if found:
            step, key, value, ms = found.groups()
            row = by_step.setdefault(int(step), {"time": f"{int(ms) / 1000:.3f}"})
            row[key] = value
    return [(s, r["time"], r.get("val_loss", ""), r.get("train_loss", "")) for s, r in sorted(by_step.items())]


def main() -> None:
    source, target = sys.argv[1:3]
    with open(source) as f:
        table = rows(f.read().splitlines())
    # As the runs-time logs: no train_loss column when the log has no training loss.
    keep = 4 if any(row[3] for row in table) else 3
    with open(target, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["step", "time", "val_loss", "train_loss"][:keep])
        writer.writerows(row[:keep] for row in table)


if __name__ == "__main__":
    main()
