"""The local files trainers write: HF ``trainer_state.json`` and Lightning ``metrics.csv``.

Both are read as their trainer logs them (:mod:`tracker_plugin.frame.conventions`):

- ``trainer_state.json`` (in every HF checkpoint): its ``log_history`` is one entry per
  ``on_log`` call, with ``step`` the global (optimizer) step; its top-level fields
  (``max_steps``, ``global_step``, ``train_batch_size``, ``logging_steps``) are the config.
  Gradient accumulation is not recorded there, so tokens per step need ``batch_size``
  unless the run logged ``num_input_tokens_seen``. The clock is ``train_runtime``, which
  the Trainer adds to every entry only with ``include_num_input_tokens_seen`` (otherwise
  once, at the end: no clock, and the analysis says there is no time in the log).
- Lightning ``CSVLogger``'s ``metrics.csv``: a row per ``log_metrics`` call, ``step`` the
  global step; ``hparams.yaml`` beside it is the config (read when PyYAML is installed).
  Its rows hold no time of their own; a time the user logs (``self.log("time", ...)``) is
  found by the common time names.

Both files are read with bounds, so that a damaged or hostile one ends in an error naming
it rather than a crash or a hang: JSON nested deeper than any trainer writes is refused
before it is parsed (the parser recurses once per level), and YAML is read by
``safe_load``'s loader with a limit on nesting, on the size its aliases expand to (a
"billion laughs" document) and no alias to a node that contains it (a loop).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError
from tracker_plugin.frame.conventions import build_read_history, detect, finish_reading
from tracker_plugin.frame.from_params import with_planned_lr
from tracker_plugin.frame.history import History
from tracker_plugin.plan.params import flat_params
from tracker_plugin.trackers.options import ReadOptions

__all__ = ["TRAINER_STATE", "is_trainer_state", "read_frame_as_trainer", "read_trainer_state", "sibling_hparams"]

TRAINER_STATE = "trainer_state.json"
# Deeper than any trainer's file nests (trainer_state.json: 4 levels; hparams.yaml: a few).
_DEEPEST = 100
# More nodes than any config holds once its aliases are expanded.
_MOST_NODES = 100_000
# A JSON string, whose brackets are text: skipped when counting how deep the file nests.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')


def is_trainer_state(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() == ".json"


def read_trainer_state(path: str | os.PathLike[str], options: ReadOptions) -> History:
    """An HF ``trainer_state.json`` as a :class:`History`.

    Raises
    ------
    DataError
        The file is not JSON or has no ``log_history`` list.
    """
    run = os.fspath(path)
    try:
        text = Path(run).read_text()
        if _json_depth(text) > _DEEPEST:
            raise DataError(f"nests deeper than {_DEEPEST} levels: not an HF trainer_state.json", run=run)
        state = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot be read as a trainer_state.json ({type(exc).__name__})", run=run) from None
    log = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(log, list) or not all(isinstance(row, dict) for row in log):
        raise DataError("has no 'log_history' list: not an HF trainer_state.json", run=run)
    config = {k: v for k, v in state.items() if k != "log_history" and not isinstance(v, (dict, list))}
    frame = pd.DataFrame(log)
    return read_frame_as_trainer(frame, config, options, run=run, native_step="step", finished=True)


def _json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest, outside its strings."""
    marks = np.frombuffer(_JSON_STRING.sub("", text).encode(), np.uint8)
    if not len(marks):
        return 0
    depth = np.cumsum(((marks == ord("[")) | (marks == ord("{"))).astype(np.int64))
    depth -= np.cumsum(((marks == ord("]")) | (marks == ord("}"))).astype(np.int64))
    return int(depth.max())


def sibling_hparams(path: Path) -> dict[str, Any]:
    """Lightning's ``hparams.yaml`` beside a ``metrics.csv``, flattened, with LightningCLI's
    ``config.yaml`` there too (SaveConfigCallback writes the parsed config, the Trainer's
    arguments such as ``trainer.accumulate_grad_batches`` among them, into the first logger's
    log_dir); the hparams win a name both hold. Empty without either (or without PyYAML).

    Raises
    ------
    DataError
        A file cannot be read as YAML text, nests too deep, loops, or its aliases expand
        past any config's size; the error names the file.
    """
    config: dict[str, Any] = {}
    for name in ("hparams.yaml", "config.yaml"):
        for key, value in _yaml_file(path.with_name(name)).items():
            config.setdefault(key, value)
    return config


