"""Reaching a node, for every side that does (the server's dialers, the client, the
operators' commands, the torture harness): who may talk and how connections are
protected (`security`), opening a connection through the wire's handshake (`dial`), and
the pauses between retries (`backoff`)."""
