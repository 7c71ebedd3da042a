"""The node agent (issue 33): a DaemonSet that checkpoints one gVisor pod's sandbox on the operator's request.

It runs on every gVisor node, reads nothing of the cluster but TokenReviews, and answers two requests only:
checkpoint one pod into ``<root>/<namespace>/<name>``, delete one image. See docs/gvisor.md.
"""
