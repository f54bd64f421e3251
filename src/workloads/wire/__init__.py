"""HTTP to a target: the streaming chat client, the target's /tokenize, /models and /version.
The one place aiohttp's exceptions are translated."""
