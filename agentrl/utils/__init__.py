"""Small shared helpers: HTTP with retries, HTTP input limits for our servers, serving an app
in a thread, jsonl/parquet I/O."""
