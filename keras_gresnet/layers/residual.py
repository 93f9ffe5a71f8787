"""The residual units as Keras layers: :class:`ResidualUnit` (HE's units, GR's
gate) and :class:`DenseUnit` (GR's fully-connected blocks), for
``keras.Sequential`` and subclassed models.

Each layer holds one implementation, the functional one of
:mod:`keras_gresnet.layers.units`: ``build`` calls :func:`residual_unit`
(or :func:`dense_unit`) on a ``keras.Input`` of the layer's input shape and
keeps the resulting functional ``keras.Model`` as its sublayer ``inner``,
which ``call`` runs. Its layers are named ``{layer name}_{...}`` (``unit_gate``,
``unit_1_conv``...), as the functional unit's of that prefix.
"""

import keras

from keras_gresnet._checks import check_choice, check_int, check_rate, is_real
from keras_gresnet.layers.merges import PACKAGE, ResidualGate
from keras_gresnet.layers.units import (
    PREACT_TYPES,
    PREACT_UNITS,
    UnitSpec,
    dense_unit,
    residual_unit,
)


class _Wrapper(keras.layers.Layer):
    """A layer that runs the functional graph :meth:`_graph` builds on its
    input (the functional model ``inner``, made in ``build`` under the layer's own
    dtype policy)."""

    def _graph(self, x):
        raise NotImplementedError

    def build(self, input_shape):
        inputs = keras.Input(shape=tuple(input_shape)[1:])
        outer = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.dtype_policy)  # the sublayers take this layer's dtype
        try:
            self.inner = keras.Model(inputs, self._graph(inputs), name=f"{self.name}_unit")
        finally:
            keras.config.set_dtype_policy(outer)

    def call(self, inputs, training=None):
        return self.inner(inputs, training=training)

    def compute_output_shape(self, input_shape):
        if not self.built:
            self.build(input_shape)
        return self.inner.compute_output_shape(input_shape)

    @property
    def layers(self):
        """The unit's layers (none before it is built): the package's tools
        (``gate_layers``, ``analysis.gate_values``) see into it."""
        return list(self.inner.layers) if self.built else []

    @property
    def gate(self):
        """The unit's :class:`ResidualGate` (``gate.k``, ``gate.g`` = g(k)),
        or ``None`` for an ungated or not yet built unit."""
        if not self.built:
            return None
        return next((layer for layer in self.inner.layers if isinstance(layer, ResidualGate)),
                    None)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResidualUnit(_Wrapper):
    """One residual unit of HE (optionally with GR's gate) as a layer:
    :func:`~keras_gresnet.layers.residual_unit` of the same arguments.

    Args:
        filters: width of the unit's convs (a bottleneck's output has
            ``expansion * filters`` channels).
        stride: stride of the unit.
        preact_type: a pre-activation unit's BN-ReLU, see
            :data:`~keras_gresnet.layers.PREACT_TYPES` (``None``: chosen
            as :func:`residual_unit` does).
        **kwargs: the fields of :class:`UnitSpec` (``unit=``, ``block=``,
            ``shortcut=``, ``gated=``, ``k_initial=``..., checked here) and
            Keras' layer arguments (``name``, ``dtype``...).
    """

    def __init__(self, filters, stride=1, preact_type=None, **kwargs):
        fields, kwargs = UnitSpec.partition(kwargs)
        super().__init__(**kwargs)
        self.spec = UnitSpec(**fields)
        self.filters = check_int(filters, "filters", 1)
        self.stride = check_int(stride, "stride", 1)
        if preact_type is not None:
            check_choice(preact_type, "preact_type", PREACT_TYPES)
            if not self.spec.preact:
                raise ValueError(
                    f"preact_type places a pre-activation unit's BN-ReLU and needs unit in "
                    f"{PREACT_UNITS}, got unit={self.spec.unit!r}, preact_type={preact_type!r}")
        self.preact_type = preact_type

    def _graph(self, x):
        return residual_unit(x, self.filters, self.spec, stride=self.stride,
                             preact_type=self.preact_type, name=f"{self.name}_")

    def get_config(self):
        fields = self.spec.get_config()
        if isinstance(fields["kernel_initializer"], keras.initializers.Initializer):
            fields["kernel_initializer"] = keras.initializers.serialize(
                fields["kernel_initializer"])
        return {**super().get_config(), "filters": self.filters, "stride": self.stride,
                "preact_type": self.preact_type, **fields}


@keras.saving.register_keras_serializable(package=PACKAGE)
class DenseUnit(_Wrapper):
    """One block of GR's MNIST nets as a layer:
    :func:`~keras_gresnet.layers.dense_unit` of the same arguments (a plain
    Dot-BN-ReLU layer, a gated plain layer, a ResNet or a GResNet block)."""

    def __init__(self, units, residual=False, gated=False, k_initial=1.0, bn_momentum=0.99,
                 **kwargs):
        super().__init__(**kwargs)
        self.units = check_int(units, "units", 1)
        for argument, value in (("residual", residual), ("gated", gated)):
            if not isinstance(value, bool):
                raise ValueError(f"{argument} must be True or False, got {value!r}")
        self.residual, self.gated = residual, gated
        if not is_real(k_initial):
            raise ValueError(f"k_initial must be a number, got {k_initial!r}")
        self.k_initial = float(k_initial)
        self.bn_momentum = check_rate(bn_momentum, "bn_momentum")

    def build(self, input_shape):
        if (self.residual or self.gated) and input_shape[-1] != self.units:
            raise ValueError(
                f"a {'residual' if self.residual else 'gated'} DenseUnit adds its input to "
                f"its output and needs {self.units} input features (units={self.units}), "
                f"got {input_shape[-1]}")
        super().build(input_shape)

    def _graph(self, x):
        return dense_unit(x, self.units, residual=self.residual, gated=self.gated,
                          k_initial=self.k_initial, bn_momentum=self.bn_momentum,
                          name=f"{self.name}_")

    def get_config(self):
        return {**super().get_config(), "units": self.units, "residual": self.residual,
                "gated": self.gated, "k_initial": self.k_initial,
                "bn_momentum": self.bn_momentum}
