"""Retrieval server for the search tool: BM25 (bm25s) or dense (faiss) over a jsonl corpus.

Speaks Search-R1's API (``POST /retrieve``), so Search-R1 and verl search setups work
against it unchanged. Run it with ``agentrl retriever --corpus C --index-dir D --port P``.
"""
