"""Issue 14, the reading half: odd logs are read whole or refused, never silently cut.

Each case here was reproduced on main first: a stray step-0 row threw away 950 rows, a
shuffled file was analysed on about 6 rows, a descending one failed with a misleading
message, and the rest ended in tracebacks.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.testing import synthetic_run

# Forecast past the clean log (at about 2.3x and 3.4x its tokens), well within the run
# lengths the prior's cooldowns give a log whose lr is still at its peak.
TARGETS = ["4.9", "4.5"]


@pytest.fixture(scope="module")
def clean() -> pd.DataFrame:
    return synthetic_run(1000, seed=1)


def _json(capsys, path, *extra: str) -> dict:
    code = main(["analyze", str(path), "--json", "--target", *TARGETS, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _same_answer(doc: dict, reference: dict) -> None:
    assert doc["observed"] == reference["observed"]
    for ours, theirs in zip(doc["targets"], reference["targets"]):
        assert ours["status"] == theirs["status"]
        for key in ("tokens", "step"):
            if theirs[key] is None:
                assert ours[key] is None
            else:
                assert ours[key] == pytest.approx(theirs[key], rel=1e-9)


@pytest.mark.parametrize("bend", ["stray step 0", "shuffled", "descending"])
def test_a_bent_log_gives_the_clean_logs_answer_with_a_note(tmp_path, capsys, clean, bend):
    clean.to_csv(tmp_path / "clean.csv", index=False)
    reference = _json(capsys, tmp_path / "clean.csv")
    assert reference["targets"][0]["status"] == "forecast_beyond_plan"
    if bend == "stray step 0":  # the first row logged again near the end
        bent = pd.concat([clean.iloc[:950], clean.iloc[[0]], clean.iloc[950:]])
        expected = "dropped 1 out-of-order rows that repeat an earlier step"
    elif bend == "shuffled":
        bent = clean.sample(frac=1.0, random_state=0)
        expected = "sorted the rows by step: they were logged out of order"
    else:
        bent = clean.iloc[::-1]
        expected = "sorted the rows by step: they were logged in descending order"
    bent.to_csv(tmp_path / "bent.csv", index=False)
    doc = _json(capsys, tmp_path / "bent.csv")
    _same_answer(doc, reference)
    assert any(note.startswith(expected) for note in doc["notes"]), doc["notes"]
    assert not any("resumed run" in note for note in doc["notes"])


def test_one_backwards_row_at_the_end_of_300k_rows_drops_one_row():
    frame = synthetic_run(300_000, seed=2)
    bent = pd.concat([frame, frame.iloc[[10]]], ignore_index=True)
    history = tp.build_history(bent, run="long")
    assert len(history) == 300_000
    np.testing.assert_array_equal(history.loss, frame["train_loss"].to_numpy())


def test_a_real_restart_still_replaces_the_interrupted_rows(clean):
    resumed = clean.iloc[600:].copy()
    resumed["train_loss"] -= 0.1
    history = tp.build_history(pd.concat([clean.iloc[:800], resumed]), run="resumed")
    assert len(history) == 1000
    np.testing.assert_allclose(history.loss[600:], clean["train_loss"].to_numpy()[600:] - 0.1, rtol=1e-12)
    assert "the log restarts at step 600 (attempt 2): it replaced attempt 1's 200 rows of steps 600-799" in history.notes


@pytest.mark.parametrize("relogged", [70, 200])
def test_a_rolled_back_attempt_is_replaced_from_its_restart_step_on(relogged):
    """A run restarted from step 0 that has logged 0-70 (or 0-200) again, after an attempt
    that reached 300: the abandoned attempt's rows are no part of the run, those past the
    new attempt's last step too, and the note says which steps of which attempt went."""
    first = pd.DataFrame({"step": range(301), "train_loss": np.linspace(5.0, 3.0, 301)})
    second = pd.DataFrame({"step": range(relogged + 1), "train_loss": np.linspace(5.2, 4.0, relogged + 1)})
    history = tp.build_history(pd.concat([first, second]), run="rolled", batch_size=10)
    assert history.step.tolist() == list(range(relogged + 1))
    np.testing.assert_allclose(history.loss, second["train_loss"].to_numpy(), rtol=1e-12)
    assert (f"the log restarts at step 0 (attempt 2): it replaced attempt 1's 301 rows of steps 0-300; it has "
            f"logged up to step {relogged} so far, and the abandoned rows past it are dropped too (kept the later "
            "attempt)") in history.notes


