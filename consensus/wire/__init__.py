"""Sans-I/O codecs for the Raft wire protocols (Garlic Farm / JRaft binary, the handshake,
the marker-byte protocol). No sockets, threads or clocks live here."""
