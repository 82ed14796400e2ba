"""Where incidents go after they are stored: metrics (here), logs and Kubernetes (elsewhere)."""
