"""Small shared helpers: HTTP with retries, serving an app in a thread, jsonl/parquet I/O."""
