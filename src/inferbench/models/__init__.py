"""Models: a registry of builders (``create_model``), checkpoints, MLP training and ONNX export."""

from inferbench.models.registry import InputSpec, ModelSpec, create_model, list_models, make_inputs

__all__ = ["InputSpec", "ModelSpec", "create_model", "list_models", "make_inputs"]
