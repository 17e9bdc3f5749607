"""The common frame: loading, dedupe of resumed runs, tokens, batch, sparse keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.frame.history import batch_from_name


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_resumed_run_keeps_the_later_rows_and_drops_the_interrupted_attempt(tmp_path):
    # Steps 0..5, crash, resume from the checkpoint at step 3 with different values.
    frame = pd.DataFrame(
        {
            "step": [0, 1, 2, 3, 4, 5, 3, 4, 6],
            "train_loss": [5.0, 4.0, 3.5, 9.0, 9.0, 9.0, 3.2, 3.1, 3.0],
        }
    )
    history = tp.build_history(frame, run="resumed", batch_size=1000)
    assert history.step.tolist() == [0, 1, 2, 3, 4, 6]
    assert history.loss.tolist() == [5.0, 4.0, 3.5, 3.2, 3.1, 3.0]
    assert any(note.startswith("the log restarts at step 3 (attempt 2): it replaced attempt 1's 3 rows") for note in history.notes)


def test_rows_of_one_step_written_separately_are_merged():
    frame = pd.DataFrame(
        {"step": [1, 1, 2, 2], "train_loss": [3.0, np.nan, 2.9, np.nan], "lr": [np.nan, 1e-3, np.nan, 9e-4]}
    )
    history = tp.build_history(frame, run="split", batch_size=10)
    assert history.step.tolist() == [1, 2]
    assert history.loss.tolist() == [3.0, 2.9]
    assert history.lr.tolist() == [1e-3, 9e-4]


def test_nan_and_inf_losses_are_dropped_and_counted(tmp_path):
    path = _write(
        tmp_path,
        "diverged.csv",
        "step,train_loss,global_batch\n0,5,100\n1,nan,100\n2,inf,100\n3,,100\n4,4,100\n5,-inf,100\n6,3.5,100\n"
        + "".join(f"{s},{3.4 - s / 100},100\n" for s in range(7, 12)),
    )
    history = tp.load_csv(path)
    assert history.step.tolist() == [0, 4, 6, 7, 8, 9, 10, 11]
    # step 3 was not logged: it is not a dropped loss
    assert "dropped 3 rows whose loss was NaN or infinite" in history.notes
    # 8 of the 11 rows that logged a loss are left: the read says so in one line
    assert "kept 8 of 11 logged rows (73%) (3 NaN or infinite losses dropped)" in history.notes


def test_a_read_left_with_too_few_rows_fails_and_says_why(tmp_path):
    path = _write(tmp_path, "diverged.csv", "step,train_loss,global_batch\n0,5,100\n1,nan,100\n2,inf,100\n4,4,100\n6,3.5,100\n")
    with pytest.raises(tp.DataError, match=r"kept 3 of 5 logged rows \(60%\) \(2 NaN or infinite losses dropped\), too few"):
        tp.load_csv(path)


def test_sparse_eval_loss_every_128_steps(data_dir):
    """nanogpt-124M logs val_loss every 128 steps and train_loss every step."""
    history = tp.load_csv(data_dir / "nanogpt-124M-adamw-llmc.csv", columns=tp.Columns().with_overrides(loss="val_loss"))
    assert len(history) == 76
    assert set(np.diff(history.step)) <= {128, 64}
    # tokens come from the column at the eval steps, not from row positions
    np.testing.assert_allclose(history.tokens, history.step * 524288.0, rtol=1e-7)
    analysis = tp.analyze(history, [3.5, 3.3])
    assert analysis.targets[0].status == "reached"
    assert not any("dropped" in note for note in history.notes)


def test_keys_logged_at_different_steps_are_aligned_on_step():
    # lr logged every 10 steps, the loss every 4: lr at loss steps comes from its own steps.
    lr_rows = pd.DataFrame({"step": np.arange(0, 41, 10), "lr": np.arange(0, 41, 10) * 1e-5})
    loss_rows = pd.DataFrame({"step": np.arange(0, 41, 4), "train_loss": np.linspace(5, 3, 11)})
    frame = pd.concat([lr_rows, loss_rows]).sort_values("step", kind="stable")
    history = tp.build_history(frame, run="mixed", batch_size=100)
    assert history.step.tolist() == list(range(0, 41, 4))
    np.testing.assert_allclose(history.lr, history.step * 1e-5)


def test_tokens_accumulate_from_the_batch_across_logging_gaps():
    frame = pd.DataFrame(
        {"step": [10, 20, 40, 41], "global_batch": [100.0, 200.0, 200.0, 400.0], "train_loss": [4, 3.9, 3.8, 3.7]}
    )
    history = tp.build_history(frame, run="gaps")
    # before step 10: 10*100; then 10 steps at 100, 20 at 200, 1 at 200
    assert history.tokens.tolist() == [1000.0, 2000.0, 6000.0, 6200.0]


def test_batch_from_its_column_then_the_option_then_the_name(tmp_path):
    text = "step,train_loss\n0,5\n1,4\n2,3\n"
    plain = _write(tmp_path, "run.csv", text)
    named = _write(tmp_path, "run_0.5Mbs.csv", text)
    assert tp.load_csv(plain, batch_size=64).batch_source == "batch_size"
    history = tp.load_csv(named)
    assert history.batch_source == "run name"
    assert history.batch[0] == 500_000
    assert tp.load_csv(named, batch_size=64).batch[0] == 64
    with_col = _write(tmp_path, "col_1Mbs.csv", "step,train_loss,global_batch\n0,5,32\n1,4,32\n")
    assert tp.load_csv(with_col, batch_size=64).batch[0] == 32
    # No batch anywhere: the CSV is read on steps (one per step), and says so.
    on_steps = tp.load_csv(plain)
    assert on_steps.on_steps and on_steps.batch_source == "none: the analysis is on steps"
    np.testing.assert_array_equal(on_steps.batch, 1.0)


@pytest.mark.parametrize(
    ("name", "expected"), [("x_1Mbs", 1e6), ("a_512Kbs.csv", 512e3), ("r_1.5mbs", 1.5e6), ("none", None)]
)
def test_batch_from_name(name, expected):
    assert batch_from_name(name) == expected


def test_wandb_export_loads_once_its_names_are_mapped(data_dir):
    export = data_dir / "olmo-ladder-370M-5xC.wandb-export.csv"
    with pytest.raises(tp.DataError, match="no loss column"):
        tp.load_csv(export)
    columns = tp.Columns().with_overrides(
        step="_step",
        loss="eval/c4_en-validation/CrossEntropyLoss",
        tokens="throughput/total_tokens",
        batch="batch_size_in_tokens",
        lr="optim/learning_rate_group0",
    )
    history = tp.load_csv(export, columns=columns)
    plain = tp.load_csv(data_dir / "olmo-ladder-370M-5xC.csv", columns=tp.Columns().with_overrides(loss="val_loss"))
    for key in ("step", "tokens", "batch", "loss", "lr"):
        np.testing.assert_array_equal(getattr(history, key), getattr(plain, key))


def test_frame_has_the_canonical_columns(data_dir):
    frame = tp.load_csv(data_dir / "parity_fixed.csv").frame()
    assert list(frame.columns) == ["step", "tokens", "batch", "lr", "loss"]
    assert frame["step"].dtype == np.int64
    assert frame["step"].is_monotonic_increasing and frame["step"].is_unique


def test_head_is_the_run_as_it_stood_earlier(data_dir):
    history = tp.load_csv(data_dir / "parity_fixed.csv")
    head = history.head(100)
    assert len(head) == 100 and head.last_step == history.step[99]


def test_align_on_step_the_latest_order_wins_whatever_the_row_order():
    from tracker_plugin.frame.align import KeyHistory, align_on_step

    rng = np.random.default_rng(0)
    step = np.array([0, 1, 2, 3, 2, 3, 4])
    value = np.array([9.0, 8.0, 7.0, 6.0, 7.5, 6.5, 5.0])
    stamp = np.array([10, 11, 12, 13, 20, 21, 22])
    for _ in range(5):
        order = rng.permutation(len(step))
        frame, logged_nan = align_on_step(
            {
                "loss": KeyHistory(step[order], value[order], stamp[order]),
                "lr": KeyHistory([0, 4], [1.0, 2.0], [1, 2]),
            }
        )
        assert list(frame["step"]) == [0, 1, 2, 3, 4]
        assert list(frame["loss"]) == [9.0, 8.0, 7.5, 6.5, 5.0]
        assert np.isnan(frame["lr"][1]) and frame["lr"][4] == 2.0
        assert not logged_nan["loss"].any()
    # without an order, the value logged last for a step wins
    frame, _ = align_on_step({"loss": KeyHistory([0, 1, 1], [3.0, 2.0, 2.5])}, step="_step")
    assert list(frame["_step"]) == [0, 1] and list(frame["loss"]) == [3.0, 2.5]


def test_align_on_step_marks_logged_nan_and_keeps_text_for_the_frame_to_name():
    from tracker_plugin.frame.align import KeyHistory, align_on_step

    frame, logged_nan = align_on_step(
        {
            "loss": KeyHistory([0, 1, 2], [1.0, np.nan, None]),
            "tokens": KeyHistory([3], [5.0]),
            "note": KeyHistory([1], ["oops"]),
        }
    )
    assert list(logged_nan["loss"]) == [False, True, True, False]  # a logged None is a logged NaN too
    assert np.isnan(frame["loss"][2]) and np.isnan(frame["loss"][3])
    assert frame["note"][1] == "oops"
    assert frame["tokens"][3] == 5.0
