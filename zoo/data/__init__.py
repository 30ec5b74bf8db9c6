"""Data: readers and preprocessing (no lightning here)."""

from zoo.data.trees import (
    REMOVED_TAGS,
    ParsedSentence,
    Tree,
    base_label,
    collapse_unary,
    normalize_word,
    parse_bracketed,
    preprocess,
    preprocess_trees,
    read_bracketed,
    read_mrg,
    remove_tags,
    spans_to_tensor,
)

__all__ = [
    "REMOVED_TAGS",
    "ParsedSentence",
    "Tree",
    "base_label",
    "collapse_unary",
    "normalize_word",
    "parse_bracketed",
    "preprocess",
    "preprocess_trees",
    "read_bracketed",
    "read_mrg",
    "remove_tags",
    "spans_to_tensor",
]

# Sequence data for the likelihood tasks (docs/training-api.md). The data modules import lightning:
# they (and the readers beside them) load on first access, so ``import zoo.data`` stays light.
from zoo.data.buckets import BucketBatchSampler, PackedSequences, collate, collate_frames, collate_tokens  # noqa: E402
from zoo.data.vocab import Vocabulary  # noqa: E402

_LAZY = {
    "SequenceDataModule": "zoo.data.datamodule",
    "PTBDataModule": "zoo.data.ptb",
    "read_ptb": "zoo.data.ptb",
    "MusicDataModule": "zoo.data.music",
    "NUM_KEYS": "zoo.data.music",
    "frames_to_piano_roll": "zoo.data.music",
    "load_chorales": "zoo.data.music",
    "read_music_pickle": "zoo.data.music",
    "split_pieces": "zoo.data.music",
    "stream_to_piano_roll": "zoo.data.music",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'zoo.data' has no attribute {name!r}")


__all__ += [
    "BucketBatchSampler",
    "PackedSequences",
    "Vocabulary",
    "collate",
    "collate_frames",
    "collate_tokens",
    *_LAZY,
]

# Sentences and gold trees for grammars (zoo.tasks.ParsingTask).
_LAZY.update(
    {
        "PCFGDataModule": "zoo.data.pcfg",
        "SentenceDataset": "zoo.data.pcfg",
        "collate_sentences": "zoo.data.pcfg",
        "read_tree_file": "zoo.data.pcfg",
    }
)
__all__ += ["PCFGDataModule", "SentenceDataset", "collate_sentences", "read_tree_file"]

# Feature sequences with known segments for HSMMs (zoo.tasks.SegmentationTask).
from zoo.data.features import IGNORE_LABEL, collate_features, fit_feature_transform  # noqa: E402

_LAZY.update(
    {
        "SegmentDataModule": "zoo.data.segments",
        "SequenceFeatures": "zoo.data.segments",
        "SmartwatchDataModule": "zoo.data.smartwatch",
        "load_smartwatch": "zoo.data.smartwatch",
        "CrossTaskDataModule": "zoo.data.crosstask",
        "read_step_annotations": "zoo.data.crosstask",
        "read_video_list": "zoo.data.crosstask",
        "NpyFolderDataModule": "zoo.data.npy_folder",
        "read_npy_folder": "zoo.data.npy_folder",
    }
)
__all__ += [
    "IGNORE_LABEL",
    "collate_features",
    "fit_feature_transform",
    "SegmentDataModule",
    "SequenceFeatures",
    "SmartwatchDataModule",
    "load_smartwatch",
    "CrossTaskDataModule",
    "read_step_annotations",
    "read_video_list",
    "NpyFolderDataModule",
    "read_npy_folder",
]
# Captions as GPT-2 ids for the structured VAE (zoo.tasks.VAETask).
_LAZY.update(
    {
        "CaptionsDataModule": "zoo.data.captions",
        "read_captions": "zoo.data.captions",
        "gpt2_tokenizer": "zoo.data.gpt2_bpe",
    }
)
__all__ += ["CaptionsDataModule", "read_captions", "gpt2_tokenizer"]
