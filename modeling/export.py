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
  """Writes the SavedModel (serving signature: serving_default) under a temporary name first."""
  from data import files
  tmp = files.temporary_name(export_dir.rstrip("/"))
  tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
  if files.exists(export_dir):
    import shutil
    shutil.rmtree(export_dir)
  files.rename(tmp, export_dir)
  return export_dir
