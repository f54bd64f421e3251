"""Pure computation over the models: SSE decoding, statistics and summaries, token counting
and fitting, realistic text, conversations and nonces, the KV-cache model and what-if replay,
concurrency over time. No network; imports only ``workloads.model``."""
