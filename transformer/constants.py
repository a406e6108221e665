"""Constants pinned by docs/design.md, in one place; every other module imports them."""

# Token ids, the same in both languages (docs/design.md, "Token ids").
PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")

# Layer normalisation epsilon of every sublayer (docs/design.md, "Math").
LAYER_NORM_EPSILON = 1e-6

# Adam settings of the paper, section 5.3 (docs/design.md, "Math").
ADAM_BETA_1 = 0.9
ADAM_BETA_2 = 0.98
ADAM_EPSILON = 1e-9

# Added to masked attention logits in float32 (docs/design.md, "Masks"). Lower precisions
# use the most negative finite value of their dtype instead (see attention.py).
MASK_NEGATIVE_FLOAT32 = -1e9

# The longest sequence the layers accept by default: the rows of the positional
# encoding table (`PositionalEmbedding`, `Encoder`, `Decoder`, `Transformer`).
DEFAULT_MAX_LENGTH = 2048

# The most output tokens a translation gets by default (`[END]` included),
# never more than the model's `max_length`.
DEFAULT_MAX_OUTPUT_LENGTH = 128

# Sentences a `Translator` decodes together (sorted by length first): small
# enough that a batch of short sentences stops early, large enough to keep the
# CPU's matrix kernels busy (BENCHMARKS.md, "Decoding engines and speed").
TRANSLATE_BATCH_SIZE = 128

# The paper's beam search (section 6.1): "beam search with a beam size of 4
# and length penalty alpha = 0.6", used when a beam is asked for.
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6

# Section 6.1: "maximum output length during inference to input length + 50".
DEFAULT_EXTRA_LENGTH = 50

# Greedy and beam translation of a list run in two passes. The first stops
# each sentence at its input length + this many tokens; the few whose search
# has not ended there (mostly outputs that repeat themselves) are decoded
# again, together, up to their full limit, instead of keeping a whole batch
# decoding for one of them. The results are those of one pass (BENCHMARKS.md,
# "Decoding engines and speed").
TRANSLATE_FIRST_PASS_EXTRA = 10

# `learning_rate` of a run that uses the paper's schedule, whose peak follows
# from d_model and the warm-up (`transformer.training.CustomSchedule`).
PAPER_LEARNING_RATE = "paper"

# How the learning rate falls after the warm-up (`transformer.training.CustomSchedule`):
# the paper's inverse square root of the step, which never ends, or a fall to
# zero at the run's end: in a straight line or along half a cosine from the
# peak, or at the peak until a last share of the run (a cool-down).
DECAYS = ("inverse_sqrt", "linear", "cosine", "cooldown")
# The decays that reach zero at the run's end, and so need its length.
DECAYS_TO_ZERO = DECAYS[1:]

# The subword tokenizers (`transformer.data.tokenizers`): the tutorial's
# WordPiece and the reversible SentencePiece.
TOKENIZER_KINDS = ("wordpiece", "sentencepiece")

# The largest subword vocabulary `build_tokenizers` learns when it is not told:
# the tutorial's 8000 (about what it gets for each language).
DEFAULT_VOCAB_SIZE = 8000

# The tokenizer of every dataset recipe (`transformer.run.recipes`) and of
# `build_tokenizers` when it is not told: SentencePiece keeps case, accents and
# punctuation, so translations read as written text.
DEFAULT_TOKENIZER = "sentencepiece"

# The subword models SentencePiece can learn (`transformer.data.sentencepiece`).
SENTENCEPIECE_MODEL_TYPES = ("unigram", "bpe", "char", "word")

# The `tf.distribute` strategies of a run (`transformer.run.distribute`).
DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi-worker")
