"""Reading and writing jsonl, and writing parquet rows, with errors that name the file and line.

Used by the data preprocessing scripts and the retriever's corpus reader; `json_default` is
the `json.dumps` fallback for parquet rows' numpy values.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A jsonl file is missing or has a malformed line (the message names both)."""


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, record)` for every non-blank line; each must be a JSON object.
    A `.gz` file is read through gzip, streaming."""
    path = Path(path)
    if not path.is_file():
        raise JsonlError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlError(f"{path}, line {lineno}: invalid JSON: {exc.msg}") from None
            if not isinstance(record, dict):
                raise JsonlError(f"{path}, line {lineno}: expected a JSON object, got "
                                 f"{type(record).__name__}")
            yield lineno, record


def json_default(obj: Any) -> Any:
    """``json.dumps``' fallback for what parquet rows hold: numpy arrays and scalars as lists
    and numbers, sets sorted, anything else as its ``str``."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    return str(obj)


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write `rows` (dicts with the same keys) to a parquet file, creating its directory."""
    path = Path(path).expanduser()
    if not rows:
        raise ValueError(f"no rows to write to {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    import pyarrow as pa  # here: the tools that only read jsonl or dump JSON need no arrow
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    """Write `rows` as one JSON object per line, creating the file's directory."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as sink:
        for row in rows:
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
