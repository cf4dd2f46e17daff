"""The Transformer, built chapter by chapter.

Every module but this one is generated from a chapter notebook (its header names the notebook to
edit). This file is the public surface: what a reader imports.

`transformer.attention` is the attention function (its module is `transformer.attention` in
`sys.modules`, reached with `from transformer.attention import ...`). `transformer.train(config)` runs a
training run (its module is `transformer.engine.trainer`). Every public name is imported when it is
first used, so `import transformer` costs nothing: the command line (`__main__.py`) is running, and
hears a Ctrl-C, before torch is imported.

Two floors: the chapters' modules (`attention`, `multihead`, ... `decoder_only`) hold the mechanisms
they teach; `transformer.engine` (the appendices) stands on them with corpora, configuration,
checkpoints, the training run, ONNX and the command line, and the chapters never import it.

To translate: `transformer.translate(transformer.load_translator("multi30k-de-en"), ["Ein Hund läuft."])`.

A problem with what the user gives (a setting, a corpus file, a model folder, an argument) raises one of the
package's own errors, `TransformerError` and its family in `transformer.errors`, at the door where it enters
(chapter 02: a config, a public function that takes sentences, files or tensors); anything else is a bug. A
layer built from checked input keeps only the one rule it owns (h divides D, ...) and otherwise trusts its
sizes, as PyTorch's modules do.
"""

__version__ = "0.1.0"

import sys
import types


class _Package(types.ModuleType):
    """`transformer.attention` is chapter 02's function, imported when first asked for,
    even after its module is imported (importing it sets the package's attribute of the
    same name, which this setter ignores)."""

    @property
    def attention(self):
        from transformer.attention import attention

        return attention

    @attention.setter
    def attention(self, module) -> None:
        pass


sys.modules[__name__].__class__ = _Package

# every other public name is imported when first asked for (`transformer.X`) too
_WHERE = {
    "load_multi30k": "transformer.engine.corpora",
    "load_parallel": "transformer.engine.corpora",
    "load_tatoeba": "transformer.engine.corpora",
    "load_tsv": "transformer.engine.corpora",
    "Batch": "transformer.data",
    "TokenBudgetBatchSampler": "transformer.data",
    "TranslationDataset": "transformer.data",
    "collate": "transformer.data",
    "Decoder": "transformer.decoder",
    "DecoderLayer": "transformer.decoder",
    "Hypothesis": "transformer.decoding",
    "beam_search": "transformer.decoding",
    "greedy_decode": "transformer.decoding",
    "translate": "transformer.translation",
    "corpus_bleu": "transformer.evaluation",
    "corpus_chrf": "transformer.evaluation",
    "evaluate_pairs": "transformer.engine.evaluate",
    "PositionalEncoding": "transformer.embedding",
    "TokenEmbedding": "transformer.embedding",
    "sinusoidal_positional_encoding": "transformer.embedding",
    "CheckpointError": "transformer.errors",
    "ConfigError": "transformer.errors",
    "CorpusError": "transformer.errors",
    "InputError": "transformer.errors",
    "TransformerError": "transformer.errors",
    "FeedForward": "transformer.blocks",
    "PAPER": "transformer.blocks",
    "Parts": "transformer.blocks",
    "Encoder": "transformer.encoder",
    "EncoderLayer": "transformer.encoder",
    "causal_mask": "transformer.masking",
    "padding_mask": "transformer.masking",
    "Transformer": "transformer.model",
    "TransformerConfig": "transformer.model",
    "MultiHeadAttention": "transformer.multihead",
    "Tokenizer": "transformer.tokenizer",
    "train_tokenizer": "transformer.tokenizer",
    "load_checkpoint": "transformer.engine.loading",
    "evaluate_checkpoint": "transformer.engine.evaluate",
    "load_translator": "transformer.engine.shipped",
    "TrainConfig": "transformer.engine.config",
    "label_smoothed_loss": "transformer.loss",
    "train": "transformer.engine.trainer",
    "AttentionMaps": "transformer.visualize",
    "attention_maps": "transformer.visualize",
    "plot_attention": "transformer.visualize",
    "RMSNorm": "transformer.modern",
    "RotaryPositions": "transformer.modern",
    "SwiGLU": "transformer.modern",
    "modern_parts": "transformer.modern",
    "kv_cache_bytes": "transformer.attention_cost",
    "tiled_attention": "transformer.attention_cost",
    "export_onnx": "transformer.engine.onnx_export",
    "OnnxTranslator": "transformer.engine.onnx_translator",
    "DecoderOnly": "transformer.decoder_only",
    "sample": "transformer.decoder_only",
    "ModelConfig": "transformer.engine.model_config",
    "build_model": "transformer.engine.model_config",
}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # asked once
        return value
    raise AttributeError(f"module 'transformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


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
