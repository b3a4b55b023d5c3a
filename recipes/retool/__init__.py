"""The ReTool recipe: math solved with the Python sandbox tool (see README.md)."""
