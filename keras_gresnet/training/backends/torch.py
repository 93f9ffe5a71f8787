"""PyTorch: one device (Keras' PyTorch backend has no data parallelism of
its own yet), ``model.fit`` in one process; ONNX and LiteRT exports."""

from keras_gresnet.training.loop import FitLoop, SingleDevice, refuse_sync_batchnorm

STRATEGIES = ("auto", "default", "one_device")
# model.export's formats here, and the converters each needs. The torch
# backend writes a SavedModel through torch_xla, whose releases do not
# follow torch 2.13: not offered.
EXPORTS = {
    "onnx": (("onnx", "onnx"),),
    "litert": (("litert_torch", "litert-torch"),),
}
SYNCHRONIZED_LAYERS = False
FUSED_STEPS = False  # no device pipeline here


def resolve_strategy(name):
    """Every name PyTorch has is one device."""
    return name


def make_strategy(name, cluster):
    """:class:`~keras_gresnet.training.loop.SingleDevice`."""
    del name, cluster  # one device whatever the name
    return SingleDevice()


def start(name, cluster, check_folder, out):
    """``model.fit`` on one device, once the folder is checked."""
    return FitLoop.start(lambda: make_strategy(name, cluster), check_folder)


def sync_batchnorm(requested, name):
    """One device: nothing to synchronise (``True`` refused)."""
    return refuse_sync_batchnorm(requested, name, "torch")


def has_accelerator():
    """Whether PyTorch sees a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


def runtime():
    """PyTorch's intra-op threads."""
    import torch

    return {"torch_threads": torch.get_num_threads()}
