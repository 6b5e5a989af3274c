"""The operators' commands (``garlicfarm status | add-server | remove-server |
transfer-leader | config | snapshot``), their output, the live status page and the
health verdicts they share. Each talks to a farm with the client API."""
