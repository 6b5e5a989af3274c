"""Sans-I/O codecs for the Raft wire protocols (Garlic Farm / JRaft binary, the handshake,
the marker-byte protocol) and the farm's own formats on them: our extension frames
(`extensions`), the core's messages on JRaft (`jraft_mapping`), what a log entry holds
(`envelope`) and journal pages (`journal_pages`). No sockets, threads or clocks live
here; the server's and the client's sockets use these codecs."""
