"""Small shared helpers with no home of their own (HTTP with retries)."""
