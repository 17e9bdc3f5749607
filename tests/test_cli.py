"""The command line: output formats, flags, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tracker_plugin as tp
from tracker_plugin.cli import expand_multi_value, main
from tracker_plugin.core.status import Status


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def olmo(data_dir):
    return data_dir / "olmo-ladder-370M-5xC.csv"


def test_text_report_has_every_part(capsys, data_dir):
    code, out, _ = run_cli(
        capsys,
        "analyze", data_dir / "parity_dynamic.csv", "--target", "5.5", "3.9", "2.1",
        "--stability-sweep", "--batch-schedule", "0:262144", "3e9:2097152", "--model", "power-law",
    )
    assert code == 0
    assert "batch: DYNAMIC, 3 stages" in out
    assert "stage" in out and "tokens (before step)" in out  # the stage table
    assert "target=5.5      REACHED (interpolated): step=" in out
    assert "stability sweep" in out and "verdict:" in out
    assert "target=2.1      UNREACHABLE: the fitted power law levels off near" in out


def test_extrapolated_line_names_fit_factor_and_flag(capsys, data_dir):
    code, out, _ = run_cli(
        capsys, "analyze", data_dir / "parity_fixed.csv", "-t", "4.2", "--ema-token-window", "5e7", "--model", "power-law"
    )
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("target=4.2"))
    assert "FORECAST BEYOND THE PLAN (fit L0=" in line and "alpha=" in line
    assert "x past observed T=" in line
    assert "** EXTRAPOLATION BEYOND WARN FACTOR **" in line


def test_json_follows_the_contract(capsys, data_dir):
    code, out, _ = run_cli(
        capsys, "analyze", data_dir / "parity_fixed.csv", "-t", "5.0", "4.2", "1.9", "--ema-token-window", "5e7", "--json",
        "--model", "power-law",
    )
    assert code == 0
    doc = json.loads(out)
    assert {"run", "loss_key", "ema_token_window", "fit_start_step", "observed", "batch", "targets"} <= set(doc)
    assert set(doc["observed"]) == {"step", "tokens", "seconds"}
    assert doc["observed"]["seconds"] is None  # the file logs no clock
    assert doc["batch"]["dynamic"] is False
    assert set(doc["batch"]["stages"][0]) == {"first_step", "last_step", "first_tokens", "last_tokens", "batch"}
    statuses = [t["status"] for t in doc["targets"]]
    assert statuses == ["reached", "forecast_beyond_plan", "unreachable"]
    for target in doc["targets"]:
        assert set(target) >= {
            "target", "status", "tokens", "step", "tokens_interval", "step_interval", "model",
            "extrapolation_factor", "note", "seconds", "seconds_interval", "seconds_left", "eta",
        }
    extrapolated = doc["targets"][1]
    assert extrapolated["model"]["name"] == "power-law"
    assert set(extrapolated["model"]["params"]) >= {"L0", "A", "alpha"}
    assert extrapolated["extrapolation_factor"] > 1
    assert doc["targets"][2]["tokens"] is None


def test_api_returns_what_the_cli_prints(capsys, data_dir):
    path = data_dir / "parity_dynamic.csv"
    _, out, _ = run_cli(capsys, "analyze", path, "-t", "4.5", "3.9", "--json")
    import pandas as pd

    analysis = tp.analyze(pd.read_csv(path), [4.5, 3.9], run=str(path))
    assert json.loads(out) == json.loads(json.dumps(tp.to_json(analysis)))


def test_plot_is_written(capsys, tmp_path, data_dir):
    png = tmp_path / "plot.png"
    code, _, _ = run_cli(capsys, "analyze", data_dir / "parity_dynamic.csv", "-t", "4.5", "3.9", "--plot", png)
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000


def test_every_reference_flag_is_accepted(capsys, data_dir):
    code, out, err = run_cli(
        capsys, "analyze", data_dir / "parity_dynamic.csv",
        "--target", "3.9", "--loss-col", "train_loss", "--ema-token-window", "5e7", "--batch-size", "1000",
        "--batch-schedule", "0:262144", "2.6e8:524288", "--fit-start-step", "200", "--fit-last-stage",
        "--extrapolation-warn-factor", "2", "--stability-sweep", "--sweep-step", "200",
        "--sweep-min-window", "300", "--convergence-tol", "0.1",
    )
    assert code == 0, err
    assert "fit start step: 2000 (start of the last batch stage" in out


def _one_line_error(capsys, *args) -> str:
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_error_missing_file(capsys, tmp_path):
    line = _one_line_error(capsys, "analyze", tmp_path / "absent.csv", "-t", "3")
    assert "absent.csv" in line and "no such file" in line


def test_error_missing_loss_column_lists_the_columns(capsys, tmp_path):
    path = tmp_path / "no-loss.csv"  # no training loss and no eval loss either
    path.write_text("step,tokens,global_batch,accuracy\n0,0,10,0.1\n1,10,10,0.2\n2,20,10,0.3\n")
    line = _one_line_error(capsys, "analyze", path, "-t", "3")
    assert str(path) in line and "no loss column" in line and "(choose one with --loss-col)" in line
    assert "'accuracy'" in line and "'global_batch'" in line


def test_error_non_numeric_values(capsys, tmp_path):
    path = tmp_path / "text.csv"
    path.write_text("step,train_loss,global_batch\n0,5.0,10\n1,four,10\n2,3.0,10\n")
    line = _one_line_error(capsys, "analyze", path, "-t", "3")
    assert str(path) in line and "column 'train_loss'" in line and "'four'" in line and "row 2" in line


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("step,train_loss,global_batch\n", "no finite values"),
        ("step,train_loss,global_batch\n0,5.0,10\n", "only one finite value"),
    ],
)
def test_error_empty_or_one_row_file(capsys, tmp_path, text, problem):
    path = tmp_path / "short.csv"
    path.write_text(text)
    line = _one_line_error(capsys, "analyze", path, "-t", "3")
    assert str(path) in line and problem in line


def test_an_empty_loss_column_names_the_loss_columns_that_have_values(capsys, tmp_path):
    # a trainer's CSV with its train_loss column left empty beside the val loss it logged:
    # the error says where the values are, and takes nothing in their place
    path = tmp_path / "val-only.csv"
    path.write_text("step,val_loss,eval/loss,train_loss\n125,4.3,4.3,\n250,3.9,3.9,\n375,3.7,,\n")
    line = _one_line_error(capsys, "analyze", path, "-t", "3.5", "--batch-size", "1")
    assert "column 'train_loss': has no finite values" in line
    assert "'val_loss', 'eval/loss' have values: choose with --loss-col" in line


def test_error_decreasing_tokens(capsys, tmp_path):
    path = tmp_path / "tokens.csv"
    path.write_text("step,tokens,train_loss,global_batch\n0,0,5,10\n1,10,4,10\n2,5,3,10\n")
    line = _one_line_error(capsys, "analyze", path, "-t", "3")
    assert "column 'tokens'" in line and "decreases" in line and "step 2" in line


def test_a_csv_with_no_batch_or_tokens_is_analysed_on_steps(capsys, tmp_path):
    """No tokens to be had: steps, a read-as line, and one note naming the flags that give tokens."""
    path = tmp_path / "nobatch.csv"
    steps = range(0, 400, 10)
    path.write_text("step,train_loss\n" + "".join(f"{s},{2 + 6 * (s / 20 + 1) ** -0.6}\n" for s in steps))
    code, out, err = run_cli(capsys, "analyze", path, "-t", "3.5", "--ema-steps", "20")
    assert code == 0 and err == ""
    assert "read as: generic; step: step, loss: train_loss" in out and "tokens: none (on steps)" in out
    (note,) = [line for line in out.splitlines() if "working on steps" in line]
    assert "--batch-size" in note and "--tokens-col" in note
    reached = next(line for line in out.splitlines() if line.startswith("target=3.5"))
    assert "REACHED" in reached and "tokens=" not in reached


def test_error_target_not_a_number(capsys, olmo):
    line = _one_line_error(capsys, "analyze", olmo, "--loss-col", "val_loss", "--target", "abc")
    assert "--target" in line and "'abc' is not a number" in line
    line = _one_line_error(capsys, "analyze", olmo, "--loss-col", "val_loss", "--target", "3.3", "abc")
    assert "abc" in line


def test_error_bad_option_value(capsys, olmo):
    line = _one_line_error(capsys, "analyze", olmo, "--loss-col", "val_loss", "-t", "3", "--sweep-step", "0")
    assert "sweep" in line


def test_targets_stop_at_the_next_flag_or_a_run_name():
    assert expand_multi_value(["analyze", "--target", "3.6", "3.3", "run.csv", "--json"]) == [
        "analyze", "--target", "3.6", "--target", "3.3", "run.csv", "--json",
    ]


@pytest.mark.parametrize("command", [["tracker-plugin"], [sys.executable, "-m", "tracker_plugin"]])
def test_console_script_and_module(command, data_dir):
    from pathlib import Path

    if command[0] == "tracker-plugin":
        command = [str(Path(sys.executable).with_name("tracker-plugin"))]
    done = subprocess.run(
        [*command, "analyze", str(data_dir / "olmo-ladder-370M-5xC.csv"), "-t", "3.6", "--loss-col", "val_loss"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "REACHED" in done.stdout


def _cut_190m(data_dir, tmp_path, last_step: int = 4000):
    """The 190M-1xC log up to ``last_step`` of its planned 7,300: a run still going, whose
    smoothed loss reaches 3.65 near step 5,500 (the full log ends its plan at 7,272)."""
    lines = (data_dir / "olmo-ladder-190M-1xC.csv").read_text().splitlines()
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(line for line in lines if not line[0].isdigit() or int(line.split(",")[0]) <= last_step) + "\n")
    return cut


def test_auto_json_has_the_forecast_fields(capsys, data_dir, tmp_path):
    code, out, _ = run_cli(
        capsys, "analyze", _cut_190m(data_dir, tmp_path), "--loss-col", "val_loss", "-t", "3.65",
        "--lr-spec", "cosine:warmup=400,total=7300,final=0.1", "--interval", "0.9", "--json",
    )
    assert code == 0
    doc = json.loads(out)
    (target,) = doc["targets"]
    assert target["status"] == Status.FORECAST and 4000 < target["step"] <= 7300  # within the plan
    low, high = target["tokens_interval"]
    assert low < target["tokens"] < high
    s_low, s_high = target["step_interval"]
    assert s_low < target["step"] < s_high
    assert 0 <= target["p_reach_within_plan"] <= 1
    assert target["model"]["name"] == doc["model_selection"]["chosen"]
    assert doc["model_selection"]["requested"] == "auto"
    assert doc["lr_plan"]["source"] == "spec" and doc["lr_plan"]["total_steps"] == 7300
    assert doc["clock"] == "tokens" and doc["interval_level"] == 0.9


def test_auto_text_names_the_model_interval_and_plan(capsys, data_dir, tmp_path):
    plan = tmp_path / "plan.csv"
    plan.write_text("step,lr\n0,0\n400,1\n7300,0.1\n")
    code, out, _ = run_cli(capsys, "analyze", _cut_190m(data_dir, tmp_path), "--loss-col", "val_loss", "-t", "3.65",
                           "--lr-schedule", plan)
    assert code == 0
    assert "model: " in out and "auto:" in out
    assert f"note: planned lr: --lr-schedule {plan}" in out
    line = next(line for line in out.splitlines() if line.startswith("target=3.65"))
    assert "FORECAST within the plan (" in line, line
    # Written as the tables write an interval (tests/test_tables.py): low–high, no brackets.
    assert re.search(r"80% interval: tokens=\S+B\u2013\S+ steps=[\d,]+\u2013\S+ ", line), line
    assert "P(reached within plan)=" in line


def test_a_planned_total_alone_gives_a_plan_whose_cooldowns_end_there(capsys, data_dir, tmp_path):
    # A speedrun log (no lr logged) cut at 900 of its 1,750 planned steps.
    full = (data_dir / "modded-short-2024-11-24_WindowWarmup.csv").read_text().splitlines()
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(line for line in full if not line[0].isdigit() or int(line.split(",")[0]) <= 900) + "\n")
    args = ("analyze", cut, "--loss-col", "val_loss", "--batch-size", "1", "--ema-token-window", "250", "-t", "3.35", "--json")
    code, out, _ = run_cli(capsys, *args, "--total-steps", "1750")
    assert code == 0
    doc = json.loads(out)
    assert doc["lr_plan"]["source"] == "steps-only" and doc["lr_plan"]["total_steps"] == 1750
    note = doc["lr_plan"]["note"]
    assert "cooldowns that end at the planned step 1,750" in note and "no planned schedule" not in note
    (target,) = doc["targets"]
    assert 0 <= target["p_reach_within_plan"] <= 1
    # Without the total nothing gives the plan or its end: no chance within it.
    code, out, _ = run_cli(capsys, *args)
    assert code == 0
    unknown = json.loads(out)
    assert unknown["lr_plan"]["source"] is None and unknown["lr_plan"]["total_steps"] is None
    assert "no planned schedule" in unknown["lr_plan"]["note"] and unknown["targets"][0]["p_reach_within_plan"] is None


def test_a_planned_total_must_be_a_step_above_zero():
    with pytest.raises(tp.ConfigError, match="planned_total is the planned last step, a number above 0, got 0"):
        tp.LrSchedule.steps_only(0)
    assert tp.LrSchedule.steps_only(500).source == "steps-only"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--lr-spec", "cosine:total=10", "--lr-schedule", "plan.csv"], "give the planned lr once"),
        (["--total-steps", "100", "--lr-spec", "cosine:total=10"], "--lr-spec SPEC or --total-steps STEPS, not more than one"),
        (["--total-steps", "0"], "'--total-steps': '0' is not in the range (0, 1e+12]"),
        (["--lr-spec", "triangle:total=10"], "unknown shape 'triangle'"),
        (["--lr-schedule", "absent.csv"], "--lr-schedule absent.csv: no such file"),
        (["--interval", "80"], "'--interval': '80' is not in the range (0, 1)"),
        (["--clock", "hours"], "'hours' is not one of 'tokens', 'steps'"),
    ],
)
def test_forecast_option_errors_are_one_line(capsys, olmo, args, problem):
    line = _one_line_error(capsys, "analyze", olmo, "--loss-col", "val_loss", "-t", "3", *args)
    assert problem in line


def _strict(text: str):
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_finished_run_short_of_its_target_is_not_reached(capsys, olmo):
    """370M-5xC ran its plan to the end (step 47,219 of 47,266), its smoothed loss above 3.1:
    no crossing as a number, the best smoothed loss and where the run ended instead."""
    code, out, _ = run_cli(capsys, "analyze", olmo, "--loss-col", "val_loss", "-t", "3.1", "--json")
    assert code == 0
    (target,) = _strict(out)["targets"]
    assert target["status"] == Status.NOT_REACHED and target["run_finished"] is True
    assert target["tokens"] is None and target["step"] is None and target["tokens_interval"] is None
    assert target["p_reach_within_plan"] == 0.0 and target["end_step"] == 47_219
    assert 3.1 < target["best_smoothed_loss"] < 3.2


def test_an_unbounded_interval_is_null_in_every_json(capsys, olmo, tmp_path):
    """A forecast with no planned end (the 370M-5xC log without its lr column, no plan given)
    that some replicates never reach within the horizon: the interval's upper end is open."""
    path = tmp_path / "run.csv"
    path.write_text("".join(",".join(row.split(",")[:3] + row.split(",")[4:]) for row in
                            olmo.read_text().splitlines(keepends=True)))
    assert path.read_text().startswith("step,tokens,global_batch,val_loss\n")
    code, out, _ = run_cli(capsys, "analyze", path, "--loss-col", "val_loss", "-t", "2.9", "--json")
    assert code == 0
    (target,) = _strict(out)["targets"]
    assert target["status"] == Status.FORECAST_BEYOND_PLAN and target["tokens_interval"][1] is None
    assert target["p_reach_within_plan"] is None  # no plan: no chance within it
    code, out, _ = run_cli(capsys, "compare", path, "--loss-col", "val_loss", "-t", "2.9", "--json",
                           "--plot", tmp_path / "compare.png")
    assert code == 0 and _strict(out)[0]["rows"][0]["tokens_high"] is None
    assert (tmp_path / "compare.png").stat().st_size > 10_000
    code, out, _ = run_cli(capsys, "annotate", path, "--loss-col", "val_loss", "-t", "2.9", "--json")
    assert code == 0 and _strict(out)[0]["tokens_interval"][1] is None


