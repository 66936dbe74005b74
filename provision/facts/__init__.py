"""Facts: what a host is right now, read with one batched command and parsed by small parsers."""
