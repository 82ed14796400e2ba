"""The whole cluster in one command: the `kubectl oomwatch` plugin over the agents' Events and
Prometheus, and the Event summary both sides share."""
