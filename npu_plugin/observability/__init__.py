"""What the daemon reports about itself: the telemetry seam, Prometheus metrics and the gRPC health
check."""
