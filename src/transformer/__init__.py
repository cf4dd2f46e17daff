"""The Transformer, built chapter by chapter.

Every module but this one is generated from a chapter notebook (its header names the notebook to
edit). This file is the public surface: what a reader imports.

`transformer.attention` is the attention function (its module is `transformer.attention` in
`sys.modules`, reached with `from transformer.attention import ...`). `transformer.train(config)` runs a
training run (its module is `transformer.engine.trainer`).

Two floors: the chapters' modules (`attention`, `multihead`, ... `decoder_only`) hold the mechanisms
they teach; `transformer.engine` (the appendices) stands on them with corpora, configuration,
checkpoints, the training run, ONNX and the command line, and the chapters never import it.

To translate: `transformer.translate(transformer.load_translator("multi30k-de-en"), ["Ein Hund läuft."])`.

A problem with what the user gives (a setting, a corpus file, a model folder, an argument) raises one of the
package's own errors, `TransformerError` and its family in `transformer.errors`; anything else is a bug.
"""

__version__ = "0.1.0"

from transformer.attention import attention
from transformer.engine.corpora import (
    load_multi30k,
    load_parallel,
    load_tatoeba,
    load_tsv,
)
from transformer.data import Batch, TokenBudgetBatchSampler, TranslationDataset, collate
from transformer.decoder import Decoder, DecoderLayer
from transformer.decoding import Hypothesis, beam_search, greedy_decode
from transformer.translation import translate
from transformer.evaluation import corpus_bleu, corpus_chrf, evaluate_pairs
from transformer.embedding import (
    PositionalEncoding,
    TokenEmbedding,
    sinusoidal_positional_encoding,
)
from transformer.errors import (
    CheckpointError,
    ConfigError,
    CorpusError,
    InputError,
    TransformerError,
)
from transformer.blocks import FeedForward, PAPER, Parts
from transformer.encoder import Encoder, EncoderLayer
from transformer.masking import causal_mask, padding_mask
from transformer.model import Transformer, TransformerConfig
from transformer.multihead import MultiHeadAttention
from transformer.tokenizer import Tokenizer, train_tokenizer
from transformer.engine.loading import load_checkpoint
from transformer.evaluation import evaluate_checkpoint
from transformer.engine.shipped import load_translator
from transformer.engine.config import TrainConfig
from transformer.loss import label_smoothed_loss
from transformer.engine.trainer import train
from transformer.visualize import AttentionMaps, attention_maps, plot_attention
from transformer.modern import RMSNorm, RotaryPositions, SwiGLU, modern_parts
from transformer.attention_cost import kv_cache_bytes, tiled_attention
from transformer.engine.onnx_export import export_onnx
from transformer.engine.onnx_translator import OnnxTranslator
from transformer.decoder_only import DecoderOnly, sample
from transformer.engine.model_config import ModelConfig, build_model

__all__ = [
    "attention",
    "MultiHeadAttention",
    "causal_mask",
    "padding_mask",
    "sinusoidal_positional_encoding",
    "TokenEmbedding",
    "PositionalEncoding",
    "FeedForward",
    "Parts",
    "PAPER",
    "EncoderLayer",
    "Encoder",
    "DecoderLayer",
    "Decoder",
    "TransformerConfig",
    "Transformer",
    "load_multi30k",
    "load_tatoeba",
    "load_parallel",
    "load_tsv",
    "TranslationDataset",
    "TokenBudgetBatchSampler",
    "Batch",
    "collate",
    "Tokenizer",
    "train_tokenizer",
    "TrainConfig",
    "train",
    "load_checkpoint",
    "label_smoothed_loss",
    "load_translator",
    "greedy_decode",
    "beam_search",
    "Hypothesis",
    "translate",
    "corpus_bleu",
    "corpus_chrf",
    "evaluate_pairs",
    "evaluate_checkpoint",
    "attention_maps",
    "AttentionMaps",
    "plot_attention",
    "export_onnx",
    "OnnxTranslator",
    "RMSNorm",
    "RotaryPositions",
    "SwiGLU",
    "tiled_attention",
    "kv_cache_bytes",
    "modern_parts",
    "DecoderOnly",
    "ModelConfig",
    "build_model",
    "sample",
    "TransformerError",
    "ConfigError",
    "CorpusError",
    "CheckpointError",
    "InputError",
]
