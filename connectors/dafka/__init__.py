"""Dafka, wire-compatible with zeromq/dafka (see docs/protocol.md)."""
