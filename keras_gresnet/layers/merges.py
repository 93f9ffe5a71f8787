"""Layers that join a unit's shortcut and residual branch.

Every layer here takes ``[shortcut, residual]`` and is written with ``keras.ops`` only, so it runs on TensorFlow,
JAX and PyTorch, and under ``mixed_float16`` (Keras autocasts the float32
weights to the compute dtype inside ``call``).
"""

import keras
from keras import ops

PACKAGE = "keras_gresnet"

GATE_FORMS = ("residual", "plain")
SHORTCUT_GATE_FORMS = ("exclusive", "shortcut_only")


def _check_pair(inputs, layer_name):
    if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
        raise ValueError(
            f"{layer_name} expects inputs=[shortcut, residual], got {inputs!r}"
        )


class _Merge(keras.layers.Layer):
    """A layer of ``[shortcut, residual]`` whose output has the shortcut's
    shape; ``get_config`` adds what :meth:`_config` returns."""

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def _config(self):
        return {}

    def get_config(self):
        return {**super().get_config(), **self._config()}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResidualGate(_Merge):
    """GR's scalar gate: one learned scalar ``k`` per block.

    With ``g = activation`` (ReLU in GR):

    - ``form="residual"`` (GResNet): ``u = g(k) * f(x) + x``
    - ``form="plain"`` (gated plain layer): ``u = g(k) * f(x) + (1 - g(k)) * x``

    ``k <= 0`` makes the block an exact identity, ``k = 1`` gives back the
    ungated block. Call it on ``[x, f(x)]`` (shortcut first).

    Args:
        form: ``"residual"`` or ``"plain"``.
        k_initial: initial value of ``k`` (GR: 1.0).
        activation: ``g``; any Keras activation name (GR: ``"relu"``).
    """

    def __init__(self, form="residual", k_initial=1.0, activation="relu", **kwargs):
        super().__init__(**kwargs)
        if form not in GATE_FORMS:
            raise ValueError(f"form must be one of {GATE_FORMS}, got {form!r}")
        self.form = form
        self.k_initial = float(k_initial)
        self.activation = keras.activations.get(activation)
        self._activation_name = keras.activations.serialize(self.activation)

    def build(self, input_shape):
        self.k = self.add_weight(
            name="k",
            shape=(),
            initializer=keras.initializers.Constant(self.k_initial),
            trainable=True,
        )

    def call(self, inputs):
        _check_pair(inputs, "ResidualGate")
        x, fx = inputs
        g = self.activation(self.k)
        if self.form == "residual":
            return g * fx + x
        return g * fx + (1.0 - g) * x

    @property
    def g(self):
        """The gate's current ``g(k)`` as a Python float."""
        return float(ops.convert_to_numpy(self.activation(self.k)))

    def _config(self):
        return dict(form=self.form, k_initial=self.k_initial,
                    activation=self._activation_name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScaledAdd(_Merge):
    """``u = shortcut_scale * shortcut + residual_scale * residual``.

    HE Table 1's "constant scaling" rows (0.5 on the shortcut, and optionally
    0.5 on F). With both scales 1 it is a plain addition.
    """

    def __init__(self, shortcut_scale=1.0, residual_scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.shortcut_scale = float(shortcut_scale)
        self.residual_scale = float(residual_scale)

    def call(self, inputs):
        _check_pair(inputs, "ScaledAdd")
        x, fx = inputs
        return self.shortcut_scale * x + self.residual_scale * fx

    def _config(self):
        return dict(shortcut_scale=self.shortcut_scale, residual_scale=self.residual_scale)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShortcutGate(_Merge):
    """HE Table 1's data-dependent gates, ``g(x) = sigmoid(W_g x + b_g)``.

    ``g`` is a 1x1 convolution (a dense map over the channel axis, so it
    works on any rank) with one gate per channel, computed from the shortcut
    ``h(x)``: the unit input ``x`` itself, or its projection in a unit that
    changes shape (where ``x`` has another resolution than ``F(x)``).

    - ``form="exclusive"``: ``u = (1 - g(x)) * shortcut + g(x) * f(x)``
    - ``form="shortcut_only"``: ``u = (1 - g(x)) * shortcut + f(x)``

    Call it on ``[shortcut, f(x)]``.

    Args:
        form: ``"exclusive"`` or ``"shortcut_only"``.
        bias_initial: initial ``b_g`` (HE: -6 works, 0 fails for exclusive).
        kernel_initializer: initializer of ``W_g``.
    """

    def __init__(
        self,
        form="exclusive",
        bias_initial=-6.0,
        kernel_initializer="he_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if form not in SHORTCUT_GATE_FORMS:
            raise ValueError(
                f"form must be one of {SHORTCUT_GATE_FORMS}, got {form!r}"
            )
        self.form = form
        self.bias_initial = float(bias_initial)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        in_channels = input_shape[0][-1]
        out_channels = input_shape[1][-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(in_channels, out_channels),
            initializer=self.kernel_initializer,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(out_channels,),
            initializer=keras.initializers.Constant(self.bias_initial),
        )

    def call(self, inputs):
        _check_pair(inputs, "ShortcutGate")
        shortcut, fx = inputs
        g = ops.sigmoid(ops.matmul(shortcut, self.kernel) + self.bias)
        if self.form == "exclusive":
            fx = g * fx
        return (1.0 - g) * shortcut + fx

    def _config(self):
        return dict(form=self.form, bias_initial=self.bias_initial,
                    kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
