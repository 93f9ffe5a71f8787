"""Optimizers the papers trained with that Keras 3 does not ship as they were.

GR (2016) trained its MNIST nets with Keras 1's ``Nadam`` (Dozat 2016). Keras
3's ``keras.optimizers.Nadam`` has the same update but another momentum
schedule: ``mu_t = beta_1 * (1 - 0.5 * 0.96 ** t)``, a ramp over about 20
*steps*, and ``epsilon=1e-7``. Keras 1 (and 2 up to 2.3) used
``mu_t = beta_1 * (1 - 0.5 * 0.96 ** (schedule_decay * t))`` with
``schedule_decay=0.004`` (a ramp over thousands of steps, about 20 MNIST
epochs at batch 128) and ``epsilon=1e-8``. :class:`Keras1Nadam` is that
optimizer, written over Keras 3's so that it runs on every backend;
``fixed_momentum=True`` makes it the other reading of GR's words ("momentum
fixed to 0.9 during the whole training"): ``mu_t = beta_1`` at every step.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_gresnet")
class Keras1Nadam(keras.optimizers.Nadam):
    """Keras 1's Nadam: Keras 3's ``Nadam`` with the momentum schedule
    ``mu_t = beta_1 * (1 - 0.5 * 0.96 ** (schedule_decay * t))``.

    Args:
        learning_rate: as in Keras (GR: 0.002).
        beta_1, beta_2: as in Keras (Keras 1's defaults 0.9, 0.999).
        epsilon: Keras 1's 1e-8 (Keras 3's ``Nadam`` uses 1e-7).
        schedule_decay: Keras 1's 0.004. With ``schedule_decay=1`` and
            ``epsilon=1e-7`` this is Keras 3's ``Nadam`` exactly.
        fixed_momentum: ``mu_t = beta_1`` at every step (no schedule:
            ``schedule_decay`` is not used), Dozat's Nadam with a constant
            momentum.
        **kwargs: the other arguments of ``keras.optimizers.Optimizer``.
    """

    def __init__(self, learning_rate=0.002, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 schedule_decay=0.004, fixed_momentum=False, name="keras1_nadam", **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, name=name, **kwargs)
        if isinstance(schedule_decay, bool) or not isinstance(schedule_decay, (int, float)) \
                or not schedule_decay > 0:
            raise ValueError(f"schedule_decay must be a number > 0, got {schedule_decay!r}")
        self.schedule_decay = float(schedule_decay)
        if not isinstance(fixed_momentum, bool):
            raise ValueError(f"fixed_momentum must be True or False, got {fixed_momentum!r}")
        self.fixed_momentum = fixed_momentum

    def _momentum(self, step, dtype):
        """``mu_step`` of Keras 1's schedule (``step`` counts from 1), or
        ``beta_1`` with ``fixed_momentum``."""
        if self.fixed_momentum:
            return ops.cast(self.beta_1, dtype)
        exponent = ops.cast(step, dtype) * ops.cast(self.schedule_decay, dtype)
        return ops.cast(self.beta_1, dtype) * (
            1.0 - 0.5 * ops.power(ops.cast(0.96, dtype), exponent))

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        dtype = self._u_product.dtype
        self.assign(self._u_product,
                    self._u_product * self._momentum(self.iterations + 1, dtype))
        # Skip Nadam's own override (Keras 3's schedule), keep the base class'.
        super(keras.optimizers.Nadam, self)._backend_update_step(
            grads, trainable_variables, learning_rate)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        beta_1 = ops.cast(self.beta_1, dtype)
        beta_2 = ops.cast(self.beta_2, dtype)
        u_t = self._momentum(self.iterations + 1, dtype)
        u_t_1 = self._momentum(self.iterations + 2, dtype)
        u_product_t = ops.cast(self._u_product, dtype)  # prod_{i<=t} mu_i
        u_product_t_1 = u_product_t * u_t_1
        beta_2_power = ops.power(beta_2, ops.cast(self.iterations + 1, dtype))

        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - beta_2))
        m_hat = ops.add(
            ops.divide(ops.multiply(u_t_1, m), 1 - u_product_t_1),
            ops.divide(ops.multiply(1 - u_t, gradient), 1 - u_product_t),
        )
        v_hat = ops.divide(v, 1 - beta_2_power)
        self.assign_sub(variable, ops.divide(ops.multiply(m_hat, lr),
                                             ops.add(ops.sqrt(v_hat), self.epsilon)))

    def get_config(self):
        config = super().get_config()
        config["schedule_decay"] = self.schedule_decay
        config["fixed_momentum"] = self.fixed_momentum
        return config


# Optimizers of this package, by the lower-case name a recipe gives.
OPTIMIZERS = {"keras1_nadam": Keras1Nadam}
