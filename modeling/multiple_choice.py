"""Multiple choice (SWAG): one score per choice from [CLS], a softmax over a question's choices.

As in the BERT paper's SWAG experiment, every choice is its own sequence
(context as segment A, the ending as segment B); the encoder's pooled
output goes through dropout and one dense unit, and the C scores of a
question are normalised together. A causal (left-to-right) encoder's pooled
output reads each choice's last real token instead of [CLS].
"""

from keras import ops

from modeling import heads, layers
from modeling.classification import ClassificationTask
from modeling.encoder import BertEncoder
from modeling.heads import TaskModel


class BertMultipleChoice(TaskModel):
  """The given encoder + dropout(0.1) + one dense unit on the pooled output of every choice.

  Call with input_ids, input_mask and segment_ids int [B, C, S]; returns
  logits float32 [B, C], one score per choice (softmax over C gives the
  choice probabilities). The head's variables are `cls/multiple_choice/
  output_weights` [1, H] and `output_bias` [1] in checkpoints.
  """

  def __init__(self, encoder, **kwargs):
    kwargs.setdefault("name", "bert_multiple_choice")
    super().__init__(encoder, **kwargs)
    self.dropout = layers.float32_dropout(0.1)
    self.choice = heads.OutputLogits(1, self.config.initializer_range, name="multiple_choice",
                                     dtype=self.dtype_policy)

  def build(self, input_shape=None):
    super().build()
    self.choice.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    shape = ops.shape(features["input_ids"])
    num_choices, length = shape[1], shape[2]
    flat = {k: ops.reshape(features[k], (-1, length))  # [B*C, S]
            for k in ("input_ids", "input_mask", "segment_ids") if k in features}
    pooled = self.encoder(flat, training=training, pooled_only=True, pack_tokens=pack_tokens,
                          blocked_attention=blocked_attention)["pooled_output"]
    scores = self.choice(self.dropout(pooled, training=training), training=training)  # [B*C, 1]
    return {"logits": ops.reshape(scores, (-1, num_choices))}  # [B, C]

  def head_variable_map(self):
    return {"cls/multiple_choice/output_weights": self.choice.output_weights,
            "cls/multiple_choice/output_bias": self.choice.output_bias}

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    return cls(encoder) if "cls/multiple_choice/output_weights" in shapes else None


class MultipleChoiceTask(ClassificationTask):
  """Loss: mean cross entropy of the softmax over each real question's choices.

  Padding questions (is_real_example = 0) weigh nothing; label_ids int [B]
  is the right choice's index.
  """

  def __init__(self, config, num_choices=4):
    super().__init__(config, num_labels=1)
    self.sequences_per_example = num_choices  # for the log's sequences/s

  def build_model(self, pack_tokens=False):
    """The built BertMultipleChoice on a new BertEncoder(config, pack_tokens)."""
    model = BertMultipleChoice(BertEncoder(self.config, pack_tokens))
    model.build()
    return model
