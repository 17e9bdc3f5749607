"""The planned lr read from each trainer's own config matches the trainer's own formula.

Each ``*_lr`` below restates a trainer's lr code independently of the plugin (the sources
are cited in tracker_plugin/plan/trainers.py); params are shaped as the trainer's tracker
integration stores them: the committed fixtures' own configs (tests/data/frameworks/, written
through the real clients), and variants of them.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracker_plugin.core.forecast import UNKNOWN_PLAN_SOURCES
from tracker_plugin.plan.schedule import LrSchedule, read_planned_lr
from tracker_plugin.trackers.wandb_offline import read_offline_run

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
RTOL = 1e-9


def _wandb_config(name: str) -> dict:
    (path,) = (FRAMEWORKS / "wandb" / name).rglob("run-*.wandb")
    return read_offline_run(path, (), ref=str(path)).config


def _mlflow_params(run_name: str) -> dict[str, str]:
    with sqlite3.connect(FRAMEWORKS / "mlflow.db") as db:
        rows = db.execute(
            "select p.key, p.value from params p join runs r on r.run_uuid = p.run_uuid where r.name = ?", (run_name,)
        ).fetchall()
    return dict(rows)


def _check(plan: LrSchedule | None, formula, steps) -> None:
    assert plan is not None and plan.source == "params"
    steps = np.asarray(list(steps), float)
    expected = np.array([formula(s) for s in steps])
    np.testing.assert_allclose(plan.at(steps), expected, rtol=RTOL, atol=1e-300)


# --- nanoGPT: karpathy/nanoGPT train.py get_lr, lr = get_lr(iter) if decay_lr else learning_rate


def nanogpt_lr(it, *, learning_rate, warmup_iters, lr_decay_iters, min_lr, decay_lr=True):
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def test_nanogpt_fixture_config_plans_nanogpts_own_lr():
    config = _wandb_config("nanogpt-wandb")
    plan = LrSchedule.from_params(config, trainer="nanoGPT")
    keys = ("learning_rate", "warmup_iters", "lr_decay_iters", "min_lr")
    _check(plan, lambda it: nanogpt_lr(it, **{k: config[k] for k in keys}), range(0, config["max_iters"] + 1))
    assert plan is not None and plan.total_steps == config["max_iters"]
    assert dict(plan.params)["warmup_iters"] == "40" and "nanoGPT" in plan.description


@pytest.mark.parametrize("as_text", [False, True])
def test_nanogpt_train_py_defaults_and_a_floor_after_the_decay(as_text):
    # train.py's own defaults, but the decay ending before max_iters: min_lr after it.
    config = {"learning_rate": 6e-4, "max_iters": 700000, "decay_lr": True, "warmup_iters": 2000,
              "lr_decay_iters": 600000, "min_lr": 6e-5, "batch_size": 12, "block_size": 1024}
    params = {k: str(v) for k, v in config.items()} if as_text else config  # MLflow keeps text
    plan = LrSchedule.from_params(params)  # recognised by its names
    steps = [*range(0, 2100), *range(2100, 700001, 997), 599999, 600000, 600001, 700000]
    keys = ("learning_rate", "warmup_iters", "lr_decay_iters", "min_lr")
    _check(plan, lambda it: nanogpt_lr(it, **{k: config[k] for k in keys}), steps)
    assert plan is not None
    assert plan.description.startswith("cosine from params (nanoGPT: ")
    assert "warmup_iters=2000, lr_decay_iters=600000, min_lr=6e-05" in plan.description


def test_nanogpt_without_decay_is_constant():
    config = {**_wandb_config("nanogpt-wandb"), "decay_lr": "False"}
    plan = LrSchedule.from_params(config, trainer="nanoGPT")
    _check(plan, lambda it: config["learning_rate"], range(0, 401, 7))


@pytest.mark.parametrize(
    ("change", "named"),
    [({"lr_decay_iters": 30}, "lr_decay_iters=30"), ({"min_lr": 0.01}, "min_lr=0.01")],
)
def test_nanogpt_params_that_contradict_each_other_give_a_note_and_only_the_total(change, named):
    plan = LrSchedule.from_params({**_wandb_config("nanogpt-wandb"), **change}, trainer="nanoGPT")
    assert plan is not None and plan.source == "steps-only" and plan.total_steps == 400
    assert plan.source in UNKNOWN_PLAN_SOURCES
    assert plan.description == "planned steps known (max_iters=400), schedule shape not"
    assert len(plan.params) == len(dict(plan.params))  # each param named once
    (note,) = plan.notes
    assert named in note and "contradict" in note


def test_an_unparseable_param_is_ignored_with_a_note():
    config = {**_wandb_config("nanogpt-wandb"), "min_lr": "six"}
    plan = LrSchedule.from_params(config, trainer="nanoGPT")
    assert plan is not None and plan.source == "params"
    assert any("min_lr='six' is not a number: ignored" in n for n in plan.notes)
    # ignored: train.py's default min_lr (6e-5) stands
    assert float(plan.at(400.0)) == pytest.approx(6e-5, rel=RTOL)


# --- torchtitan: pytorch/torchtitan torchtitan/components/lr_scheduler.py (min_lr_factor version)


def torchtitan_lr(step, *, steps, lr, warmup_steps, decay_ratio, decay_type, min_lr_factor):
    """The lr optimizer step ``step`` (1-based) trains with: base lr x LambdaLR factor(step - 1)."""
    warmup = min(warmup_steps, steps)
    if decay_ratio is not None:
        decay = round(steps * decay_ratio)
        if warmup + decay > steps:
            decay = steps - warmup
    else:
        decay = steps - warmup
    stable = steps + 1 - warmup - decay
    c = step - 1
    if c < warmup:
        factor = (c + 1) / warmup
    elif c < warmup + stable:
        factor = 1.0
    else:
        progress = (c + 1 - (warmup + stable)) / decay
        factor = {"linear": 1 - progress, "sqrt": 1 - math.sqrt(progress),
                  "cosine": 0.5 * (1.0 + math.cos(math.pi * progress))}[decay_type]
        factor = min_lr_factor + (1 - min_lr_factor) * factor
    return lr * factor


def _titan_args(config: dict) -> dict:
    sched = config["lr_scheduler"]
    return {"steps": config["training"]["steps"], "lr": config["optimizer"]["lr"], "warmup_steps": sched["warmup_steps"],
            "decay_ratio": sched["decay_ratio"], "decay_type": sched["decay_type"], "min_lr_factor": sched["min_lr_factor"]}


def test_torchtitan_fixture_config_plans_torchtitans_own_lr():
    config = _wandb_config("torchtitan-wandb")
    plan = LrSchedule.from_params(config, trainer="torchtitan")
    _check(plan, lambda k: torchtitan_lr(k, **_titan_args(config)), range(1, 401))
    assert plan is not None and plan.total_steps == 400


def _flattened(config: dict, sep: str) -> dict:
    return {f"{section}{sep}{key}": value for section, inner in config.items() for key, value in inner.items()}


@pytest.mark.parametrize("sep", [".", "/"])
@pytest.mark.parametrize(("ratio", "kind", "floor"), [(0.2, "sqrt", 0.1), (0.25, "cosine", 0.0), (None, "linear", 0.05)])
def test_torchtitan_wsd_and_every_decay_type_flattened_as_trackers_store_them(sep, ratio, kind, floor):
    config = _wandb_config("torchtitan-wandb")
    config["training"] = {**config["training"], "steps": 1000}
    config["lr_scheduler"] = {"warmup_steps": 90, "decay_ratio": ratio, "decay_type": kind, "min_lr_factor": floor}
    plan = LrSchedule.from_params(_flattened(config, sep))
    _check(plan, lambda k: torchtitan_lr(k, **_titan_args(config)), range(1, 1001))


# --- litgpt: Lightning-AI/litgpt litgpt/pretrain.py fit() and get_lr, litgpt/args.py TrainArgs


def litgpt_step_lr(step, params: dict) -> float:
    """The lr optimizer step ``step`` (the logged ``step``) trains with: litgpt sets get_lr
    at every micro-iteration; the step is taken at the last one of its accumulation."""
    devices, micro = int(params["devices"]), int(params["train/micro_batch_size"])
    world = devices * int(params["num_nodes"])
    accumulation = (int(params["train/global_batch_size"]) // devices) // micro
    max_iters = (int(params["train/max_tokens"]) // world) // (micro * int(params["train/max_seq_length"]))
    warmup_iters = min(max_iters, int(params["train/lr_warmup_steps"]) * accumulation)
    lr, min_lr = float(params["optimizer/init_args/lr"]), float(params["train/min_lr"])
    it = step * accumulation - 1
    if it < warmup_iters:
        return lr * it / warmup_iters
    if it > max_iters:
        return min_lr
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def test_litgpt_mlflow_params_plan_litgpts_own_lr():
    params = _mlflow_params("litgpt-mlflow")  # Lightning's MLFlowLogger: '/'-joined text
    plan = LrSchedule.from_params(params, trainer="litgpt")
    _check(plan, lambda s: litgpt_step_lr(s, params), range(1, 401))
    assert plan is not None and plan.total_steps == 400


def test_litgpt_wandb_config_with_a_floor_and_three_nodes():
    config = _wandb_config("litgpt-wandb")
    config["num_nodes"] = 3
    config["train"] = {**config["train"], "min_lr": 1e-4, "max_tokens": 3 * 2 * 2 * 64 * 8 * 1000, "lr_warmup_steps": 37}
    plan = LrSchedule.from_params(config)  # recognised by its names
    flat = {"devices": config["devices"], "num_nodes": 3, "optimizer/init_args/lr": config["optimizer"]["init_args"]["lr"],
            **{f"train/{k}": v for k, v in config["train"].items()}}
    _check(plan, lambda s: litgpt_step_lr(s, flat), range(1, 1001))


# --- Megatron-LM: megatron/core/optimizer_param_scheduler.py get_lr, training.py's scheduler


def megatron_lr(n, a: dict) -> float:
    warmup = a["lr_warmup_iters"]
    decay = a["lr_decay_iters"] or a["train_iters"]
    max_lr, min_lr, init = a["lr"], a["min_lr"], a["lr_warmup_init"]
    if warmup > 0 and n <= warmup:
        return init + (max_lr - init) * n / warmup
    if a["lr_decay_style"] == "constant":
        return max_lr
    if n > decay:
        return min_lr
    ratio = (n - warmup) / (decay - warmup)
    if a["lr_decay_style"] == "linear":
        coeff = 1.0 - ratio
    elif a["lr_decay_style"] == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    else:  # WSD
        start = decay - a["lr_wsd_decay_iters"]
        if n <= start:
            coeff = 1.0
        else:
            r = (n - start) / a["lr_wsd_decay_iters"]
            coeff = {"linear": 1.0 - r, "cosine": 0.5 * (math.cos(math.pi * r) + 1.0), "minus_sqrt": 1.0 - math.sqrt(r)}[
                a["lr_wsd_decay_style"]]
    return min_lr + coeff * (max_lr - min_lr)


@pytest.mark.parametrize(
    "style",
    [{"lr_decay_style": "cosine"}, {"lr_decay_style": "linear", "lr_decay_iters": 4000},
     {"lr_decay_style": "WSD", "lr_wsd_decay_style": "minus_sqrt", "lr_wsd_decay_iters": 800},
     {"lr_decay_style": "WSD", "lr_wsd_decay_style": "cosine", "lr_wsd_decay_iters": 1000}],
)
def test_megatron_args_plan_megatrons_own_lr(style):
    # W&B gets vars(args): flat names, unset ones None
    args = {"train_iters": 5000, "lr": 3e-4, "min_lr": 3e-5, "lr_warmup_iters": 250, "lr_warmup_init": 1e-6,
            "lr_decay_iters": None, "lr_warmup_fraction": None, "global_batch_size": 256,
            "lr_wsd_decay_style": "exponential", "lr_wsd_decay_iters": None, **style}
    plan = LrSchedule.from_params(args, trainer="Megatron-LM")
    _check(plan, lambda n: megatron_lr(n, args), range(0, 5001))


def test_megatron_warmup_after_the_decay_is_a_note():
    args = {"train_iters": 5000, "lr": 3e-4, "min_lr": 0.0, "lr_warmup_iters": 6000, "lr_decay_style": "cosine"}
    plan = LrSchedule.from_params(args, trainer="Megatron-LM")
    assert plan is not None and plan.source == "steps-only" and "lr_decay_iters=5000" in plan.notes[0]


# --- OLMo: allenai/OLMo olmo/optim.py schedulers, olmo/train.py scheduler_current / scheduler_max


def olmo_lr(step, cfg: dict) -> float:
    sched, lr = cfg["scheduler"], cfg["optimizer"]["learning_rate"]
    per_step = cfg["global_train_batch_size"] * cfg["model"]["max_sequence_length"]
    duration = cfg["max_duration"]
    if isinstance(duration, str) and duration.endswith("T"):
        max_tokens = int(float(duration[:-1]))
        max_steps = max_tokens // per_step
    else:
        max_steps = int(float(duration))
        max_tokens = max_steps * per_step
    tokens = sched["units"] == "tokens"
    current, t_max = (step * per_step, max_tokens) if tokens else (step, max_steps)
    t_max = t_max if sched["t_max"] is None else sched["t_max"]
    if sched["name"] == "constant":
        return lr
    eta, warmup = lr * sched["alpha_f"], sched["t_warmup"]
    if current < warmup:
        wmin = sched["warmup_min_lr"] if sched["warmup_min_lr"] is not None else lr * 0.10
        return wmin + (lr - wmin) * min(current, warmup) / warmup
    if current >= t_max:
        return eta
    current, span = current - warmup, t_max - warmup
    if sched["name"] == "cosine_with_warmup":
        return eta + (lr - eta) * (1 + math.cos(math.pi * current / span)) / 2
    return lr - (lr - eta) * (current / span)


@pytest.mark.parametrize(
    "sched",
    [
        {"name": "cosine_with_warmup", "units": "steps", "t_warmup": 200, "t_max": None, "alpha_f": 0.1,
         "warmup_min_lr": None},
        {"name": "linear_with_warmup", "units": "steps", "t_warmup": 100, "t_max": 1500, "alpha_f": 0.0,
         "warmup_min_lr": 0.0},
        {"name": "cosine_with_warmup", "units": "tokens", "t_warmup": 2048 * 4 * 150, "t_max": None, "alpha_f": 0.05,
         "warmup_min_lr": 1e-6},
        {"name": "constant", "units": "steps", "t_warmup": 0, "t_max": None, "alpha_f": 0.1, "warmup_min_lr": None},
    ],
)
@pytest.mark.parametrize("duration", [2000, "16384000T"])  # steps, or tokens: 2000 steps of 4 x 2048
def test_olmo_config_plans_olmos_own_lr(sched, duration):
    # W&B gets the TrainConfig as nested dicts
    cfg = {"optimizer": {"name": "adamw", "learning_rate": 4e-4}, "scheduler": sched, "max_duration": duration,
           "global_train_batch_size": 4, "model": {"max_sequence_length": 2048, "d_model": 64}}
    plan = LrSchedule.from_params(cfg, trainer="OLMo")
    _check(plan, lambda k: olmo_lr(k, cfg), range(1, 2001))
    assert plan is not None and plan.total_steps == 2000


def test_olmo_warmup_floor_above_the_lr_is_a_note():
    cfg = {"optimizer": {"learning_rate": 4e-4}, "max_duration": 2000, "global_train_batch_size": 4,
           "model": {"max_sequence_length": 2048},
           "scheduler": {"name": "cosine_with_warmup", "t_warmup": 100, "warmup_min_lr": 1e-3}}
    plan = LrSchedule.from_params(cfg)  # recognised by its names
    assert plan is not None and plan.source == "steps-only" and "warmup_min_lr=0.001" in plan.notes[0]


def test_every_trainer_with_a_reader_is_a_convention_the_frame_detects():
    from tracker_plugin.frame.conventions import CONVENTIONS
    from tracker_plugin.plan.trainers import _READERS

    assert set(_READERS) <= {c.name for c in CONVENTIONS}


# --- end to end: a fixture run analysed with no plan flags reports the plan its params hold


def _analyze(capsys, name: str, *flags: str) -> tuple[str, dict]:
    import json

    from tracker_plugin.cli import main

    (run_dir,) = (FRAMEWORKS / "wandb" / name).glob("offline-run-*")
    assert main(["analyze", f"wandb-offline:{run_dir}", "--target", "3.0", *flags]) == 0
    text = capsys.readouterr().out
    assert main(["analyze", f"wandb-offline:{run_dir}", "--target", "3.0", "--json", *flags]) == 0
    return text, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("name", "trainer", "named"),
    [("nanogpt-wandb", "nanoGPT", ("warmup_iters", "40")),
     ("torchtitan-wandb", "torchtitan", ("lr_scheduler.decay_type", "cosine")),
     ("litgpt-wandb", "litgpt", ("train.lr_warmup_steps", "40"))],
)
def test_a_fixture_run_reports_the_plan_from_its_params(capsys, name, trainer, named):
    text, document = _analyze(capsys, name)
    plan = document["lr_plan"]
    assert plan["source"] == "params" and plan["total_steps"] == 400
    assert plan["params"][named[0]] == named[1]
    assert plan["description"].startswith(f"cosine from params ({trainer}: ")
    assert f"planned lr: cosine from params ({trainer}: " in text
    assert f"{named[0]}={named[1]}" in text


def test_a_run_whose_params_know_only_the_total_says_so_in_one_line(capsys):
    # The Lightning module's hparams hold max_steps and no schedule.
    text, document = _analyze(capsys, "lightning-wandb")
    plan = document["lr_plan"]
    assert plan["source"] == "steps-only" and plan["total_steps"] == 400 and plan["params"] == {"max_steps": "400"}
    (line,) = [line for line in text.splitlines() if "planned steps known, schedule shape not: interval widened" in line]
    assert line.startswith("note: ")


def test_a_steps_only_plan_takes_its_shape_from_the_log_ending_at_the_planned_total():
    from tracker_plugin.core.forecast import UNKNOWN_PLAN_INFLATION, plan_inflation
    from tracker_plugin.plan.schedule import infer_lr_schedule

    planned = LrSchedule.from_params({"max_steps": "1000", "batch_size": 8})
    assert planned is not None and planned.source == "steps-only"
    step = np.arange(0, 601, 10.0)
    progress = np.clip((step - 50) / 950, 0, None)
    lr = np.where(step < 50, 1e-3 * step / 50, 1e-4 + 0.5 * (1 + np.cos(np.pi * progress)) * 9e-4)
    plan = infer_lr_schedule(step, lr, planned=planned)
    assert plan.source == "steps-only" and plan.total_steps == 1000
    assert plan.schedule is not None and plan.schedule.steps[-1] == 1000
    # the decay fitted with its end fixed finds the floor the log implies (0.1x the peak)
    assert float(plan.schedule.at(1000.0)) == pytest.approx(1e-4, rel=0.02)
    assert plan.note.startswith("planned steps known, schedule shape not: interval widened")
    assert plan_inflation(plan) == UNKNOWN_PLAN_INFLATION
    # no decay in the log yet: the last lr is held, to the planned total
    held = infer_lr_schedule(step, np.full(len(step), 1e-3), planned=planned)
    assert held.source == "steps-only" and held.total_steps == 1000
    assert float(held.schedule.at(900.0)) == pytest.approx(1e-3)


def test_a_planned_total_the_log_has_passed_is_set_aside_and_said_so():
    from tracker_plugin.plan.schedule import infer_lr_schedule

    step = np.arange(0, 601, 10.0)
    passed = LrSchedule.steps_only(500)
    said = "the planned last step (500) is behind the log's last (600) and is set aside"
    unknown = infer_lr_schedule(step, None, planned=passed)
    assert unknown.schedule is None and said in unknown.note and "no planned schedule" not in unknown.note
    progress = np.clip((step - 50) / 950, 0, None)
    lr = np.where(step < 50, 1e-3 * step / 50, 1e-4 + 0.5 * (1 + np.cos(np.pi * progress)) * 9e-4)
    inferred = infer_lr_schedule(step, lr, planned=passed)
    assert inferred.source == "inferred" and inferred.note.endswith(said)
    # with no plan at all the note is as before
    assert infer_lr_schedule(step, None).note.startswith("no lr logged and no planned schedule: ")


def test_a_composer_schedule_in_durations_is_steps_only_with_its_planned_batches():
    # llm-foundry yaml: durations as "<N>ba"; the shape is not read, the total is
    yaml = {"scheduler": {"name": "cosine_with_warmup", "t_warmup": "100ba", "alpha_f": 0.1}, "max_duration": "4800ba",
            "global_train_batch_size": 256, "max_seq_len": 2048}
    plan = LrSchedule.from_params(yaml, trainer="Composer / llm-foundry")
    assert plan is not None and plan.source == "steps-only" and plan.total_steps == 4800
    assert plan.params[0] == ("max_duration", "4800ba")


def test_a_run_logged_as_nanogpt_without_nanogpts_schedule_names_gets_no_plan_of_its_defaults():
    # modded-nanoGPT style: nanoGPT's keys in the log, its own config names
    config = {"num_iterations": 5100, "cooldown_frac": 0.4, "batch_size": 8 * 64 * 1024}
    assert LrSchedule.from_params(config, trainer="nanoGPT") is None


# --- Hugging Face Trainer: TrainingArguments as its MLflow and W&B callbacks log them (args.to_dict())

HF_EPOCHS = {"lr_scheduler_type": "cosine", "max_steps": "-1", "num_train_epochs": "3", "warmup_steps": "0.1",
             "learning_rate": "0.001", "gradient_accumulation_steps": "4"}


def test_an_hf_run_planned_in_epochs_says_its_planned_steps_are_not_in_the_params():
    """max_steps -1 and num_train_epochs 3: HF computes the total from the data loader's
    length, which reaches neither tracker. No plan, and a note says why."""
    plan, notes = read_planned_lr(HF_EPOCHS, trainer="Hugging Face Trainer")
    assert plan is None
    (note,) = notes
    assert "cosine lr over num_train_epochs=3" in note and "not the steps an epoch takes" in note
    assert LrSchedule.from_params(HF_EPOCHS) is None


def test_an_hf_warmup_below_one_step_is_a_share_of_the_planned_steps():
    """transformers' get_warmup_steps: warmup_steps below 1 is a ratio, ceil(total x ratio) steps."""
    plan = LrSchedule.from_params({**HF_EPOCHS, "max_steps": "123"}, trainer="Hugging Face Trainer")
    assert plan is not None and plan.source == "params" and plan.total_steps == 123
    assert "after 13 warmup steps" in plan.description  # ceil(12.3)
    assert float(plan.at(13.0)) == pytest.approx(1.0) and float(plan.at(6.5)) == pytest.approx(0.5)
