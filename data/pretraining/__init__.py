"""The pretraining-data generator (create_pretraining_data.py), as a package.

The original does everything in one file with Python lists of token strings.
Here the same algorithm runs on integer ids in flat arrays, compiled with
numba, and is split by stage:

  documents.py   input text -> tokenized documents -> `Corpus`
  instances.py   `Corpus` -> instances (the algorithm itself, draw for draw)
  masking.py     an instance's masked positions (the original's rule; per-word and n-gram)
  mersenne.py    the original's random.Random, reproduced for numba
  generation.py  instances -> record features; the exact (default) mode
  streaming.py   the --streaming / --num_workers mode
  sharded.py     the --shard_by_input_file mode: outputs made independently, in parallel

Where each piece of the original's create_pretraining_data.py went:

  main(): the flags and their checks stay in the entry script
      create_pretraining_data.py; the work is `sharded.generate`, which runs
      `generation.generate_exact`, or `streaming.generate_streaming` with
      --num_workers > 1 or --streaming, or `sharded.generate_sharded` with
      --shard_by_input_file.
  rng = random.Random(FLAGS.random_seed): made in `generation.generate_exact`
      (in streaming mode, one per worker in `streaming._run_worker`, seeded by
      `streaming.worker_seed`) and handed to
      `instances.create_training_instances`. That function
      copies the generator's state into an array (`mersenne.state_from`),
      makes every draw with `mersenne.random`, `mersenne.randint` and
      `mersenne.shuffle` in the original's order, and writes the state back
      (`mersenne.restore`), so the stream is the original's.
  create_training_instances(): split in two. Reading the files and tokenizing
      each line is `documents.read_corpus` (via `documents.read_lines` and
      `documents.tokenized_documents`). The document shuffle, the dupe_factor
      passes and the final instance shuffle are
      `instances.create_training_instances`. The original's `vocab_words`
      list, the pool of random replacements, is `MaskingVocab.word_ids` from
      `instances.masking_vocab`.
  create_instances_from_document(): `instances._document_instances`, one
      document per call; `instances.documents_instances` loops it over a
      range of documents.
  truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
      `instances.truncate_seq_pair`, on the token ranges' start and end
      offsets. (data/features.py's truncate_seq_pair is run_classifier's rule,
      which always cuts the end; it is not this one.)
  create_masked_lm_predictions(): `masking.create_masked_lm_predictions`;
      it returns positions and replacement ids (or `masking.KEEP`) instead
      of token strings. The global FLAGS.do_whole_word_mask it read is now
      `GenerationConfig.do_whole_word_mask`.
  MaskedLmInstance: no object; an instance's masked positions and
      replacements are slices of `instances.InstanceStore`.
  TrainingInstance: no object either; `instances.InstanceStore` holds every
      instance in arrays (A and B token ranges, is_random_next, masked
      positions and replacements).
  write_instance_to_example_files(): `generation.instance_arrays` builds the
      padded features (the original's names: `generation.
      PRETRAINING_INT_FEATURES`, `PRETRAINING_FLOAT_FEATURES`);
      data/tfrecords.py's `ExampleEncoder` serializes them and `RecordWriters`
      writes round-robin across the output files. The instances logged
      (the original logs 20, here 3) come from `generation.example_lines`; the closing "Wrote N total
      instances" line is printed by the entry script.
  create_int_feature(), create_float_feature(): data/tfrecords.py's
      `ExampleEncoder`.
  The flags that shape instances (max_seq_length, max_predictions_per_seq,
      masked_lm_prob, short_seq_prob, do_whole_word_mask, dupe_factor):
      fields of `instances.GenerationConfig`.
  tokenization.FullTokenizer: data/tokenization.py, unchanged in place.
"""
