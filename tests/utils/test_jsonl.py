"""jsonl reading and parquet writing, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentrl.utils.jsonl import JsonlError, json_default, read_jsonl, write_parquet


def test_reads_objects_with_their_line_numbers_skipping_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n{"b": [1, 2]}\n')
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (3, {"b": [1, 2]})]


@pytest.mark.parametrize("text,message", [
    ('{"a": 1}\n{"a": \n', "line 2: invalid JSON"),
    ('{"a": 1}\n[1, 2]\n', "line 2: expected a JSON object, got list"),
])
def test_bad_lines_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(JsonlError, match=f"bad.jsonl, {message}"):
        list(read_jsonl(path))


def test_missing_file(tmp_path):
    with pytest.raises(JsonlError, match="nope.jsonl: no such file"):
        list(read_jsonl(tmp_path / "nope.jsonl"))


def test_write_parquet_round_trips_and_refuses_nothing(tmp_path):
    rows = [{"x": 1, "d": {"k": "v"}}, {"x": 2, "d": {"k": "w"}}]
    path = write_parquet(rows, tmp_path / "sub" / "rows.parquet")
    assert pq.read_table(path).to_pylist() == rows
    with pytest.raises(ValueError, match="no rows to write"):
        write_parquet([], tmp_path / "empty.parquet")


def test_read_jsonl_streams_gzip(tmp_path):
    import gzip

    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write('{"id": "1"}\n\n{"id": "2"}\n')
    assert list(read_jsonl(path)) == [(1, {"id": "1"}), (3, {"id": "2"})]


def test_json_default_writes_parquet_values_as_plain_json():
    import json

    import numpy as np

    row = {"ids": np.array([1, 2]), "score": np.float32(0.5), "tags": {"b", "a"}, "p": Path("x")}
    assert json.loads(json.dumps(row, default=json_default)) == {
        "ids": [1, 2], "score": 0.5, "tags": ["a", "b"], "p": "x"}
