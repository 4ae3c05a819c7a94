"""A small byte-level BPE tokenizer trained on game text, saved as a Hugging Face tokenizer.

Tiny from-scratch agents need a vocabulary that fits the game's words (a few hundred object and
room names), not a 50k web vocabulary. ``train_bpe_tokenizer`` trains one with the `tokenizers`
library and wraps it as a `transformers.PreTrainedTokenizerFast` carrying a ChatML chat template,
so the rest of meowjax treats it exactly like a pretrained model's tokenizer.
"""

from __future__ import annotations

import os
from typing import Iterable

import tokenizers
import transformers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

PAD, EOS, IM_START, IM_END = "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, EOS, IM_START, IM_END)

# ChatML, as in Qwen2 / SmolLM2: every message is "<|im_start|>{role}\n{content}<|im_end|>\n".
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int,
                        out_dir: str | None = None) -> transformers.PreTrainedTokenizerFast:
    """Trains a byte-level BPE on ``texts``; saves it to ``out_dir`` (if given) and returns it.

    Byte-level means any string round-trips exactly, also characters never seen in training.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is below the 256 byte symbols plus "
                         f"{len(SPECIAL_TOKENS)} special tokens; raise tokenizer.vocab_size.")
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=IM_END, bos_token=None,
        additional_special_tokens=[EOS, IM_START])
    hf_tok.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        hf_tok.save_pretrained(out_dir)
    return hf_tok


def load_tokenizer(folder: str) -> transformers.PreTrainedTokenizerBase:
    """Loads a tokenizer saved by :func:`train_bpe_tokenizer` or any local HF tokenizer folder."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"Tokenizer folder {folder!r} does not exist; train one with "
                                "meowjax.rollout.tokenizer.train_bpe_tokenizer or point to a "
                                "Hugging Face checkpoint folder.")
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
