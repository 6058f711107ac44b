"""Upstreams: one module per wire format, one place that maps their failures to ours."""
