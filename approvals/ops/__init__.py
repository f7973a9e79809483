"""For load balancers and Prometheus: health, readiness, metrics, and system checks."""
