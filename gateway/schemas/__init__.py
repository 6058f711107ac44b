"""OpenAI wire models at the gateway's boundary."""
