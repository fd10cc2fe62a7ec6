"""Benchmarking a running OpenAI-compatible LLM server, from the client's side: a streamed completion timed
as its events arrive (``stream``), the wait for a server's health (``health``), and a null server that streams
canned tokens at once, whose figures are the client's own floor (``null_server``). Only the standard library.

The endpoint cells (an engine that drives a server, the server started by the run, `vllm bench serve` beside
them) build on these (issue 73)."""
