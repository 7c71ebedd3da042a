"""The I/O shell: the only code that talks to the Kubernetes API or waits on time.

client.py is every API call; reconciler.py observes (cache, then the API), asks decisions/ what to do
and acts; cache.py holds what the watches saw; scheduler.py wakes sessions at their deadlines.
"""
