"""HTTP to a target: the streaming chat client, the target's /tokenize, /models and /version.
The one place transport failures are named: the streamed request's by wire/stream.py and
wire/failures.py (it runs below any HTTP library), the plain reads' from aiohttp's exceptions."""
