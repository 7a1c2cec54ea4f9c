"""SavedModels that take raw text: tokenization runs inside the graph."""

import tensorflow as tf

from data import fast_tokenization
from modeling import checkpoints


class TextClassifier(tf.Module):
  """Serving module: raw text (one or two string inputs) -> probabilities or a score.

  Tokenization is the graph tokenizer (the same ids as the Python one) and
  packing follows the original's truncation.
  """

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length, labels, pair):
    super().__init__(name="text_classifier")
    self.tokenizer = fast_tokenization.FastTokenizer(vocab_file, do_lower_case)
    self.weights = checkpoints.NamedVariables(model)  # every variable, tracked by name
    self._model = model
    self.max_seq_length = max_seq_length
    self.labels = None if labels is None else tf.constant(labels)
    self.cls_id = self.tokenizer.special_ids["[CLS]"]
    self.sep_id = self.tokenizer.special_ids["[SEP]"]
    text = lambda name: tf.TensorSpec([None], tf.string, name=name)
    if pair:
      self.serve = tf.function(self._classify, input_signature=[text("text_a"), text("text_b")])
    else:
      self.serve = tf.function(lambda text_a: self._classify(text_a),
                               input_signature=[text("text_a")])

  def _classify(self, text_a, text_b=None):
    ids_b = None if text_b is None else self.tokenizer.tokenize(text_b)
    features = fast_tokenization.pack_inputs(self.tokenizer.tokenize(text_a), ids_b,
                                             self.max_seq_length, self.cls_id, self.sep_id)
    logits = self._model(features, training=False)["logits"]
    if self.labels is None:
      return {"score": logits[:, 0]}
    probabilities = tf.nn.softmax(logits, axis=-1)
    return {"probabilities": probabilities,
            "label": tf.gather(self.labels, tf.argmax(probabilities, axis=-1))}


def save_text_classifier(module, export_dir):
  """Writes the SavedModel (serving signature: serving_default), replacing an old export whole.

  It is built under a temporary name and published by files.atomic_dir:
  renamed at once on a local disk; on a bucket moved file by file with
  saved_model.pb last, so a directory holding saved_model.pb is complete.
  """
  from data import files
  with files.atomic_dir(export_dir, last=("saved_model.pb",)) as tmp:
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
  return export_dir
