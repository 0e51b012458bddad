"""Structured responses of chat servers: tool calls, finish reasons, the reasoning/content
split, usage and several choices, read from every path a server offers (chat completions,
streamed or not; Anthropic messages; Ollama's chat) into one typed form
(:mod:`.records`), so that ``structured-parity`` compares them field by field."""
