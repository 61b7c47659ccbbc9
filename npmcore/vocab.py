"""Per-tokenizer tables over the vocabulary: special tokens, word starts, function words; what a text spells.

Span masking (training) and phrase candidates (inference) must agree on what a whole
word is, and open-set answers (like content-word masking) must not start or end with a
function word. These tables answer both for any fast tokenizer, WordPiece and BPE alike:

* a token starts a word unless it is a continuation piece ("##x" for WordPiece; for
  byte-level BPE and sentencepiece, a piece without a leading "Ġ"/"▁");
* special, punctuation and whitespace tokens always start a word, and so does the token
  right after one (RoBERTa writes "(hello" as "Ġ(", "hello");
* ``stop``: punctuation, or a piece spelling one of :data:`FUNCTION_WORDS` (it counts
  where the piece is a whole word);
* ``sentence_end``: a piece of ".", "!" and "?" only (evidence scoring reads sentences by it).
"""

import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerFast

# Closed-class English words: determiners, pronouns, prepositions, conjunctions, auxiliaries
# and a few particles. Deliberately short: numbers ("one", "three", "first") and nouns
# ("system", "computer") are answers, not stopwords.
FUNCTION_WORDS = frozenset(
    """
a an the this that these those some any each every no all both either neither another such what which whose
i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves who whom whoever whatever whichever someone something
anyone anything everyone everything nobody nothing one's
about above across after against along amid among around as at before behind below beneath beside besides between
beyond by despite down during except for from in inside into like near of off on onto out outside over past per
since than through throughout till to toward towards under underneath until unto up upon via with within without
and but or nor so yet if because although though while whereas whether unless once where when whenever wherever how
why then also not n't too very just only
be am is are was were been being have has had having do does did doing done will would shall should can could may
might must ought 's 're 've 'd 'll 'm
""".split()
)


_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits


def content_words_of(text: str) -> frozenset[str]:
    """The content words of a text as a set of keys: accents stripped and lower case (as an uncased
    tokenizer normalises), runs of letters and digits, without :data:`FUNCTION_WORDS` and single
    characters ("s" of "'s"). ``"Shlomo Shriki's birthplace"`` -> {"shlomo", "shriki", "birthplace"}.
    Answers that repeat a query's content words are found by comparing these sets."""
    stripped = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return frozenset(w for w in _WORD.findall(stripped.lower()) if len(w) > 1 and w not in FUNCTION_WORDS)


def spelled(text: str) -> str:
    """What a phrase spells, its case and punctuation aside ("U.S." and "US", "São Paulo" and "são paulo"): one key
    for the forms of one name (answers pooled, articles found by title)."""
    return "".join(re.findall(r"\w+", text.lower()))


@dataclass(frozen=True)
class VocabTables:
    special: np.ndarray  # (V,) bool: tokenizer.all_special_ids ([CLS], [SEP], [PAD], [UNK], [MASK], <s>, ...)
    word_start: np.ndarray  # (V,) bool: the token starts a word wherever it stands
    boundary: np.ndarray  # (V,) bool: special, punctuation or whitespace: the token after it starts a word
    stop: (
        np.ndarray
    )  # (V,) bool: punctuation, or a piece spelling a function word; it counts where the piece is a whole word
    sentence_end: np.ndarray  # (V,) bool: a piece of ".", "!" and "?" only


def vocab_tables(tokenizer: PreTrainedTokenizerFast) -> VocabTables:
    """The tables of a tokenizer's vocabulary (built once per tokenizer and size)."""
    return _vocab_tables(tokenizer, len(tokenizer))


@functools.lru_cache(maxsize=8)
def _vocab_tables(tokenizer: PreTrainedTokenizerFast, size: int) -> VocabTables:
    backend = tokenizer.backend_tokenizer
    prefix = backend.model.continuing_subword_prefix if type(backend.model).__name__ == "WordPiece" else None
    special = np.zeros(size, dtype=bool)
    special[tokenizer.all_special_ids] = True
    word_start, boundary, stop = special.copy(), special.copy(), np.zeros(size, dtype=bool)
    sentence_end = np.zeros(size, dtype=bool)
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(size)))):
        if special[i]:
            continue
        if prefix is not None:
            continuation = piece.startswith(prefix)
            text = piece.removeprefix(prefix)
        else:  # byte-level BPE ("Ġword") or sentencepiece ("▁word"): the decoder turns markers into spaces
            text = backend.decoder.decode([piece]) if backend.decoder is not None else piece
            continuation = not (piece.startswith(("Ġ", "▁")) or text[:1].isspace())
        core = text.strip()
        # "\ufffd": a byte-level piece holding part of a multi-byte character (inside a word)
        punctuation = "\ufffd" not in core and not any(c.isalnum() for c in core)
        word_start[i] = punctuation or not continuation
        boundary[i] = punctuation
        stop[i] = punctuation or core.lower() in FUNCTION_WORDS  # a stopword where the piece is a whole word
        sentence_end[i] = bool(core) and not core.strip(".!?")
    return VocabTables(special, word_start, boundary, stop, sentence_end)
