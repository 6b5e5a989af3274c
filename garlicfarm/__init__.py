"""The top of the layering: what spans every protocol and package.

`garlicfarm.cli` is the `garlicfarm` command (the runtime's commands from
`consensus.cli`, plus the connectors', the inspector and the Spark demo);
`garlicfarm.inspect` is the protocol inspector (`garlicfarm decode` / `encode`), whose
table names codecs of every layer. Nothing below imports this package.
"""

#: The release: the one place it is written (pyproject.toml reads it, `garlicfarm --version`
#: prints it, CHANGELOG.md has a section for it).
__version__ = "0.1.0"
