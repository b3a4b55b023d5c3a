"""examples/data_preprocess/retool.py: its main() on small jsonl and parquet files; the output
read back equals agentrl.data.retool's rows, and a bad record exits 1 naming file, line, field."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl.data.retool import convert_file

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess" / "retool.py"


def load_script():
    spec = importlib.util.spec_from_file_location("data_preprocess_retool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_writes_train_and_test_parquet(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [
        {"question": "What is 123456789 * 987654321?", "answer": "121932631112635269"},
        {"question": "Sum of 1..1000?", "answer": 500500},
        {"question": "Sum of 1..1000?", "answer": 500500},
    ])
    test = tmp_path / "aime.parquet"
    pq.write_table(pa.Table.from_pylist([{"Problem": "P1", "Answer": 33}]), test)
    out = tmp_path / "out"
    argv = ["--train_file", str(train), "--test_file", str(test), "--local_dir", str(out)]
    assert load_script().main(argv) == 0
    written = pq.read_table(out / "train.parquet").to_pylist()
    assert written == convert_file(train, "train") and len(written) == 2  # duplicate dropped
    assert pq.read_table(out / "test.parquet").to_pylist() == convert_file(test, "test")
    assert load_script().main([*argv, "--keep_duplicates"]) == 0
    assert pq.read_table(out / "train.parquet").num_rows == 3


def test_bad_record_exits_1_naming_file_line_and_field(tmp_path, caplog):
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": "q", "answer": "1"}, {"question": "q2"}])
    with caplog.at_level(logging.ERROR):
        assert load_script().main(["--train_file", str(train), "--local_dir", str(tmp_path / "o")]) == 1
    assert "train.jsonl, line 2: field 'answer': missing answer" in caplog.text
    assert not (tmp_path / "o").exists()


def test_needs_a_file(capsys):
    with pytest.raises(SystemExit) as exc:
        load_script().main(["--local_dir", "x"])
    assert exc.value.code == 2
    assert "give at least one of --train_file, --test_file" in capsys.readouterr().err
