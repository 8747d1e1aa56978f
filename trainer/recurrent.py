"""Recurrent policies: an LSTM after the MLP body, with ML-Agents' memory layout, stepped and unrolled.

``network_settings.memory`` (ML-Agents' ``MemorySettings``) puts an LSTM of ``R / 2`` units between the body and
the heads, ``R`` = ``memory_size``. Its state travels as one float32 row ``[h | c]`` of ``R`` values per agent
(ML-Agents' layout: h first, then c), the processor holding each agent's row between steps
(``common.policy_contract``, ``RECURRENT_IN`` / ``RECURRENT_OUT``).

The cell is written out with plain matmuls, sigmoids and tanh (Hochreiter & Schmidhuber 1997, with a forget
gate, Gers et al. 2000; gate order i, f, g, o as Keras' and PyTorch's), not as a Keras LSTM layer: the exported step
is then a handful of TFLite builtins whose weights ``trainer.export`` patches like a dense layer's, and the
training unroll is the very same arithmetic, so the states the processor computes are those the trainer recomputes.
The forget gate's bias starts at 1 (Jozefowicz et al. 2015; ML-Agents' ``forget_bias``).

Shapes: ``B`` rows, ``L`` steps of a sequence, ``R`` = memory_size, ``H = R / 2`` LSTM units, ``D`` the body's
width, ``C`` continuous action size, ``M`` logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from common.policy_contract import LOG_STD, LOGITS, MEAN, RECURRENT_OUT
from common.specs import ActionSpec
from trainer.encoders import ObservationEncoder
from trainer.networks import LOG_STD_MAX, LOG_STD_MIN, WeightInit, encoded, mlp, orthogonal, output_layer, swish


class LSTMCell(tf.Module):
    """One LSTM layer of ``units`` H over inputs of width ``input_size``, its state ``[h | c]`` ``[B, 2H]``."""

    def __init__(self, input_size: int, units: int, name: str = "lstm") -> None:
        super().__init__(name=name)
        if units < 1:
            raise ValueError(f"an LSTM needs >= 1 unit, got {units}")
        self.units = units
        glorot = tf.keras.initializers.GlorotUniform()
        self.kernel = tf.Variable(glorot((input_size, 4 * units)), name="kernel")
        self.recurrent_kernel = tf.Variable(tf.keras.initializers.Orthogonal()((units, 4 * units)), name="recurrent_kernel")
        bias = tf.concat([tf.zeros([units]), tf.ones([units]), tf.zeros([2 * units])], axis=0)  # forget bias 1
        self.bias = tf.Variable(bias, name="bias")

    def step(self, x: tf.Tensor, memory: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One step: inputs ``x`` [B, input_size] and state ``memory`` [B, 2H] -> (output h' [B, H], state [B, 2H])."""
        h, c = memory[:, : self.units], memory[:, self.units :]
        z = tf.matmul(x, self.kernel) + tf.matmul(h, self.recurrent_kernel) + self.bias
        i, f, g, o = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, tf.concat([h, c], axis=1)

    def unroll(self, x: tf.Tensor, memory: tf.Tensor) -> tf.Tensor:
        """Outputs ``[B, L, H]`` of sequences ``x`` [B, L, input_size] started from states ``memory`` [B, 2H]."""
        return self.unroll_with_states(x, memory)[0]

    def unroll_with_states(self, x: tf.Tensor, memory: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``unroll``'s outputs ``[B, L, H]`` and the state after each step ``[B, L, 2H]``."""
        length = x.shape[1]
        outputs, states = [], []
        for t in range(length):  # L is static (sequence_length): an unrolled graph, no while loop to trace
            h, memory = self.step(x[:, t], memory)
            outputs.append(h)
            states.append(memory)
        return tf.stack(outputs, axis=1), tf.stack(states, axis=1)

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        return (self.kernel, self.recurrent_kernel, self.bias)


class RecurrentPolicyNetwork(tf.Module):
    """obs and state -> action distribution parameters and the next state (class ``PolicyNetwork``'s heads after an
    LSTM): encoder, MLP body, LSTM of ``memory_size / 2`` units, then the mean (with one learned log_std per
    dimension) and/or the logits. PPO's and BC's Gaussian (clip mode); no gSDE, no state-dependent std.
    """

    def __init__(
        self,
        observation_sizes: Sequence[int],
        action_spec: ActionSpec,
        hidden_units: int,
        num_layers: int,
        memory_size: int,
        initial_log_std: float = 0.0,
        activation: Callable[[tf.Tensor], tf.Tensor] = swish,
        init: WeightInit = WeightInit.GLOROT,
        encoder: ObservationEncoder | None = None,
    ) -> None:
        super().__init__(name="recurrent_policy")
        if memory_size < 2 or memory_size % 2:
            raise ValueError(f"memory_size must be even and >= 2 (h and c), got {memory_size}")
        self.action_spec = action_spec
        self.memory_size = memory_size
        self.encoder = encoder
        self.body = mlp(hidden_units, num_layers, "policy_body", activation, init)
        total = encoder.output_size if encoder is not None else sum(observation_sizes)
        self.body.build((None, total))
        self.lstm = LSTMCell(hidden_units, memory_size // 2)
        c, m = action_spec.continuous_size, action_spec.mask_width
        small = orthogonal(0.01) if init is WeightInit.ORTHOGONAL else tf.keras.initializers.VarianceScaling(0.01)
        self.mean_head = output_layer(c, init, small, "mean") if c else None
        self.log_std = tf.Variable(tf.fill([c], initial_log_std), name="log_std") if c else None
        self.logits_head = output_layer(m, init, small, "logits") if m else None
        for head in (self.mean_head, self.logits_head):
            if head is not None:
                head.build((None, memory_size // 2))

    def __call__(self, *inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """One step for the artifact: ``(obs_0, ..., memories [B, R])`` -> the heads and ``RECURRENT_OUT`` [B, R]."""
        *normalized_obs, memories = inputs
        h, next_memories = self.lstm.step(self.body(encoded(self.encoder, normalized_obs)), memories)
        out = self.heads(h)
        out[RECURRENT_OUT] = next_memories
        return out

    def sequences(self, normalized_obs: Sequence[tf.Tensor], memories: tf.Tensor, length: int) -> dict[str, tf.Tensor]:
        """The heads at every step of ``B`` sequences of ``length`` steps, laid out row after row as
        ``AgentBufferField.get_batch(training_length=length)`` gives them: observations ``[B * L, ...]``, each
        sequence started from its first row's stored state ``memories`` [B, R] (the state it acted with).

        Returns:
            ``mean``/``log_std`` [B * L, C] and/or ``logits`` [B * L, M].
        """
        features = self.body(encoded(self.encoder, normalized_obs))  # [B * L, D]
        width = features.shape[-1]
        h = self.lstm.unroll(tf.reshape(features, [-1, length, width]), memories)  # [B, L, H]
        return self.heads(tf.reshape(h, [-1, self.memory_size // 2]))

    def heads(self, h: tf.Tensor) -> dict[str, tf.Tensor]:
        """``mean`` and ``log_std`` [B, C] and/or ``logits`` [B, M] of the LSTM's outputs ``h`` [B, H]."""
        out: dict[str, tf.Tensor] = {}
        if self.mean_head is not None:
            assert self.log_std is not None
            out[MEAN] = self.mean_head(h)
            out[LOG_STD] = tf.broadcast_to(tf.clip_by_value(self.log_std, LOG_STD_MIN, LOG_STD_MAX), tf.shape(out[MEAN]))
        if self.logits_head is not None:
            out[LOGITS] = self.logits_head(h)
        return out

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every trainable weight (Keras 3 weights are not found by ``tf.Module``'s own walk)."""
        own = (self.log_std,) if self.log_std is not None else ()
        visual = self.encoder.trainable_variables if self.encoder is not None else ()
        layers = (self.body, self.mean_head, self.logits_head)
        keras = tuple(w for layer in layers if layer is not None for w in layer.trainable_variables)
        return own + visual + keras + self.lstm.trainable_variables

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        return self.trainable_variables


class RecurrentValueNetwork(tf.Module):
    """The critic's own memory (ML-Agents keeps one beside the actor's): encoder, MLP body, an LSTM of ``units``, then
    one value head per reward signal.

    Its state is not held by the processor, which runs the actor alone: the trainer unrolls it over each trajectory
    from the state the agent's previous trajectory ended with (``trainer.ppo_recurrent``), and trains each sequence
    from the state its first step had then (``sequences``).
    """

    def __init__(
        self,
        observation_sizes: Sequence[int],
        hidden_units: int,
        num_layers: int,
        units: int,
        heads: int,
        activation: Callable[[tf.Tensor], tf.Tensor] = swish,
        init: WeightInit = WeightInit.GLOROT,
        encoder: ObservationEncoder | None = None,
    ) -> None:
        super().__init__(name="recurrent_value")
        self.encoder = encoder
        self.units = units
        self.body = mlp(hidden_units, num_layers, "value_body", activation, init)
        total = encoder.output_size if encoder is not None else sum(observation_sizes)
        self.body.build((None, total))
        self.lstm = LSTMCell(hidden_units, units, name="value_lstm")
        kernel = orthogonal(1.0) if init is WeightInit.ORTHOGONAL else "glorot_uniform"
        self.head = output_layer(heads, init, kernel, "values")
        self.head.build((None, units))

    def sequences(self, normalized_obs: Sequence[tf.Tensor], memories: tf.Tensor, length: int) -> tf.Tensor:
        """V [B * L, heads] of ``B`` sequences of ``length`` steps laid out row after row, each started from its
        state in ``memories`` [B, 2 * units]."""
        return self.sequences_with_states(normalized_obs, memories, length)[0]

    def sequences_with_states(
        self, normalized_obs: Sequence[tf.Tensor], memories: tf.Tensor, length: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``sequences``' values and the state after each step, ``[B, L, 2 * units]``."""
        features = self.body(encoded(self.encoder, normalized_obs))
        x = tf.reshape(features, [-1, length, features.shape[-1]])
        h, states = self.lstm.unroll_with_states(x, memories)
        return self.head(tf.reshape(h, [-1, self.units])), states

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        visual = self.encoder.trainable_variables if self.encoder is not None else ()
        keras = (*self.body.trainable_variables, *self.head.trainable_variables)
        return visual + keras + self.lstm.trainable_variables

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        return self.trainable_variables
