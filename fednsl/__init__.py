"""fednsl: federated neuro-symbolic rule learning on one federation core."""

__version__ = "0.1.0"
