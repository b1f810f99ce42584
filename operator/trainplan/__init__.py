"""trainplan: plan, launch and track GPU training jobs on Kubernetes."""

__version__ = "0.1.0"
