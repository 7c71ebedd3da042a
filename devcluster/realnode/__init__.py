"""The real node of the local cluster: its network namespace, configuration and processes."""
