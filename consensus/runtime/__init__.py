"""The farm's server: a node process (`node`, `group`, `service` and the calls it
serves), its transport and the wire adapters on its sockets, disk storage, the built-in
state machines, admission and metrics. See docs/runtime.md.

The other sides live beside it: the client in `consensus.client`, the codecs in
`consensus.wire`, what every side shares in `consensus.common` (errors, result values)
and `consensus.net` (security, dialing, backoff), the operators' commands in
`consensus.admin` and the test harness (`LocalCluster`, torture) in `consensus.torture`.
Nothing is imported here: a node loads its modules on demand.
"""
