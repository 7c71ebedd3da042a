"""`python -m langchain_k8s_client.cli`: the plugin without its console script (krew's launcher runs it so)."""

from langchain_k8s_client.cli.main import run

run()