def test_settings_options_are_the_config_fields_with_their_defaults():
    """A default is written once, in AnalysisConfig; every command shows the same."""
    from dataclasses import fields

    from tracker_plugin.cli import cli
    from tracker_plugin.cli.options import SETTINGS

    config_fields = {f.name: f.default for f in fields(tp.AnalysisConfig)}
    for name in ("analyze", "annotate", "compare", "watch", "backtest"):
        params = {p.name: p for p in cli.commands[name].params}
        for setting in set(SETTINGS) - {"batch_schedule", "lr_schedule"}:
            assert params[setting].default == config_fields[setting], (name, setting)
        if name != "backtest":
            assert params["model"].default == config_fields["model"]


def test_the_package_exports_every_name_it_loads_on_first_use():
    import tracker_plugin

    assert sorted(tracker_plugin.__all__) == sorted([*tracker_plugin._EXPORTS, "__version__"])
    for name in tracker_plugin.__all__:
        assert getattr(tracker_plugin, name) is not None


def test_the_bundled_runs_read_with_no_flags_an_eval_loss_alone_said(capsys):
    root = Path(__file__).resolve().parents[1]
    runs = sorted((root / "examples" / "runs").glob("*.csv"))
    for path in runs:
        capsys.readouterr()
        assert main(["analyze", str(path), "-t", "3.3"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        said = "note: the only loss logged is the eval loss 'val_loss': it is the loss read (name another with --loss-col)"
        assert (said in out) == ("train_loss" not in path.read_text().splitlines()[0].split(","))
    assert main(["compare", *map(str, runs), "-t", "3.3"]) == 0
    assert "failed" not in capsys.readouterr().out
