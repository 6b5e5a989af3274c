"""garlicfarm's Spark side: the `garlicfarm` Python data source (placeholder until the
Spark issue lands; the package must exist so that the layout installs)."""
