"""The .wandb record log: framing, checksums, damage; record values; config facts."""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker_plugin.plan.params import batch_from_config, config_value
from tracker_plugin.trackers.wandb_data import decode, wandb_progress, whole
from tracker_plugin.trackers.wandb_log import BLOCK, FILE_HEADER, LogCorrupt, LogTail, read_log, write_records


def framed(payloads: list[bytes]) -> bytes:
    out = io.BytesIO()
    out.write(FILE_HEADER)
    write_records(out, payloads, len(FILE_HEADER))
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3 * BLOCK), max_size=8))
def test_records_of_any_size_round_trip(sizes):
    payloads = [bytes([k % 251]) * n for k, n in enumerate(sizes)]
    data = framed(payloads)
    tail = LogTail()
    assert [r.data for r in read_log(data, tail)] == payloads
    assert tail.end == len(data) and tail.incomplete_at is None


def test_block_edges_pad_and_split_like_leveldb():
    # a record ending 7 bytes before a block boundary leaves room for an empty FIRST
    # fragment; ending 3 bytes before it leaves padding.
    for gap in (7, 3, 0):
        first = BLOCK - len(FILE_HEADER) - 7 - gap
        data = framed([b"a" * first, b"bb", b"c" * 10])
        assert [len(r.data) for r in read_log(data)] == [first, 2, 10]
        assert all(byte == 0 for byte in data[BLOCK - gap : BLOCK]) or gap == 7


def test_damage_is_reported_with_its_byte():
    data = bytearray(framed([b"x" * 100, b"y" * 100]))
    data[7 + 7 + 100 + 7 + 50] ^= 1
    with pytest.raises(LogCorrupt, match=r"record checksum mismatch at byte 114"):
        list(read_log(bytes(data)))
    with pytest.raises(LogCorrupt, match="not a .wandb file"):
        list(read_log(b"PK\x03\x04 not a run"))
    with pytest.raises(LogCorrupt, match="unknown .wandb file version"):
        list(read_log(b":W&B\x00\x00\x07" + bytes(20)))
    zeroed = bytearray(framed([b"x" * 100, b"y" * 100]))
    zeroed[7 : 7 + 107] = bytes(107)
    with pytest.raises(LogCorrupt, match="zeroed region at byte 7"):
        list(read_log(bytes(zeroed)))


def test_a_cut_off_tail_ends_the_log_and_says_where():
    data = framed([b"x" * 100, b"y" * 50_000])
    tail = LogTail()
    assert [len(r.data) for r in read_log(data[:-10], tail)] == [100]
    assert tail.incomplete_at == 7 + 107 and tail.end == 7 + 107
    tail = LogTail()
    assert len(list(read_log(data + bytes(30), tail))) == 2 and tail.incomplete_at is None  # zero fill


def test_typed_history_values_are_read_without_their_json_form():
    from wandb.proto import wandb_internal_pb2 as pb

    from tracker_plugin.trackers.wandb_offline_read import _item_value

    history = pb.HistoryRecord()
    history.item.add(key="i", integer=7)
    history.item.add(key="x", number=2.5)
    history.item.add(key="s", text="hi")
    history.item.add(key="j", json='{"a": NaN}')
    history.item.add(key="n", none=0)  # google.protobuf.NullValue
    history.item.add(key="v", value_json="Infinity")
    values = {item.key: _item_value(item) for item in history.item}
    assert values["i"] == 7 and values["x"] == 2.5 and values["s"] == "hi" and values["n"] is None
    assert math.isnan(values["j"]["a"]) and values["v"] == math.inf


def test_values_as_wandb_returns_them():
    assert math.isnan(decode("NaN")) and decode("-Infinity") == -math.inf and decode("text") == "text"
    assert (
        whole(1024.0) == 1024 and isinstance(whole(1024.0), int) and whole(0.5) == 0.5 and whole(True) is True
    )
    assert wandb_progress(12.0) == "_step 12" and wandb_progress(None) is None and wandb_progress(-1) is None
    assert wandb_progress(True) is None and wandb_progress("7") is None


def test_batch_from_configs():
    config = {
        "trainer": {"value": {"global_batch_size": 1024.0, "batch_size": "auto"}},
        "optim": {"lr": 3e-4, "warmup_steps": 0},
        "lr_scheduler": "wsd",
        "max_steps": 10_000,
        "decay_steps": 2_000.0,
        "min_lr": 0.0,
    }
    assert config_value(config, "trainer.global_batch_size") == 1024.0
    assert batch_from_config(config, ("trainer.batch_size", "trainer.global_batch_size")) == (
        1024.0,
        "trainer.global_batch_size",
    )
    assert (
        batch_from_config({"batch_size": -1, "tokens_per_step": True}, ("batch_size", "tokens_per_step"))
        is None
    )


def test_an_offline_summary_is_replayed_in_the_order_it_was_written(tmp_path):
    from wandb.proto import wandb_internal_pb2 as pb

    from tracker_plugin.trackers.wandb_offline import read_offline_run

    def summary(*updates, remove=()):
        record = pb.Record()
        for path, value in updates:
            item = record.summary.update.add(value_json=value)
            item.nested_key.extend(path) if len(path) > 1 else setattr(item, "key", path[0])
        for path in remove:
            record.summary.remove.add(key=path)
        return record.SerializeToString()

    records = [
        summary((("a", "b"), "1"), (("x",), "1"), (("loss_eta/keep",), '"v"')),
        summary((("a",), '{"c": 2}')),  # replaces a, and the a.b written before it
        summary((("a", "d"), "3"), remove=["x", "never"]),
        summary((("x",), "NaN")),
    ]
    path = tmp_path / "run-x.wandb"
    with open(path, "wb") as out:
        out.write(FILE_HEADER)
        write_records(out, records, len(FILE_HEADER))
    run = read_offline_run(path, [], ref="x")
    assert run.summary.keys() == {"a", "loss_eta/keep", "x"}
    assert (
        run.summary["a"] == {"c": 2, "d": 3}
        and run.summary["loss_eta/keep"] == "v"
        and math.isnan(run.summary["x"])
    )
