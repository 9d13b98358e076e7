"""LLMInterface implementations: an OpenAI-compatible client and a scripted model."""
