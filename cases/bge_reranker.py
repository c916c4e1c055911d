"""Seed 002: the BGE reranker diverges at batch 4 on TensorRT 8.6, even in FP32.

An XLM-RoBERTa cross-encoder with the bge-reranker-base configuration (BAAI/bge-reranker-base,
config.json), randomly initialised from the case seed so no download is needed; give
`options = { checkpoint = "/path/to/bge-reranker-base" }` in matrix.toml to load real weights
from a local directory. Batch and sequence are dynamic axes, as `optimum-cli export onnx` makes
them. Expected on 8.6: batch 4 fails (max abs diff 1.0019 reported), batch 1 passes; 10.0 fixed it.
"""

import torch
from torch import nn
from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

from matrix.case import Export, case

# BAAI/bge-reranker-base config.json
BGE_RERANKER_BASE = dict(
    vocab_size=250002, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=514, type_vocab_size=1,
    layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1,
)


class Logits(nn.Module):
    """Return the relevance logits as a plain tensor (what the exported ONNX graph outputs)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


def load_model(checkpoint: str | None, overrides: dict) -> nn.Module:
    if checkpoint:
        return XLMRobertaForSequenceClassification.from_pretrained(checkpoint, attn_implementation="eager")
    config = XLMRobertaConfig(**{**BGE_RERANKER_BASE, **overrides}, attn_implementation="eager")
    return XLMRobertaForSequenceClassification(config)


def pair_batch(batch: int, seq_len: int, vocab: int) -> dict[str, torch.Tensor]:
    """Token ids for query/passage pairs of different lengths, padded like a tokenizer pads them."""
    ids = torch.randint(3, vocab, (batch, seq_len))
    mask = torch.ones(batch, seq_len, dtype=torch.int64)
    for row in range(batch):
        length = seq_len - (row * seq_len) // (2 * batch)  # row 0 full, later rows shorter
        ids[row, 0], ids[row, length - 1] = 0, 2  # <s> ... </s>
        ids[row, length:], mask[row, length:] = 1, 0  # <pad>
    return {"input_ids": ids, "attention_mask": mask}


@case(
    params={"batch": [1, 4]},
    export=Export(opset=17, output_names=("logits",),
                  dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                "attention_mask": {0: "batch", 1: "sequence"},
                                "logits": {0: "batch"}}),
)
def bge_reranker(batch: int, seq_len: int = 32, checkpoint: str | None = None, config: dict | None = None):
    """XLM-RoBERTa cross-encoder, bge-reranker-base shape (12 layers, 768 hidden, 250k vocab)."""
    model = load_model(checkpoint, config or {})
    return Logits(model), pair_batch(batch, seq_len, model.config.vocab_size)
