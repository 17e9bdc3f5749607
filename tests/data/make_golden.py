"""Regenerate the parity runs and the golden values the parity tests compare against.

The golden values come from the original script, ``find_target_loss.py``, run on
synthetic runs with a known answer. The tests read only the files written here:

    python tests/data/make_golden.py ../shared/reference/find_target_loss.py [--rewrite-runs]

A run's CSV file is written only when it is missing (or with ``--rewrite-runs``), so the
golden values are always those of the committed files: the runs are seeded, but another
CPU or NumPy may round the last digit of a loss differently. Every value in the
golden file is the reference's own (its loader, EMA, crossing, ``curve_fit`` and sweep); the
file records the SHA-256 of the script that made it.

Two runs are short (3,000-3,500 steps). Two are long and logged at every step (12,000
steps, fixed and dynamic batch), with targets the reference's fit puts 10x to 70x past the
log: far extrapolations magnify any difference in the fitted parameters, so these pin the
power law's fit itself, not only its neighbourhood. Their warmup outlasts the EMA's start-up
(the reference fits the lagged EMA from the end of warmup), so the fit is well posed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import scipy

from tracker_plugin.testing import synthetic_run

HERE = Path(__file__).parent

RUNS = [
    {
        "file": "parity_fixed.csv",
        "make": {"steps": 3000, "batch": 524_288.0, "l0": 2.0, "a": 3.0, "alpha": 0.3, "noise": 0.02, "warmup": 100, "seed": 1},
        "ema_token_window": 5e7,
        "targets": [5.0, 4.7, 4.3, 4.2, 1.9],
        "batch_schedule": None,
    },
    {
        "file": "parity_dynamic.csv",
        "make": {
            "steps": 3500,
            "batch": [(0, 262_144.0), (1000, 524_288.0), (2000, 1_048_576.0)],
            "l0": 2.2,
            "a": 2.5,
            "alpha": 0.35,
            "noise": 0.02,
            "warmup": 150,
            "seed": 2,
        },
        "ema_token_window": 1e8,
        "targets": [5.5, 4.5, 4.1, 3.9, 2.1],
        "batch_schedule": ["0:262144", "2.6e8:524288", "7.9e8:1048576", "3e9:2097152"],
    },
    {
        "file": "parity_long_fixed.csv",
        "make": {"steps": 12_000, "batch": 524_288.0, "l0": 2.0, "a": 3.0, "alpha": 0.3, "noise": 0.02, "warmup": 500, "seed": 3},
        "ema_token_window": 5e7,
        # reached; 10x, 25x, 45x and 70x past the log under the reference's fit; below its L0
        "targets": [5.0, 4.2, 3.8, 2.913, 2.725, 2.632, 2.573, 2.1],
        "batch_schedule": None,
    },
    {
        "file": "parity_long_dynamic.csv",
        "make": {
            "steps": 12_000,
            "batch": [(0, 262_144.0), (4000, 524_288.0), (8000, 1_048_576.0)],
            "l0": 2.2,
            "a": 2.5,
            "alpha": 0.35,
            "noise": 0.02,
            "warmup": 1500,
            "seed": 4,
        },
        "ema_token_window": 1e8,
        # reached; 10x, 25x, 45x and 70x past the log (all in the stage the schedule
        # adds after the log); below the fit's L0
        "targets": [5.5, 4.0, 3.5, 2.832, 2.708, 2.65, 2.615, 2.3],
        "batch_schedule": ["0:262144", "1.048576e9:524288", "3.145728e9:1048576", "2e10:2097152"],
    },
]
SWEEP = {"sweep_step": 300, "sweep_min_window": 500}


def main(reference_path: str, rewrite_runs: bool = False) -> None:
    spec = importlib.util.spec_from_file_location("reference", reference_path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    golden = []
    for run in RUNS:
        path = HERE / run["file"]
        if rewrite_runs or not path.exists():
            synthetic_run(**run["make"]).to_csv(path, index=False, float_format="%.17g")
        golden.append(_golden(ref, path, run))
    made_by = {
        "script": Path(reference_path).name,
        "sha256": hashlib.sha256(Path(reference_path).read_bytes()).hexdigest(),
        "scipy": scipy.__version__,
        "numpy": np.__version__,
    }
    document = {"reference": made_by, "sweep": SWEEP, "runs": golden}
    (HERE / "parity_golden.json").write_text(json.dumps(document, indent=1) + "\n")


def _golden(ref, path: Path, run: dict) -> dict:
    df, _ = ref.load_run(str(path), "train_loss", None)
    schedule = ref.parse_batch_schedule(run["batch_schedule"]) if run["batch_schedule"] else None
    stages = ref.batch_stages(df)
    fit_start = ref.detect_warmup_end(df, stages)
    smoothed = ref.token_window_ema(df["train_loss"].to_numpy(float), df["batch"].to_numpy(), run["ema_token_window"])
    post = (df["step"] >= fit_start).to_numpy()
    out = {
        key: run[key] for key in ("file", "ema_token_window", "targets", "batch_schedule")
    } | {"fit_start_step": fit_start, "smoothed": smoothed.tolist(), "targets_result": []}
    for target in run["targets"]:
        entry: dict = {"target": target}
        cross = ref.interpolated_crossing(df, smoothed, target)
        if cross is not None:
            entry |= {"status": "reached", "step": float(cross[0]), "tokens": float(cross[1])}
        else:
            t_pred, info = ref.fit_and_solve(df["tokens"].to_numpy()[post], smoothed[post], target)
            if t_pred is None:
                entry |= {"status": "unreachable", "reason": info}
            else:
                entry |= {
                    "status": "extrapolated",
                    "tokens": float(t_pred),
                    "step": float(ref.tokens_to_step(t_pred, df, schedule)),
                    "params": [float(v) for v in info],
                }
            rows = ref.stability_sweep(
                df, smoothed, fit_start, target, SWEEP["sweep_step"], SWEEP["sweep_min_window"], schedule
            )
            entry["sweep"] = [
                {
                    "max_step": int(max_step),
                    "tokens": None if t_pred is None else float(t_pred),
                    "step": None if s_pred is None else float(s_pred),
                    "params": None if t_pred is None else [float(v) for v in info],
                }
                for max_step, _, t_pred, s_pred, info in rows
            ]
        out["targets_result"].append(entry)
    return out


if __name__ == "__main__":
    np.seterr(all="ignore")
    main(sys.argv[1], rewrite_runs="--rewrite-runs" in sys.argv[2:])
