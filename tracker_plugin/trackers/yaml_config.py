"""Config files and logged config texts in YAML, read with bounds.

Lightning writes a run's config as YAML: ``hparams.yaml`` and LightningCLI's
``config.yaml`` beside its ``metrics.csv``, and the whole config logged as one text
param (``config``) to W&B or MLflow. YAML is read by ``safe_load``'s loader with a limit
on nesting, on the size its aliases expand to (a "billion laughs" document) and no alias
to a node that contains it (a loop), so that a damaged or hostile file ends in an error
naming it rather than a crash or a hang.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracker_plugin.errors import DataError
from tracker_plugin.plan.params import flat_params

__all__ = ["DEEPEST", "with_logged_yaml", "yaml_file"]

# Deeper than any trainer's file nests (trainer_state.json: 4 levels; hparams.yaml: a few).
DEEPEST = 100
# More nodes than any config holds once its aliases are expanded.
_MOST_NODES = 100_000


def yaml_file(path: Path) -> dict[str, Any]:
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
    """``safe_load``'s loader, bounded: it refuses nesting deeper than ``DEEPEST``, an
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
            if self._depth > DEEPEST:
                raise ComposerError(None, None, f"nested deeper than {DEEPEST} levels", self.peek_event().start_mark)
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
