"""The agent surface: the HTTP API's routes, bearer auth, body parsing, rate limit, the
long-poll and the JSON errors."""
