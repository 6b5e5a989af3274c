"""The Clustered Hashmap Protocol (ZeroMQ RFC 12, zguide clone pattern)."""