def test_an_eval_key_appended_after_the_train_rows_is_no_restart():
    """Rows going back that log no loss (another key's rows appended) replace nothing."""
    train = pd.DataFrame({"step": range(301), "train_loss": np.linspace(5.0, 3.0, 301)})
    evals = pd.DataFrame({"step": range(0, 301, 50), "val_loss": 4.0})
    history = tp.build_history(pd.concat([train, evals]), run="stacked", batch_size=10)
    assert len(history) == 301 and not any("restarts" in note for note in history.notes)


def test_a_restart_at_a_coarse_cadence_counts_as_one():
    # logged every 10 steps; crash after 1020, resume from the checkpoint at 1000
    steps = [*range(0, 1021, 10), *range(1010, 1101, 10)]
    loss = [5 - i / 1000 for i in range(103)] + [1.0] * 10
    history = tp.build_history(pd.DataFrame({"step": steps, "train_loss": loss}), run="r", batch_size=10)
    assert history.step.tolist() == list(range(0, 1101, 10))
    assert history.loss[-10:].tolist() == [1.0] * 10


def _csv(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(capsys, argv: list[str]) -> str:
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize("column", ["step", "tokens", "global_batch"])
def test_an_integer_past_1e308_is_a_clear_error(tmp_path, capsys, column):
    rows = [{"step": str(i), "train_loss": str(5 - i / 100), "tokens": str(i * 10), "global_batch": "10"} for i in range(30)]
    rows[20][column] = "1" + "0" * 400
    text = "step,train_loss,tokens,global_batch\n" + "".join(",".join(r.values()) + "\n" for r in rows)
    err = _error(capsys, ["analyze", str(_csv(tmp_path, "huge.csv", text)), "-t", "3"])
    assert f"column '{column}'" in err and "inf" in err


def test_a_tokens_column_of_zeros_is_a_clear_error(tmp_path, capsys, clean):
    zeros = clean.assign(tokens=0)
    zeros.to_csv(tmp_path / "zeros.csv", index=False)
    err = _error(capsys, ["analyze", str(tmp_path / "zeros.csv"), "-t", "3.3"])
    assert "column 'tokens': stays at 0 from step 0 to step 999: it does not count tokens" in err


def test_duplicate_columns_are_named(tmp_path, capsys):
    path = _csv(tmp_path, "dup.csv", "step,train_loss,lr,train_loss\n" + "".join(f"{s},{5 - s / 9},0.1,{s}\n" for s in range(20)))
    err = _error(capsys, ["analyze", str(path), "-t", "3"])
    assert "has more than one column named 'train_loss'" in err
    frame = pd.DataFrame([[0, 5.0, 4.0], [1, 4.0, 3.0]], columns=["step", "train_loss", "train_loss"])
    with pytest.raises(tp.DataError, match="more than one column named 'train_loss'"):
        tp.build_history(frame, run="d", batch_size=10)


def test_a_negative_lr_is_an_error_naming_the_column(clean):
    bent = clean.copy()
    bent.loc[500, "lr"] = -1e-4
    with pytest.raises(tp.DataError, match=r"column 'lr': a learning rate cannot be negative, found -0.0001 at step 500"):
        tp.build_history(bent, run="neg")


def test_spaces_around_inf_and_nan_are_read_alike(tmp_path):
    body = "".join(f"{s},{5 - s / 100},10\n" for s in range(20))
    history = tp.load_csv(_csv(tmp_path, "s.csv", "step,train_loss,global_batch\n" + body + "20,inf ,10\n21, nan,10\n22, -inf ,10\n"))
    assert len(history) == 20
    assert "dropped 3 rows whose loss was NaN or infinite" in history.notes


def test_targets_at_or_below_zero_are_refused(clean):
    for target in (0.0, -1.0):
        with pytest.raises(tp.ConfigError, match="targets are losses above 0"):
            tp.analyze(clean, [target])


def test_a_target_above_the_first_loss_is_reached_at_the_first_row_with_a_note(clean):
    first = float(clean["train_loss"].iloc[0])
    result = tp.analyze(clean, [first + 1.0]).targets[0]
    assert result.status == "reached" and result.step == 0
    assert result.note is not None and "first logged loss" in result.note


def test_an_ema_window_longer_than_the_run_is_shortened_with_a_note():
    # The loss crosses 5.0 early (it ends near 4.66): a window 100x the run kept the EMA near its first values.
    frame = synthetic_run(3000, seed=3)
    logged = float(frame["tokens"].iloc[-1])
    analysis = tp.analyze(frame, [5.0], ema_token_window=100 * logged)
    assert analysis.config.ema_token_window == pytest.approx(0.25 * logged, rel=1e-12)
    assert any("is longer than the run's logged" in note for note in analysis.notes)
    assert analysis.targets[0].status == "reached"


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_the_plot_is_written_in_the_format_its_extension_names(tmp_path, capsys, data_dir, suffix, magic):
    path = tmp_path / f"plot{suffix}"
    assert main(["analyze", str(data_dir / "parity_fixed.csv"), "-t", "4.5", "--plot", str(path)]) == 0
    capsys.readouterr()
    assert path.read_bytes().startswith(magic)


def test_a_plot_that_cannot_be_written_is_refused_first(tmp_path, capsys, data_dir):
    source = str(data_dir / "parity_fixed.csv")
    err = _error(capsys, ["analyze", source, "-t", "4.5", "--plot", str(tmp_path / "missing" / "p.png")])
    assert "no such folder" in err
    err = _error(capsys, ["analyze", source, "-t", "4.5", "--plot", str(tmp_path / "p.jpg")])
    assert "cannot write a .jpg plot; use .png, .pdf or .svg" in err
    assert not (tmp_path / "p.jpg").exists()


def test_the_plot_is_drawn_from_a_bounded_number_of_rows_that_keeps_every_spike():
    from tracker_plugin.report.plot import decimated

    x = np.arange(1, 2_000_001, dtype=float)
    y = np.sin(x / 1000)
    y[1_234_567] = 50.0
    rows = decimated(x, y)
    assert len(rows) <= 4 * 2048
    assert 1_234_567 in rows and rows[0] == 0 and rows[-1] == len(x) - 1


def test_compare_says_why_a_run_failed_in_every_format(tmp_path, capsys, data_dir):
    (tmp_path / "good.csv").write_text((data_dir / "parity_fixed.csv").read_text())
    (tmp_path / "bad.csv").write_text("step,train_loss,global_batch\n0,5,10\n1,4,-10\n")
    reason = "the batch must be at least 1 token per step"
    for fmt in ("", "--markdown", "--csv", "--json"):
        code = main(["compare", str(tmp_path), "-t", "4.5", "--model", "power-law", *([fmt] if fmt else [])])
        out, err = capsys.readouterr()
        assert code == 1
        # The run is named with its reason on stderr in every format (stdout keeps the text
        # table alone); the Markdown, CSV and JSON documents carry it in the failed row too.
        assert f"bad ({tmp_path / 'bad.csv'}): column 'global_batch': {reason}" in err, fmt
        assert (reason in out) == (fmt != ""), fmt
    import matplotlib

    plot = tmp_path / "cmp.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to be searched
        main(["compare", str(tmp_path), "-t", "4.5", "--model", "power-law", "--plot", str(plot)])
    capsys.readouterr()
    assert "left out, could not be analysed (1): bad" in plot.read_text()


def test_run_names_are_printed_with_control_characters_escaped(tmp_path, capsys, data_dir):
    name = "evil\x1b[31mred\nnext"
    (tmp_path / f"{name}.csv").write_text((data_dir / "parity_fixed.csv").read_text())
    main(["compare", str(tmp_path), "-t", "4.5", "--model", "power-law"])
    out, _ = capsys.readouterr()
    assert "\x1b" not in out and "evil\\x1b[31mred\\nnext" in out
    main(["analyze", str(tmp_path / f"{name}.csv"), "-t", "4.5", "--model", "power-law"])
    out, _ = capsys.readouterr()
    assert "\x1b" not in out and out.splitlines()[0].endswith("evil\\x1b[31mred\\nnext.csv")
