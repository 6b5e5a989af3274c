"""ZeroMQ connectors: Dafka (decentralized streaming) and CHP (clustered hashmap)."""
