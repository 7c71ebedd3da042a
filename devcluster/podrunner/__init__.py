"""The pod runner: the kubelet half that kwok does not do.

For every pod on the fake node it starts the real program for the pod's image in a filesystem of the
pod's own (bubblewrap), bound to the pod's 127.x IP; it marks the pod Ready only once the readiness
probe passes against that program, NotReady when the program dies, and on deletion stops the whole
process group before it removes the Pod. It also provisions PersistentVolumes for PVCs as directories
that outlive pods.
"""
