"""The operator against a real Kubernetes API server (``make e2e-kube``).

:mod:`e2e.kube.tools` builds and caches the pinned control-plane binaries,
:mod:`e2e.kube.control_plane` starts etcd, kube-apiserver and kube-controller-manager on
127.0.0.1, and the pytest files beside them run the operator's flows against it.
"""
