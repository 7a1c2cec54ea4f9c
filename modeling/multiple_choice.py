"""Multiple choice (SWAG): one score per choice from [CLS], a softmax over a question's choices.

As in the BERT paper's SWAG experiment, every choice is its own sequence
(context as segment A, the ending as segment B); the encoder's pooled
output goes through dropout and one dense unit, and the C scores of a
question are normalised together. A causal (left-to-right) encoder's pooled
output reads each choice's last real token instead of [CLS].
"""

import tensorflow as tf
from keras import ops

from modeling import heads, layers
from modeling.heads import ClassificationTask, _TaskModel


class BertMultipleChoice(_TaskModel):
  """Encoder + dropout(0.1) + one dense unit on the pooled output of every choice.

  Call with input_ids, input_mask and segment_ids int [B, C, S]; returns
  logits float32 [B, C], one score per choice (softmax over C gives the
  choice probabilities). The head's variables are `cls/multiple_choice/
  output_weights` [1, H] and `output_bias` [1] in checkpoints.
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert_multiple_choice")
    super().__init__(config, **kwargs)
    self.dropout = layers.float32_dropout(0.1)
    self.choice = heads.OutputLogits(1, self.config.initializer_range, name="multiple_choice")

  def build(self, input_shape=None):
    self.encoder.build()
    self.choice.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False):
    shape = ops.shape(features["input_ids"])
    num_choices, length = shape[1], shape[2]
    flat = {k: ops.reshape(features[k], (-1, length))  # [B*C, S]
            for k in ("input_ids", "input_mask", "segment_ids") if k in features}
    pooled = self.encoder(flat, training=training, pooled_only=True)["pooled_output"]
    scores = self.choice(self.dropout(pooled, training=training))  # [B*C, 1]
    return {"logits": ops.reshape(scores, (-1, num_choices))}  # [B, C]

  def head_variable_map(self):
    return {"cls/multiple_choice/output_weights": self.choice.output_weights,
            "cls/multiple_choice/output_bias": self.choice.output_bias}

  @classmethod
  def for_head_variables(cls, config, shapes):
    return cls(config) if "cls/multiple_choice/output_weights" in shapes else None


class MultipleChoiceTask(ClassificationTask):
  """Loss: mean cross entropy of the softmax over each real question's choices.

  Padding questions (is_real_example = 0) weigh nothing; label_ids int [B]
  is the right choice's index.
  """

  def __init__(self, config):
    super().__init__(config, num_labels=1)

  def build_model(self):
    model = BertMultipleChoice(self.config)
    model.build()
    return model


class TextMultipleChoice(tf.Module):
  """Serving module: raw strings -> a probability per ending and the chosen ending's index.

  Inputs: sent1 [N] (the context, segment A), sent2 [N] (the start of every
  ending, may be empty) and endings [N, C]; segment B of choice c is
  `sent2 endings[:, c]`. Tokenization runs in the graph and pairs are
  truncated as the original truncates them.
  """

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length):
    super().__init__(name="text_multiple_choice")
    from data import fast_tokenization  # tensorflow-text, needed only for export
    from modeling import checkpoints
    self.tokenizer = fast_tokenization.FastTokenizer(vocab_file, do_lower_case)
    self.weights = checkpoints.NamedVariables(model)  # every variable, tracked by name
    self._model = model
    self.max_seq_length = max_seq_length
    self.cls_id = self.tokenizer.special_ids["[CLS]"]
    self.sep_id = self.tokenizer.special_ids["[SEP]"]
    self.serve = tf.function(self._choose, input_signature=[
        tf.TensorSpec([None], tf.string, name="sent1"),
        tf.TensorSpec([None], tf.string, name="sent2"),
        tf.TensorSpec([None, None], tf.string, name="endings")])

  def _choose(self, sent1, sent2, endings):
    from data import fast_tokenization
    num_choices = tf.shape(endings)[1]
    repeat = lambda t: tf.reshape(tf.repeat(t[:, None], num_choices, axis=1), [-1])  # [N*C]
    segment_b = tf.strings.strip(tf.strings.join([repeat(sent2), tf.reshape(endings, [-1])],
                                                 separator=" "))
    packed = fast_tokenization.pack_inputs(
        self.tokenizer.tokenize(repeat(sent1)), self.tokenizer.tokenize(segment_b),
        self.max_seq_length, self.cls_id, self.sep_id)  # [N*C, S] each
    features = {k: tf.reshape(v, [-1, num_choices, self.max_seq_length])
                for k, v in packed.items()}
    probabilities = tf.nn.softmax(self._model(features, training=False)["logits"], axis=-1)
    return {"probabilities": probabilities,
            "label": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}


def save_text_multiple_choice(module, export_dir):
  """Writes the SavedModel (signature serving_default) under a temporary name, then renames."""
  from modeling import export
  return export.save_text_classifier(module, export_dir)
