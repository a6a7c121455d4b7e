"""Model files a user hands over, read within budgets before any library parses them.

A model file states its own sizes (a GGUF array count, a safetensors header length, a tensor's extent), and a
lying one makes a plain reader allocate without bound or read past the end. Every count and length here is
checked against the file's size before anything is allocated; only regular files are read; past any budget
the refusal is one ``ModelFileError`` line (exit 2). ``gguf`` walks a GGUF file's header, ``safetensors`` a
safetensors header, and ``folder`` every file a model folder's loader reads.
"""

from ledger.model_files.errors import ModelFileError
from ledger.model_files.folder import check_model_folder, check_model_source
from ledger.model_files.gguf import GGUFMetadata, read_gguf_metadata
from ledger.model_files.safetensors import check_safetensors

__all__ = [
    "GGUFMetadata",
    "ModelFileError",
    "check_model_folder",
    "check_model_source",
    "check_safetensors",
    "read_gguf_metadata",
]
