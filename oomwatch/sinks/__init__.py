"""Where incidents go once stored: the JSON log line (`log`) and Prometheus (`metrics`).

Kubernetes Events and annotations are a sink too, but live with the rest of the cluster code
in `oomwatch.kube`.
"""
