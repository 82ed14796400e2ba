"""Adapters that read evidence from the host (the kernel log)."""
