"""`oomwatch report`: the post-mortem of OOM kills from a log, stdin, the store or /dev/kmsg."""
