"""pytest-infercheck: correctness checks of LLM inference engines as pytest items."""

__version__ = "0.1.0"