def _yaml_file(path: Path) -> dict[str, Any]:
    """A YAML mapping file, flattened; empty when it is absent (or PyYAML is)."""
    if not path.is_file():
        return {}
    try:
        import yaml
    except ImportError:
        return {}
    try:
        loaded = yaml.load(path.read_text(), Loader=_bounded_loader())
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot be read: not UTF-8 text ({exc.reason} at byte {exc.start})", run=str(path)) from None
    except OSError as exc:
        raise DataError(f"cannot be read ({exc.strerror})", run=str(path)) from None
    except yaml.YAMLError as exc:
        raise DataError(f"cannot be read as YAML ({_yaml_problem(exc)})", run=str(path)) from None
    return flat_params(loaded) if isinstance(loaded, Mapping) else {}


# Longer text than any config dump logged as one value: not parsed.
_LONGEST_LOGGED_YAML = 1_000_000


def with_logged_yaml(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with each value that is a whole config logged as one YAML text read as the
    mapping it holds, its keys under the value's name. Lightning documents this for
    LightningCLI (``LoggerSaveConfigCallback``: ``trainer.logger.log_hyperparams({"config":
    self.parser.dump(self.config)})``), so W&B's config or MLflow's params hold
    ``config`` = the YAML text and ``config.trainer.accumulate_grad_batches`` is found as
    if the config were nested. Text cut short (a tracker's limit on a param's length) is
    read to its last whole line. Read with the bounded loader; text that is no YAML mapping,
    or that the loader refuses (a loop, an alias bomb, nesting too deep), is left as text:
    what it would have given is then simply not known, and said so where it is needed."""
    out = dict(config)
    for key, value in config.items():
        if not isinstance(value, str) or "\n" not in value or ":" not in value or len(value) > _LONGEST_LOGGED_YAML:
            continue
        # A dump ends its last line; text that does not was cut short (Lightning's MLFlowLogger
        # keeps 250 characters of a param): only its whole lines are read, never a cut number.
        whole_lines = value if value.endswith("\n") else value[: value.rfind("\n") + 1]
        try:
            import yaml

            loaded = yaml.load(whole_lines, Loader=_bounded_loader())
        except ImportError:
            return out
        except (yaml.YAMLError, ValueError, TypeError, RecursionError):
            continue
        if isinstance(loaded, Mapping):
            for name, item in flat_params(loaded).items():
                out.setdefault(f"{key}.{name}", item)
    return out


def _yaml_problem(exc: Exception) -> str:
    """The problem of a YAML error in one line, with where it is."""
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem}, line {mark.line + 1}" if mark is not None else str(problem)


@functools.cache
def _bounded_loader() -> type:
    """``safe_load``'s loader, bounded: it refuses nesting deeper than ``_DEEPEST``, an
    alias to a node that contains it, and aliases that expand past ``_MOST_NODES``. Tags
    of Python objects (Lightning dumps a Namespace or a tuple with ``yaml.dump``) are read
    as the plain mapping, list or text they hold instead of failing the whole file."""
    import yaml
    from yaml.composer import ComposerError

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0
            self._sizes: dict[int, int] = {}  # id of each finished node -> its expanded size

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                node = self.anchors.get(event.anchor)
                if node is not None and id(node) not in self._sizes:  # still being composed
                    raise ComposerError(None, None, f"alias *{event.anchor} refers to a node that holds it: a loop",
                                        event.start_mark)
                return super().compose_node(parent, index)
            self._depth += 1
            if self._depth > _DEEPEST:
                raise ComposerError(None, None, f"nested deeper than {_DEEPEST} levels", self.peek_event().start_mark)
            node = super().compose_node(parent, index)
            self._depth -= 1
            self._sizes[id(node)] = size = 1 + sum(self._sizes[id(child)] for child in _children(node))
            if size > _MOST_NODES:
                raise ComposerError(None, None, f"its aliases expand to more than {_MOST_NODES:,} values",
                                    node.start_mark)
            return node

    BoundedLoader.add_constructor(None, _plain)  # any other tag: what the node holds
    return BoundedLoader


def _children(node: Any) -> list[Any]:
    """A YAML node's child nodes: a sequence's items, a mapping's keys and values."""
    if isinstance(node.value, list):
        return [part for item in node.value for part in (item if isinstance(item, tuple) else (item,))]
    return []


def _plain(loader: Any, node: Any) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


def read_frame_as_trainer(
    frame: pd.DataFrame,
    config: Mapping[str, Any],
    options: ReadOptions,
    *,
    run: str,
    native_step: str,
    finished: bool,
) -> History:
    """A local file's table, read by its trainer's conventions."""
    reading = options.reading(frame.columns, config, native_step=native_step)
    history = build_read_history(frame, reading, run=run, logged=set(map(str, frame.columns)))
    return with_planned_lr(finish_reading(history, reading, finished=finished), config)



def trainer_detected(columns: Any) -> bool:
    """Does a CSV's header look like a trainer's own log (Lightning's metrics.csv)?"""
    return detect({str(c) for c in columns}) is not None
