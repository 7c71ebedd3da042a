"""What the tests and the benchmarks both use, so that neither imports the other: the agent-sandbox
manifests (`manifests`), the operator's flags for the local cluster's network (`operator_args`) and the
upstream python runtime as a local process (`runtime_harness`).

In no wheel, as devcluster/, tests/ and benchmarks/; it imports the products and devcluster/, never tests/
or benchmarks/ (tests/unit/test_architecture.py holds that).
"""
