"""Callbacks that drive a `TrainingReporter` from training frameworks.

Each module imports its framework at import time, so import only the one you use:
`trainplan.runtime.integrations.huggingface` (transformers' `Trainer`) and
`trainplan.runtime.integrations.lightning` (PyTorch Lightning's `Trainer`).
"""
