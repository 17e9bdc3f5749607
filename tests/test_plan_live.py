"""A live run with siblings: what their law says before its first step, once, never raising;
then its forecasts join that law and carry the loss at the plan's end (``loss_eta_end``).

The siblings are the three real 25M runs of ``tests/data/mpl-25M-siblings`` (read once,
their evidence given to the live forecast as a training script holding it would); the
live run is the fourth, replayed from its real log.
"""

from __future__ import annotations

import re
import warnings
from functools import cache

import pandas as pd
import pytest

from tests.test_plan import SIBLINGS, TARGETS, TRUTH, WINDOW, WSD, truth
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.annotation import annotation_metrics
from tracker_plugin.jobs.plan import siblings_evidence
from tracker_plugin.jobs.siblings_read import SiblingsRead
from tracker_plugin.keys import PLAN_END
from tracker_plugin.live import LiveForecast
from tracker_plugin.trackers import ReadOptions, SourceOptions

CONFIG = AnalysisConfig(targets=TARGETS, ema_token_window=WINDOW)


@cache
def evidence() -> SiblingsRead:
    return siblings_evidence(str(SIBLINGS), CONFIG, SourceOptions(read=ReadOptions(batch_size=1)))


def _live(**kw) -> LiveForecast:
    return LiveForecast(TARGETS, plan=WSD, tokens_per_step=1, config=CONFIG, every_logs=10_000, every_seconds=0,
                        min_rows=10, name="wsdld", **kw)


def test_before_its_first_step_a_live_run_says_what_its_siblings_forecast(capfd):
    live = _live(background=False, siblings=evidence())
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("loss_eta before the run: ")]
    assert said == live.before and len(said) == 1 + len(TARGETS) + 1
    assert "3 finished sibling run(s) share a law" in said[0]
    crossed, end = truth()
    for target, line in zip(TARGETS, said[1:-1], strict=True):
        found = re.search(rf": {target:.2f} forecast at step ([\d,]+) \(80%: ([\d,]+)–([\d,]+)\), P\(within plan\) ", line)
        assert found, line
        step, low, high = (float(g.replace(",", "")) for g in found.groups())
        assert abs(step / crossed[target] - 1) < 0.05 and low < step < high
    loss = re.search(r": end (\d\.\d+) \(80%: (\d\.\d+)–(\d\.\d+)\) at step 24,000$", said[-1])
    assert loss, said[-1]
    assert float(loss.group(1)) == pytest.approx(end, abs=0.01)
    assert float(loss.group(2)) < end < float(loss.group(3))
    assert live.config.project_law is not None and live.config.project_law.shared


def test_its_forecasts_then_join_the_law_and_carry_the_plan_end():
    live = _live(background=True, siblings=evidence())
    log = pd.read_csv(TRUTH)
    for row in log[log.step <= 8000].itertuples():  # rows come in while the law is fitted: never blocked
        live.update(int(row.step), float(row.train_loss), lr=float(row.lr), time=1.7e9 + row.step)
    live.close()
    result = live.forecast()
    assert result is not None and result.analysis.project is not None
    end = result.analysis.plan_end
    assert end is not None and end.step == 24000
    assert result.lines()[-1].startswith("end ") and "at step 24,000" in result.lines()[-1]
    assert result.metrics[PLAN_END] == pytest.approx(end.loss, abs=1e-3)
    assert annotation_metrics(result.analysis)[PLAN_END] == pytest.approx(end.loss, abs=1e-3)
    _, true_end = truth()
    assert end.loss == pytest.approx(true_end, abs=0.015)


def test_siblings_that_share_no_law_are_said_in_one_line(capfd):
    one = SiblingsRead(evidence().evidence[:1], (), "one run")
    live = _live(background=False, siblings=one)
    (line,) = live.before
    assert line.startswith("loss_eta before the run: no forecast from the siblings: no shared law")
    assert live.config.project_law is not None and not live.config.project_law.shared
    assert line in capfd.readouterr().err


def test_siblings_that_cannot_be_read_never_raise_into_the_trainer(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        live = _live(background=False, siblings=str(tmp_path / "no-such-runs"))
    (line,) = live.before
    assert line.startswith("loss_eta before the run: the siblings gave no forecast: ")
    assert any("training goes on" in str(w.message) for w in caught)
    assert live.config.project_law is None


def test_a_run_with_no_known_plan_or_on_another_rank_says_nothing_made_up(capfd):
    live = LiveForecast(TARGETS, tokens_per_step=1, config=CONFIG, background=False, siblings=evidence())
    (line,) = live.before
    assert "the run's planned lr (its shape and its end) is not known" in line
    other = _live(background=False, siblings=evidence(), rank=1)
    assert other.before == [] and other.config.project_law is None
    assert capfd.readouterr().err.count("loss_eta before the run") == 1


def test_the_hugging_face_callback_takes_siblings_and_says_its_plan_before_training(capfd):
    """The callback's session, started as ``on_train_begin`` starts it, with the plan read
    from a real PyTorch scheduler (constant after a warmup, then a linear decay to 0.1)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracker_plugin.live.hf import LossEtaCallback

    def wsd(step: int) -> float:
        if step < 2160:
            return step / 2160
        return 1.0 if step < 20000 else 1.0 - 0.9 * (step - 20000) / 4000

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, wsd)
    callback = LossEtaCallback(TARGETS, config=CONFIG, background=False, siblings=evidence())
    live = callback.session.start(rank_zero=True, scheduler=scheduler, total_steps=24000, tokens_per_step=1.0,
                                  name="hf-run")
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("loss_eta before the run: ")]
    assert said == live.before and len(said) == 1 + len(TARGETS) + 1, said
    assert said[-1].endswith("at step 24,000")
    assert live.config.project_law is not None and live.config.project_law.shared
