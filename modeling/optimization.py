"""The original's optimizer and learning-rate schedule, and LAMB, as Keras 3 optimizers.

Weight decay exclusions match the *original* variable names (see
`checkpoints.variable_map`), so "LayerNorm", "layer_norm" and "bias" mean
exactly what they meant in Google's code.
"""

import re

import keras
import tensorflow as tf
from keras import ops

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """The original schedule: linear warmup, then linear decay to 0 at num_train_steps.

  lr(step) = init_lr * step / warmup while step < warmup, else
  init_lr * (1 - min(step, total) / total). As in the original, the decay is
  computed from step 0, so the rate drops from about init_lr to
  init_lr * (1 - warmup / total) when warmup ends. `step` is the number of
  updates already applied (0 for the first update).
  """

  def __init__(self, init_lr, num_train_steps, num_warmup_steps):
    self.init_lr = init_lr
    self.num_train_steps = num_train_steps
    self.num_warmup_steps = num_warmup_steps

  def __call__(self, step):
    step = ops.cast(step, "float32")
    total = float(max(self.num_train_steps, 1))
    decayed = self.init_lr * (1.0 - ops.minimum(step, total) / total)
    if not self.num_warmup_steps:
      return decayed
    warmup = self.init_lr * step / float(self.num_warmup_steps)
    return ops.where(step < self.num_warmup_steps, warmup, decayed)

  def get_config(self):
    return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps}


class AdamWeightDecay(keras.optimizers.Optimizer):
  """The original AdamWeightDecayOptimizer: Adam without bias correction plus decay.

  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  update = m / (sqrt(v) + eps) [+ weight_decay_rate * w unless excluded];
  w -= lr * update (TensorFlow's fused Adam kernel; see update_step).
  With lamb=True it is LAMB (You et al., 2019) instead: bias-corrected moments
  and the update scaled per variable by ||w|| / ||update|| (variables excluded
  from decay are excluded from this layer adaptation too).

  Args:
    learning_rate: float or schedule.
    names: dict variable path -> original variable name, used to match
      `exclude_from_weight_decay` (the variables' own paths otherwise).
    Gradient clipping is left to the caller (the training loop clips the
    global norm after summing across replicas).
  """

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
               names=None, lamb=False, name="AdamWeightDecay", **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
    self.names = dict(names or {})
    self.lamb = lamb

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self._m = [self.add_variable_from_reference(v, "adam_m") for v in var_list]
    self._v = [self.add_variable_from_reference(v, "adam_v") for v in var_list]
    self._decay = [self._use_weight_decay(v) for v in var_list]

  def _use_weight_decay(self, variable):
    if not self.weight_decay_rate:
      return False
    name = self.names.get(variable.path, variable.path)
    return not any(re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

  def slots(self, variable):
    """(m, v) slot variables of a model variable."""
    index = self._get_variable_index(variable)
    return self._m[index], self._v[index]

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    m, v = self._m[index], self._v[index]
    lr = ops.cast(learning_rate, variable.dtype)
    g = ops.cast(gradient, variable.dtype)
    if not self.lamb:
      # TensorFlow's own Adam kernel: one multi-threaded pass over (w, m, v) and no
      # compilation, 1.2x as fast on 2 CPU cores as this formula compiled with XLA per
      # variable (benchmarks/investigations/update_and_startup.py).
      # With both beta powers 0 it applies no bias correction, as the original. It
      # forms 1 - beta_1 and 1 - beta_2 in float32: beta_2 then acts 1.3e-8 above
      # the original's (which took 1 - 0.999 in float64), so v differs by ~1e-5
      # relative. The decay term lr * rate * w is taken first, from the w the
      # original reads it from.
      if self._decay[index]:
        variable.assign_sub(_read(variable) * (lr * self.weight_decay_rate))
      scalar = lambda x: tf.constant(x, variable.dtype)  # the op's dtype is the weights'
      tf.raw_ops.ResourceApplyAdam(
          var=_handle(variable), m=_handle(m), v=_handle(v), beta1_power=scalar(0.0),
          beta2_power=scalar(0.0), lr=lr, beta1=scalar(self.beta_1),
          beta2=scalar(self.beta_2), epsilon=scalar(self.epsilon), grad=g)
      return
    self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * g)
    self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(g))
    t = ops.cast(self.iterations + 1, variable.dtype)
    m_hat = m / (1.0 - ops.power(self.beta_1, t))
    v_hat = v / (1.0 - ops.power(self.beta_2, t))
    update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
    if self._decay[index]:
      update = update + self.weight_decay_rate * variable
    if self._decay[index]:
      w_norm, u_norm = ops.norm(variable), ops.norm(update)
      ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
      update = update * ratio
    self.assign_sub(variable, lr * update)

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    """Updates every copy of each variable with gradients already summed across replicas.

    The training loop all-reduces, clips and checks the gradients itself
    before `apply`; Keras' own step would all-reduce them a second time,
    multiplying them by the number of replicas.
    """
    def update(strategy, grads, variables, learning_rate):
      for grad, variable in zip(grads, variables):
        strategy.extended.update(variable, lambda var, g, lr: self.update_step(g, var, lr),
                                 args=(grad, learning_rate), group=False)
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    tf.__internal__.distribute.interim.maybe_merge_call(
        update, self._distribution_strategy, grads, variables, learning_rate)

  def get_config(self):
    return {**super().get_config(), "weight_decay_rate": self.weight_decay_rate,
            "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
            "exclude_from_weight_decay": self.exclude_from_weight_decay,
            "names": self.names, "lamb": self.lamb}


def _read(variable):
  """A variable's current value as a tensor (this device's copy when mirrored)."""
  return tf.identity(variable.value if isinstance(variable, keras.Variable) else variable)


def _handle(variable):
  """A variable's resource handle (this device's copy inside a strategy's update)."""
  return (variable.value if isinstance(variable, keras.Variable) else variable).handle


def create_optimizer(name, learning_rate, num_train_steps, num_warmup_steps, names=None):
  """'adamw' (the original's) or 'lamb', on the original's warmup + linear decay schedule."""
  if name not in ("adamw", "lamb"):
    raise ValueError(f"--optimizer={name}: expected adamw or lamb.")
  schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
  return AdamWeightDecay(schedule, names=names, lamb=name == "lamb",
                         name="lamb" if name == "lamb" else "adam_weight_decay")
